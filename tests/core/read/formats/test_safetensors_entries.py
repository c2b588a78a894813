"""safetensors header entries: the few-step path for sound entries gives what the full checks give."""

from __future__ import annotations

import pytest

from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.bytes.files import FileMap
from ckptview.core.read.formats.safetensors_file import tensor_from_entry


class _Entry(dict):
    """A dict subclass: takes the full checks (the reference)."""


ENTRIES = [
    {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
    {"dtype": "BF16", "shape": [4, 1, 5], "data_offsets": [24, 64]},
    {"dtype": "F64", "shape": [], "data_offsets": [64, 72]},
    {"dtype": "I8", "shape": [0, 3], "data_offsets": [72, 72]},
    {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]},  # too few bytes
    {"dtype": "F32", "shape": [2, 3], "data_offsets": [90, 114]},  # past the data region
    {"dtype": "F32", "shape": [-2, 3], "data_offsets": [0, 24]},
    {"dtype": "F32", "shape": [True, 3], "data_offsets": [0, 12]},
    {"dtype": "F32", "shape": [2, 3], "data_offsets": [24, 0]},
    {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, False]},
    {"dtype": "XX", "shape": [1], "data_offsets": [0, 4]},
    {"dtype": "U8", "shape": [1 << 40], "data_offsets": [0, 100]},
]


def _describe(make):
    try:
        info = make()
    except CheckpointFormatError as exc:
        return ("error", str(exc))
    s = info.storage
    return (info.dtype, info.shape, info.stride, info.offset, info.broken, info.requires_grad, info.extra,
            s.key, s.dtype, s.numel, s.device, s.broken, s.source.describe())


@pytest.mark.parametrize("entry", ENTRIES)
def test_sound_entries_take_few_steps_and_match_the_checks(entry, tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(100))
    fmap = FileMap(str(path))
    fast = _describe(lambda: tensor_from_entry("w", entry, fmap, 8, 92))
    full = _describe(lambda: tensor_from_entry("w", _Entry(entry), fmap, 8, 92))
    assert fast == full


@pytest.mark.parametrize("piece_bytes", [8, 1 << 30])
@pytest.mark.parametrize("entry", ENTRIES)
def test_the_reader_loop_gives_what_the_full_checks_give(entry, piece_bytes, tmp_path, monkeypatch):
    """The reader converts sound entries itself (in pieces or whole): the same TensorInfo, or the same error."""
    import json
    import struct

    from ckptview.core import open_checkpoint
    from ckptview.core.read.formats import safetensors_file

    monkeypatch.setattr(safetensors_file, "PIECE_BYTES", piece_bytes)
    # An empty first entry: "w" is not the header's first member, and shares no byte with it.
    header = json.dumps({"first": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}, "w": entry}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(92))
    data_start = 8 + len(header)
    fmap = FileMap(str(path))
    full = _describe(lambda: tensor_from_entry("w", _Entry(entry), fmap, data_start, 92))

    def opened():
        ckpt = open_checkpoint(path)
        ckpt.close()
        return ckpt.tensor("w")

    assert _describe(opened) == full

"""safetensors entries whose byte ranges overlap are refused, as the safetensors library refuses them.

A header of 30,000 entries aliasing one 160 KB range was only warned about: `export` wrote every alias in
full (16 GB from an 8.5 MB file) and `info --stats` and `diff` read them all (issue 24, finding 18).
"""

from __future__ import annotations

import json
import os
import struct

import pytest
from safetensors import SafetensorError, safe_open

from ckptview.cli import main
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.formats import safetensors_file
from ckptview.core.read.open import open_checkpoint
from tests.support.cli_failure import failure_stdout


def _write(path, header: dict, data: bytes) -> str:
    raw = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + data)
    return str(path)


def _aliases(n: int, nbytes: int) -> dict:
    """`n` entries over the same `nbytes` (the attack: each one exported or read in full)."""
    return {f"alias.{i}": {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]} for i in range(n)}


def _cases() -> dict[str, tuple[dict, int]]:
    sound = {f"w{i}": {"dtype": "F32", "shape": [4], "data_offsets": [16 * i, 16 * i + 16]} for i in range(40)}
    partial = dict(sound)
    partial["w7"] = {"dtype": "F32", "shape": [5], "data_offsets": [112, 132]}  # reaches 4 bytes into w8
    shuffled = dict(sorted(partial.items(), key=lambda kv: kv[0][::-1]))  # out of offset order: sorted later
    twin = {**sound, "twin": {"dtype": "I32", "shape": [2, 2], "data_offsets": [320, 336]}}  # w20's bytes
    empty_inside = {**sound, "empty": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}}
    late = {**sound, "late": {"dtype": "F16", "shape": [2], "data_offsets": [4, 8]}}  # last, inside w0
    return {"aliases": (_aliases(300, 4096), 4096), "partial": (partial, 640), "shuffled": (shuffled, 640),
            "twin": (twin, 640), "empty-inside": (empty_inside, 640), "late": (late, 640)}


@pytest.mark.parametrize("piece_bytes", [64, 1 << 40])
@pytest.mark.parametrize("case", list(_cases()))
def test_overlapping_entries_are_refused_like_safetensors_refuses_them(tmp_path, monkeypatch, case, piece_bytes,
                                                                      capsys):
    monkeypatch.setattr(safetensors_file, "PIECE_BYTES", piece_bytes)  # in pieces and whole
    monkeypatch.setattr(safetensors_file, "SORT_RUN", 7)
    header, size = _cases()[case]
    path = _write(tmp_path / f"{case}.safetensors", header, bytes(range(256)) * (size // 256 + 1))
    with pytest.raises(SafetensorError, match="invalid offset"), safe_open(path, "np"):
        pass  # the library's own reader refuses the file
    with pytest.raises(CheckpointFormatError, match="overlap") as err:
        open_checkpoint(path)
    assert "\n" not in str(err.value) and len(str(err.value)) < 300
    out = tmp_path / "out"
    for argv in (["info", path], ["info", path, "--stats"], ["info", path, "--json"], ["diff", path, path],
                 ["export", path, "--out", str(out) + "/"], ["export", path, "--out", str(out) + ".npz"]):
        assert main(argv) == 2, argv
        got = capsys.readouterr()
        assert failure_stdout(got.out, argv) and got.err.count("\n") == 1 and "overlap" in got.err, (argv, got)
    assert not os.path.exists(out) and not os.path.exists(str(out) + ".npz")


def test_touching_and_empty_entries_at_a_boundary_still_open(tmp_path):
    """Ranges that only touch (and an empty tensor at a boundary) are sound: safetensors opens them too."""
    import numpy as np

    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}
    path = _write(tmp_path / "t.safetensors", header, np.arange(4, dtype=np.float32).tobytes())
    with safe_open(path, "np") as f:
        want = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
    from ckptview.core.read.values.reading import read_values

    ckpt = open_checkpoint(path)
    got = {e.name: read_values(e.info) for e in ckpt.tensors()}
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
    assert not [w for w in ckpt.warnings if "overlap" in w]

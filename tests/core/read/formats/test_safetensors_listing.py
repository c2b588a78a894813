"""`info --json` of small safetensors files equals what the reader printed before it read in pieces.

tests/data/safetensors_listing_before.json holds the output (status, stdout, stderr; the path replaced
by PATH) of the reader as it was before headers were read in pieces, for the files `_files` writes:
overlaps in and out of offset order, broken entries, an empty and a 0-d tensor, names with JSON
punctuation, `__metadata__` in the middle or not an object, and an entry the format refuses.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import struct

import pytest

from ckptview.cli import main
from ckptview.core.read.formats import safetensors_file
from tests.support.cli_failure import failure_stdout
from tests.support.paths import DATA

BEFORE = str(DATA / "safetensors_listing_before.json")


def _entries() -> dict[str, dict]:
    return {f"layers.{i}.weight": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
            for i in range(8)}


def _files() -> dict[str, dict]:
    mixed: dict[str, dict] = {"b},\"tricky\u00e9": {"dtype": "F16", "shape": [2, 2], "data_offsets": [40, 48]}}
    mixed.update(_entries())
    mixed["__metadata__"] = {"format": "pt", "note": "}, {"}
    mixed["overlap"] = {"dtype": "BF16", "shape": [4], "data_offsets": [4, 12]}
    mixed["short"] = {"dtype": "F32", "shape": [3], "data_offsets": [48, 56]}
    mixed["outside"] = {"dtype": "F32", "shape": [1], "data_offsets": [4000, 4004]}
    mixed["negative"] = {"dtype": "I64", "shape": [-1, 2], "data_offsets": [56, 72]}
    mixed["empty"] = {"dtype": "I8", "shape": [0, 4], "data_offsets": [72, 72]}
    mixed["scalar"] = {"dtype": "F64", "shape": [], "data_offsets": [64, 72]}
    mixed["early"] = {"dtype": "U8", "shape": [2, 1], "data_offsets": [0, 2]}
    in_order = {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F16", "shape": [4], "data_offsets": [2, 10]},
                "c": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
                "d": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]},
                "e": {"dtype": "I32", "shape": [1], "data_offsets": [12, 16]},
                "f": {"dtype": "BOOL", "shape": [3], "data_offsets": [16, 19]},
                "__metadata__": {"format": "np"}}
    unordered = _entries()
    unordered["same_start"] = {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}
    unordered["tail"] = {"dtype": "BOOL", "shape": [3], "data_offsets": [40, 43]}
    bad_meta = {"__metadata__": [1, 2], **_entries()}
    return {"mixed": mixed, "in_order": in_order, "unordered": unordered, "bad_meta": bad_meta,
            "unknown_dtype": {**_entries(), "z": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}}


# The entries that share bytes with others: files holding them are refused since issue 24 (as the
# safetensors library refuses them); without them, the listing is the one recorded before, less them.
OVERLAPPING = {"mixed": ("overlap", "early"), "in_order": ("b", "e"), "unordered": ("same_start",)}


def _info(path: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["info", path, "--json"])
    text = out.getvalue()
    if status != 0:  # the failure's object (docs/cli.md); the listing recorded before had nothing there
        assert failure_stdout(text), text
        text = ""
    return status, text.replace(json.dumps(path)[1:-1], "PATH"), err.getvalue().replace(path, "PATH")


# Fields `info --json` gained after the listing was recorded (each checked against torch where it is made).
ADDED = ("parameters",)


def _recorded_fields(stdout: str) -> object:
    """The JSON of `info` with only the fields it had when the listing was recorded (text that is no JSON as
    it is): the listing itself must not change; a field added since is another test's."""
    try:
        listing = json.loads(stdout)
    except ValueError:
        return stdout
    if isinstance(listing, dict):
        assert all(isinstance(listing.get(key, 0), int) for key in ADDED)
        listing = {k: v for k, v in listing.items() if k not in ADDED}
        # Worded since (issue 45): an entry past the end of the file is "cut off", and a warning says the
        # file looks cut short. The recorded wording, so that the listing is compared as it was.
        listing["warnings"] = [_as_recorded(w) for w in listing.get("warnings", [])
                               if not w.startswith("the file is cut short")]
        for tensor in listing.get("tensors", []):
            if "broken" in tensor:
                tensor["broken"] = _as_recorded(tensor["broken"])
    return listing


_CUT_OFF = re.compile(r"cut off: its data_offsets \[(-?\d+), (-?\d+)\] end past the (\d+)-byte data region the file "
                      r"holds")


def _as_recorded(text: str) -> str:
    return _CUT_OFF.sub(r"data_offsets [\1, \2] lie outside the \3-byte data region", text)


def _write(path: str, header: dict) -> int:
    raw = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + bytes(range(96)))
    return 8 + len(raw) + 96


@pytest.mark.parametrize(("piece_bytes", "sort_run"), [(8, 2), (100, 3), (1 << 40, 1 << 15)])
@pytest.mark.parametrize("name", list(_files()))
def test_info_json_is_what_it_was_before_pieces(tmp_path, monkeypatch, name, piece_bytes, sort_run):
    monkeypatch.setattr(safetensors_file, "PIECE_BYTES", piece_bytes)
    monkeypatch.setattr(safetensors_file, "SORT_RUN", sort_run)  # ranges out of order: sorted in runs, merged
    path = str(tmp_path / f"{name}.safetensors")
    header = _files()[name]
    _write(path, header)
    status, out, err = _info(path)
    with open(BEFORE, encoding="utf-8") as fh:
        before = json.load(fh)[name]
    if name not in OVERLAPPING:
        assert (status, _recorded_fields(out), err) == (before["status"], _recorded_fields(before["stdout"]),
                                                        before["stderr"])
        return
    assert status == 2 and out == "" and err.count("\n") == 1 and "overlap in the file" in err
    dropped = OVERLAPPING[name]
    size = _write(path, {k: v for k, v in header.items() if k not in dropped})
    status, out, err = _info(path)
    want = json.loads(before["stdout"])
    want["file_size"] = size
    want["tensors"] = [t for t in want["tensors"] if t["name"] not in dropped]
    want["warnings"] = [w for w in want["warnings"] if "overlap" not in w]
    assert (status, _recorded_fields(out), err) == (before["status"], want, before["stderr"])

"""A safetensors header read in pieces gives exactly what the whole header gives: members, errors, listing.

The pieces exist so a 100 MB header neither holds the interpreter lock for seconds nor holds every
parsed entry at once; these tests make pieces of a few bytes so small files take that path too.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from ckptview.cli import main
from ckptview.core import open_checkpoint
from ckptview.core.budget import FLOOR
from ckptview.core.errors import Cancelled, CheckpointError, CheckpointFormatError
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.formats import safetensors_file
from ckptview.core.read.formats.safetensors_header import NotInPieces, header_pieces, parse_whole
from ckptview.core.read.values.reading import read_values
from tests.support.cli_failure import failure_stdout
from tests.support.torch_compare import same_values


def _members(raw: bytes, piece_bytes: int) -> list[tuple[str, object]]:
    """Every member the pieces hold, in order (NotInPieces propagates)."""
    return [item for piece, _done in header_pieces(raw, piece_bytes) for item in piece.items()]


def _entries(n: int, names: list[str] | None = None) -> dict[str, object]:
    names = names or [f"layers.{i}.weight" for i in range(n)]
    return {name: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i, name in enumerate(names)}


TRICKY_NAMES = ['a},"b', 'c}, "d":{', 'quote\\"},', "back\\\\", "}", ",", "\u00e9t\u00e9 }, \u4e2d", "{}", "x" * 300]


@pytest.mark.parametrize("dump", [
    lambda h: json.dumps(h),
    lambda h: json.dumps(h, separators=(",", ":")),
    lambda h: json.dumps(h, indent=2),
    lambda h: json.dumps(h, indent="\t", ensure_ascii=False),
    lambda h: " \n" + json.dumps(h, separators=(" ,\r\n ", " :\t")) + "    ",
])
@pytest.mark.parametrize("piece_bytes", [1, 7, 64, 1 << 20])
def test_pieces_hold_the_members_of_the_whole_header(dump, piece_bytes):
    header = {"__metadata__": {"format": "pt", "nested": '{"x": {}}, "y": 1', "z": "},},"}}
    header.update(_entries(0, TRICKY_NAMES))
    header.update(_entries(40))
    header["obj"] = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": {"a": {"b": [{}]}, "c": "}, "}}
    raw = dump(header).encode()
    assert _members(raw, piece_bytes) == list(json.loads(raw).items())
    pieces = list(header_pieces(raw, piece_bytes))
    assert [done for _p, done in pieces] == sorted(done for _p, done in pieces)
    assert pieces[-1][1] == len(raw)


def test_pieces_stay_near_their_size():
    """The work between two pieces is bounded: no piece spans much more than its size plus one member."""
    raw = json.dumps(_entries(5000)).encode()
    done = [0] + [d for _p, d in header_pieces(raw, 4096)]
    member = max(len(json.dumps({k: v})) for k, v in _entries(5000).items())
    assert len(done) > len(raw) // (4096 + member)
    assert max(b - a for a, b in zip(done, done[1:], strict=False)) <= 4096 + member + 2


@pytest.mark.parametrize("text", [
    '{"a": {}},', '{,"a": {}}', '{"a": {},, "b": {}}', '{"a": {}, }', '{"a": {}, "b": {}', '{"a": {}} x',
    '\ufeff{"a": {}}', '[{"a": {}}]', '{"a": {}, "b": [1, 2,}', '{"a": {}, "b": {"c": 1}, "d"}', "",
    '{"a": {}, "b": {"c": "\x01"}}', '{"a": {}, "b": 1e999999999}', '{"a": {},\n"b": {}} ,',
])
@pytest.mark.parametrize("piece_bytes", [1, 5, 1 << 20])
def test_what_the_whole_header_refuses_never_reads_in_pieces(text, piece_bytes):
    raw = text.encode()
    try:
        whole = list(parse_whole(raw).items())
    except CheckpointFormatError:
        whole = None
    try:
        pieces = _members(raw, piece_bytes)
    except NotInPieces:
        pieces = None
    assert pieces is None or pieces == whole


def test_invalid_utf8_never_reads_in_pieces():
    raw = b'{"a": {}, "\xed\xa0\x80": {}, "b": {}}'  # a lone surrogate: not UTF-8
    with pytest.raises(CheckpointFormatError, match="not valid JSON"):
        parse_whole(raw)
    with pytest.raises(NotInPieces):
        _members(raw, 1)


# -- the reader: the same checkpoint in pieces as whole ---------------------------------------------------

def _write(path, header: dict | bytes, data: bytes) -> str:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return str(path)


def _info(path: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["info", path, "--json"])
    return rc, out.getvalue(), err.getvalue()


def _in_pieces_and_whole(monkeypatch, path: str) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """`info --json` (status, stdout, stderr) read in pieces of 16 bytes, and read whole."""
    monkeypatch.setattr(safetensors_file, "PIECE_BYTES", 16)
    split: list[int] = []  # pieces the header was cut into
    real_pieces = safetensors_file.header_pieces
    monkeypatch.setattr(safetensors_file, "header_pieces",
                        lambda raw, size: (split.append(1), (p for p in real_pieces(raw, size)))[1])
    pieces = _info(path)
    monkeypatch.setattr(safetensors_file, "header_pieces", real_pieces)
    assert split or _header_len(path) < 200  # a header of many pieces was read in pieces
    monkeypatch.setattr(safetensors_file, "PIECE_BYTES", 1 << 40)
    whole = _info(path)
    return pieces, whole


def _header_len(path: str) -> int:
    with open(path, "rb") as fh:
        return int(struct.unpack("<Q", fh.read(8))[0])


def _cases() -> dict[str, tuple[dict | bytes, int]]:
    good = _entries(30)
    reversed_order = dict(reversed(list(_entries(30).items())))
    overlapping = _entries(30)
    for i in range(0, 30, 3):  # each third tensor reaches into the next
        overlapping[f"layers.{i}.weight"] = {"dtype": "F16", "shape": [4], "data_offsets": [4 * i, 4 * i + 8]}
    shuffled = dict(sorted(overlapping.items(), key=lambda kv: kv[0][::-1]))
    broken = _entries(30)
    broken["layers.3.weight"] = {"dtype": "F32", "shape": [2], "data_offsets": [12, 16]}  # too few bytes
    broken["layers.7.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [4000, 4004]}  # past the end
    broken["layers.9.weight"] = {"dtype": "F32", "shape": [-1], "data_offsets": [36, 40]}
    broken["layers.11.weight"] = {"dtype": "I8", "shape": [0, 4], "data_offsets": [44, 44]}  # empty: sound
    metadata_middle = dict(list(_entries(30).items())[:15])
    metadata_middle["__metadata__"] = {"format": "pt", "note": "}, {"}
    metadata_middle.update(list(_entries(30).items())[15:])
    bad_metadata = {**_entries(30), "__metadata__": ["not", "an", "object"]}
    # JSON keeps the last value of a repeated name, at the place of the first.
    own = json.dumps({"dtype": "F32", "shape": [1], "data_offsets": [8, 12]})  # layers.2's own bytes
    repeat_bad_then_good = (json.dumps(_entries(30))[:-1] + ', "layers.2.weight": ' + own + "}")
    repeat_bad_then_good = repeat_bad_then_good.replace(
        '"layers.2.weight": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}',
        '"layers.2.weight": {"dtype": "Q9", "shape": [1], "data_offsets": [8, 12]}', 1)
    repeat_good_then_bad = (json.dumps(_entries(30))[:-1] + ', "layers.2.weight": '
                            + json.dumps({"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}) + "}")
    repeat_good_then_good = json.dumps(_entries(30))[:-1] + ', "layers.2.weight": ' + own + "}"
    repeat_metadata = '{"__metadata__": {"a": "1"}, ' + json.dumps(_entries(30))[1:-1] + ', "__metadata__": {"b": "2"}}'
    unknown_dtype = {**_entries(30), "z": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}
    not_object = {**_entries(30), "z": [1, 2]}
    bool_shape = {**_entries(30), "z": {"dtype": "F32", "shape": [1, True], "data_offsets": [48, 52]}}
    tricky = _entries(0, TRICKY_NAMES)
    return {
        "good": (good, 120), "reversed": (reversed_order, 120), "overlapping": (overlapping, 124),
        "shuffled-overlapping": (shuffled, 124), "broken": (broken, 120), "metadata-middle": (metadata_middle, 120),
        "bad-metadata": (bad_metadata, 120), "repeat-bad-then-good": (repeat_bad_then_good.encode(), 120),
        "repeat-good-then-bad": (repeat_good_then_bad.encode(), 120), "repeat-metadata": (repeat_metadata.encode(), 120),
        "repeat-good-then-good": (repeat_good_then_good.encode(), 120),
        "unknown-dtype": (unknown_dtype, 120), "not-object": (not_object, 120), "bool-shape": (bool_shape, 120),
        "tricky-names": (tricky, 40),
        "trailing-comma": (json.dumps(_entries(30))[:-1].encode() + b", }", 120),
        "empty": ({}, 0), "only-metadata": ({"__metadata__": {"a": "b"}}, 0),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_the_listing_in_pieces_is_the_listing_of_the_whole_header(monkeypatch, tmp_path, case):
    header, data_bytes = _cases()[case]
    path = _write(tmp_path / f"{case}.safetensors", header, bytes(range(256)) * (data_bytes // 256 + 1))
    pieces, whole = _in_pieces_and_whole(monkeypatch, path)
    assert pieces == whole
    rc, out, err = whole
    if case in ("unknown-dtype", "not-object", "bool-shape", "repeat-good-then-bad", "trailing-comma",
                "overlapping", "shuffled-overlapping"):  # overlaps: refused as safetensors refuses them
        assert rc == 2 and failure_stdout(out) and err.count("\n") == 1
        assert ("overlap" in err) == ("overlapping" in case)
        return
    assert rc == 0, err
    data = json.loads(out)
    reference = json.loads(header) if isinstance(header, bytes) else header
    reference.pop("__metadata__", None)
    assert [t["name"] for t in data["tensors"]] == list(reference)


def test_many_tensors_are_charged_in_pieces_as_whole(monkeypatch, tmp_path):
    """Entries are charged to the open's budget: 20 members of the header pay for all its floor allows."""
    monkeypatch.setattr(safetensors_file, "TENSOR_COST", FLOOR // 20 - 1000)  # the rest: a little else
    for n, metadata in ((21, False), (19, True), (25, True)):
        header = {**({"__metadata__": {"a": "b"}} if metadata else {}), **_entries(n)}
        path = _write(tmp_path / f"m{n}.safetensors", header, bytes(4 * n))
        pieces, whole = _in_pieces_and_whole(monkeypatch, path)
        assert pieces == whole
        assert (whole[0] == 2) == (n + metadata > 20)
        if n + metadata > 20:
            assert "would take more than" in whole[2] and "(header entries)" in whole[2]


def test_values_read_in_pieces_equal_torch(monkeypatch, tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {f"block.{i}.{kind}": torch.randn(3, i + 1, generator=gen).to(dtype)
               for i in range(12) for kind, dtype in (("w", torch.float32), ("h", torch.bfloat16), ("i", torch.float64))}
    tensors["ids"] = torch.arange(7, dtype=torch.int64)
    path = tmp_path / "real.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    monkeypatch.setattr(safetensors_file, "PIECE_BYTES", 32)
    ckpt = open_checkpoint(path)
    try:
        theirs = load_file(str(path))
        assert {e.name for e in ckpt.tensors()} == set(theirs)
        for entry in ckpt.tensors():
            assert list(entry.info.shape) == list(theirs[entry.name].shape)
            assert same_values(np.asarray(read_values(entry.info)), theirs[entry.name])
    finally:
        ckpt.close()
    pieces, whole = _in_pieces_and_whole(monkeypatch, str(path))
    assert pieces == whole and pieces[0] == 0


def test_the_reader_reports_progress_and_stops_when_told(monkeypatch, tmp_path):
    path = _write(tmp_path / "p.safetensors", _entries(200), bytes(800))
    monkeypatch.setattr(safetensors_file, "PIECE_BYTES", 256)
    steps: list[Progress] = []
    ckpt = open_checkpoint(path, ReaderContext(progress=steps.append))
    ckpt.close()
    assert len(steps) > 10 and steps[-1].done == steps[-1].total
    assert [s.done for s in steps] == sorted(s.done for s in steps)

    seen: list[Progress] = []

    def stop_after_three(step: Progress) -> None:
        seen.append(step)
        if len(seen) == 3:
            raise Cancelled("cancelled")

    closed: list[object] = []
    real_close = safetensors_file.FileMap.close
    monkeypatch.setattr(safetensors_file.FileMap, "close", lambda self: (closed.append(self), real_close(self)))
    with pytest.raises((Cancelled, CheckpointError)):
        open_checkpoint(path, ReaderContext(progress=stop_after_three))
    assert len(seen) == 3 and len(closed) == 1  # stopped at the third piece; its file let go

    token = CancelToken()
    token.cancel()
    with pytest.raises((Cancelled, CheckpointError)):  # the context's cancel token stops it at the first piece
        open_checkpoint(path, ReaderContext(cancel=token, progress=seen.append))
    assert len(seen) == 3

"""A safetensors JSON header, read whole or in pieces of a few hundred KB.

A 100 MB header (900,000 tiny tensors) parsed by one `json.loads` call holds the interpreter lock for
seconds (a window's GUI thread stops meanwhile) and holds every parsed entry at once. `header_pieces`
cuts the text at top-level commas and parses one piece at a time, so the caller converts and frees each
piece before the next, and other threads run between pieces.

Why a piece is the header's own members: a piece is parsed as `{` + piece + `}`. The parser reads it
exactly as it reads the same bytes inside the whole header, so when the closing `}` it was given ends the
object, the cut lies outside every string and nested value, right after a complete member. A cut that
is not such a point fails to parse; the piece is then made longer. Whatever does not fit this scheme
(text before the `{`, an empty piece, a piece that never parses) raises `NotInPieces`, and the caller
reads the header whole with `parse_whole`, which gives the canonical result or error.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from typing import Any

from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.bytes.files import FileIdentity
from ckptview.core.read.bytes.fs import LOCAL, FileSystem

MAX_HEADER = 100 << 20  # the safetensors library refuses headers over 100 MB too
PIECE_BYTES = 256 << 10  # ~3 ms of parsing: other threads wait no longer than that for the lock
_WS = b" \t\n\r"  # the only whitespace JSON (and Python's json) allows
_CUT = re.compile(rb"\}[ \t\n\r]*,")  # the end of an object value, then the comma after a member


class NotInPieces(Exception):
    """The header cannot be read piece by piece (malformed, or cut points that never parse)."""


def read_header_bytes(path: str, expected: FileIdentity | None = None,
                      fs: FileSystem = LOCAL) -> tuple[bytes, int, int]:
    """(raw JSON header bytes, offset of the data region, file size); validates sizes before reading.

    With `expected` (the source's identity when the open began), a file swapped in since is refused."""
    size = fs.getsize(path)
    with fs.open_regular(path, expected) as fh:  # never blocks on a FIFO
        raw_len = fh.read(8)
        if len(raw_len) < 8:
            raise CheckpointFormatError("truncated safetensors: header length missing")
        (length,) = struct.unpack("<Q", raw_len)
        if length > MAX_HEADER:
            raise CheckpointFormatError(f"safetensors header length {length} exceeds the {MAX_HEADER}-byte limit")
        if 8 + length > size:
            raise CheckpointFormatError(
                f"truncated safetensors: header declares {length} bytes, file has {size - 8} after the length")
        raw = fh.read(length)
    if len(raw) < length:  # shrunk between the size check and the read
        raise CheckpointFormatError(
            f"truncated safetensors: header declares {length} bytes, file has {len(raw)} after the length")
    return raw, 8 + length, size


def parse_whole(raw: bytes) -> dict[str, Any]:
    """The header as one JSON object (the reference: its result and errors are the format's)."""
    try:
        text = raw.decode("utf-8")
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointFormatError(f"safetensors header is not valid JSON ({str(exc)[:80]})") from None
    if not isinstance(header, dict):
        raise CheckpointFormatError("safetensors header is not a JSON object")
    return header


def header_pieces(raw: bytes, piece_bytes: int = PIECE_BYTES) -> Iterator[tuple[dict[str, Any], int]]:
    """The header's members in file order, as (dict of consecutive members, bytes read so far).

    Raises NotInPieces where the header does not split cleanly; the caller then uses `parse_whole`. Keys
    repeated across pieces are the caller's to notice (within a piece the last one wins, as in JSON).
    """
    total = len(raw)
    start = total - len(raw.lstrip(_WS))
    if raw[start:start + 1] != b"{":
        raise NotInPieces("the header does not start with an object")
    start += 1
    want = piece_bytes
    pieces = 0
    while True:  # bounded: each step parses a piece (its entries charged by the caller) or doubles its length
        match = _CUT.search(raw, start + want) if start + want < total else None
        last = match is None
        end = total if match is None else match.end() - 1  # the cut: just before the comma
        try:
            text = raw[start:end].decode("utf-8")
            piece = json.loads("{" + text) if last else json.loads("{" + text + "}")
        except (UnicodeDecodeError, ValueError, RecursionError):
            if last:
                raise NotInPieces("a piece of the header does not parse") from None
            want *= 2  # a cut inside a string or a nested value: take a longer piece
            continue
        if type(piece) is not dict or (not piece and (pieces or not last)):
            raise NotInPieces("an empty member list between commas")  # "{," or ",}" or ",,"
        pieces += 1
        yield piece, (end if last else end + 1)
        if last:
            return
        start, want = end + 1, piece_bytes

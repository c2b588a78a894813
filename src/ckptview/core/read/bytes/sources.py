"""Byte sources for storages: file ranges, zip members and in-pickle bytes, read only when asked for.

Every read of a file goes through `ckptview.core.read.bytes.files.FileMap` (positioned reads, never a memory map,
identity checked): a file that changes on disk raises `FileChangedError`, it never faults the process.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ckptview.core.budget import Budget
from ckptview.core.errors import CheckpointFormatError, TensorDataError
from ckptview.core.read.bytes.files import FileMap, ReadAhead

__all__ = ["FileSlice", "MemorySource", "ZipMember"]

if TYPE_CHECKING:
    from ckptview.core.read.bytes.zipdir import ZipEntry

MAX_INFLATED_RECORD = 256 << 20
_PIECE = 1 << 20  # bytes read or inflated between two charges of a record read whole


class FileSlice:
    """`length` bytes at `offset` of a file."""

    __slots__ = ("fmap", "length", "offset")

    def __init__(self, fmap: FileMap, offset: int, length: int) -> None:
        self.fmap, self.offset, self.length = fmap, offset, length

    def describe(self) -> str:
        return f"{os.path.basename(self.fmap.path)} @ {self.offset}"

    def file_range(self) -> tuple[str, int, int]:
        """(path, offset, length) of the bytes in the file."""
        return self.fmap.path, self.offset, self.length

    def file_span(self, ahead: ReadAhead | None = None) -> tuple[FileMap, int, int]:
        """(file, offset, length) of the bytes, for chunked reads."""
        return self.fmap, self.offset, self.length

    def _check_bounds(self) -> None:
        if self.offset < 0 or self.offset + self.length > self.fmap.size:
            raise TensorDataError(
                f"storage bytes {self.offset}..{self.offset + self.length} lie beyond the end of the file "
                f"({self.fmap.size} bytes)"
            )

    def read_range(self, start: int, length: int, ahead: ReadAhead | None = None) -> bytes | bytearray:
        """`length` bytes from `start` of the slice (a fresh, writable buffer)."""
        self._check_bounds()
        if start < 0 or start + length > self.length:
            raise TensorDataError(f"bytes {start}..{start + length} lie outside the storage ({self.length} bytes)")
        buf = bytearray(length)
        self.fmap.readinto(self.offset + start, buf, ahead=ahead)
        return buf

    def open_buffer(self) -> memoryview:
        """The slice's bytes, read into memory."""
        return memoryview(self.read_range(0, self.length))


class MemorySource:
    """Bytes that live inside the pickle itself (tensors pickled as NumPy arrays)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def describe(self) -> str:
        return f"{len(self.data)} bytes inside the pickle"

    def read_range(self, start: int, length: int, ahead: ReadAhead | None = None) -> bytes:
        """`length` bytes from `start`."""
        if start < 0 or start + length > len(self.data):
            raise TensorDataError(f"bytes {start}..{start + length} lie outside the storage ({len(self.data)} bytes)")
        return self.data[start : start + length]

    def open_buffer(self) -> memoryview:
        return memoryview(self.data)


class ZipMember:
    """A member of a zip archive: read in place when stored, inflated (bounded) when compressed.

    It keeps the archive's own directory entry (no copy of its fields: a listing makes 100,000)."""

    __slots__ = ("_data_offset", "entry", "fmap", "max_bytes")

    def __init__(self, fmap: FileMap, entry: ZipEntry) -> None:
        self.fmap, self.entry = fmap, entry
        # Set by the reader to the bytes the storage needs: a member declaring (and inflating to)
        # gigabytes behind a 16-byte storage is a zip bomb, so never inflate past this.
        self.max_bytes: int | None = None
        self._data_offset: int | None = None

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def header_offset(self) -> int:
        return self.entry.header_offset

    @property
    def compress_type(self) -> int:
        return self.entry.compress_type

    @property
    def compress_size(self) -> int:
        return self.entry.compress_size

    @property
    def file_size(self) -> int:
        return self.entry.file_size

    def describe(self) -> str:
        return f"{self.name} in {os.path.basename(self.fmap.path)}"

    def data_offset(self, ahead: ReadAhead | None = None) -> int:
        """Offset of the member's bytes: after its local header (read once, 30 bytes plus names)."""
        if self._data_offset is None:
            head = self.fmap.read(self.header_offset, 30, ahead)
            if len(head) < 30 or head[:4] != b"PK\x03\x04":
                raise CheckpointFormatError(f"corrupt zip: local header of '{self.name}' is missing")
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            self._data_offset = self.header_offset + 30 + name_len + extra_len
        return self._data_offset

    def file_range(self) -> tuple[str, int, int] | None:
        """(path, offset, length) when the member is stored uncompressed, else None."""
        if self.compress_type != 0:
            return None
        return self.fmap.path, self.data_offset(), self.compress_size

    def file_span(self, ahead: ReadAhead | None = None) -> tuple[FileMap, int, int] | None:
        """(file, offset, length) when the member is stored uncompressed, else None."""
        if self.compress_type != 0:
            return None
        return self.fmap, self._raw_bounds(ahead), self.compress_size

    def _raw_bounds(self, ahead: ReadAhead | None = None) -> int:
        start = self.data_offset(ahead)
        if start + self.compress_size > self.fmap.size:
            raise TensorDataError(f"truncated zip: record '{self.name}' runs past the end of the file")
        if self.compress_type not in (0, 8):
            raise TensorDataError(f"record '{self.name}' uses unsupported zip compression {self.compress_type}")
        return start

    def _wanted(self) -> int:
        return self.file_size if self.max_bytes is None else min(self.file_size, self.max_bytes)

    def read_range(self, start: int, length: int, ahead: ReadAhead | None = None) -> bytes | bytearray:
        """`length` bytes from `start` of the member's (inflated) content."""
        if self.compress_type != 0:
            return b"".join(self.iter_inflated(start, length, max(length, 1), ahead))
        data_start = self._raw_bounds(ahead)
        if start < 0 or start + length > self.compress_size:
            raise TensorDataError(f"record '{self.name}' is shorter than the view needs")
        buf = bytearray(length)
        self.fmap.readinto(data_start + start, buf, ahead=ahead)
        return buf

    def open_buffer(self) -> memoryview:
        """The member's bytes in memory (inflated no further than the storage needs)."""
        if self.compress_type == 0:
            return memoryview(self.read_range(0, self.compress_size))
        # Inflate no more than the declared size, and no more than the storage needs: a zip bomb
        # cannot make us allocate beyond what the tensor itself accounts for.
        want = self._wanted()
        out = b"".join(self._inflate(0, want, max(want, 1), exact=False))
        if len(out) != want:
            raise TensorDataError(f"corrupt zip: record '{self.name}' inflates to {len(out)} bytes, "
                                  f"declared {self.file_size}")
        return memoryview(out)

    def iter_inflated(self, start: int, length: int, block: int, ahead: ReadAhead | None = None) -> Iterator[bytes]:
        """`length` bytes from `start` of a compressed member, inflated `block` bytes at a time."""
        self._raw_bounds(ahead)
        if start < 0 or start + length > self._wanted():
            raise TensorDataError(f"record '{self.name}' is shorter than the view needs")
        return self._inflate(start, length, block, exact=True, ahead=ahead)

    def _inflate(self, start: int, length: int, block: int, exact: bool,
                 ahead: ReadAhead | None = None) -> Iterator[bytes]:
        """Inflate the compressed bytes, read from the file 1 MiB at a time; yields `block`-sized pieces.

        Pieces are handed on as zlib made them whenever one is exactly a block (the usual case): no copy.
        """
        raw_start = self._raw_bounds(ahead)
        inflater = zlib.decompressobj(-15)
        fed, step, skip = 0, 1 << 20, start
        pieces: list[bytes] = []
        have = 0
        try:
            while length > 0:
                need = min(block, length)
                while have < need:  # never more than two blocks held
                    if inflater.unconsumed_tail:
                        chunk = inflater.decompress(inflater.unconsumed_tail, block)
                    elif fed < self.compress_size and not inflater.eof:
                        raw = self.fmap.read(raw_start + fed, min(step, self.compress_size - fed), ahead)
                        chunk = inflater.decompress(raw, block)
                        fed += step
                    elif exact:
                        raise TensorDataError(f"corrupt zip: record '{self.name}' ends early")
                    else:
                        need = length = have
                        break
                    if skip:
                        drop = min(skip, len(chunk))
                        chunk, skip = chunk[drop:], skip - drop
                    if chunk:
                        pieces.append(chunk)
                        have += len(chunk)
                if need == 0:
                    return
                if len(pieces) == 1 and have == need:
                    out, pieces, have = pieces[0], [], 0
                else:
                    joined = b"".join(pieces)
                    out, rest = joined[:need], joined[need:]
                    pieces, have = ([rest] if rest else []), len(rest)
                yield out
                length -= need
        except zlib.error as exc:
            raise TensorDataError(f"corrupt zip: record '{self.name}' does not inflate ({exc})") from None

    def read_all(self, limit: int, budget: Budget | None = None, units: Callable[[bytes | bytearray], int] = len,
                 what: str = "bytes read") -> bytes:
        """The member's bytes (for pickles and small records), refusing more than `limit`.

        With a `budget`, every piece is charged as it is read or inflated (`units(piece)`: its length, or
        what parsing it will cost), so a record that inflates past what the file pays for stops there, a
        piece past the budget, whatever size it declares."""
        if self.compress_type != 0:
            # Compressed records (torch deflates TorchScript code) are inflated in memory: one allocation,
            # bounded far below what a stored record may be (read from the file as it is).
            limit = min(limit, MAX_INFLATED_RECORD)
        if self.file_size > limit:
            raise CheckpointFormatError(
                f"record '{self.name}' declares {self.file_size} bytes, more than the {limit} allowed")
        if budget is None:
            return bytes(self.open_buffer())
        pieces: Iterator[bytes | bytearray]
        if self.compress_type == 0:
            pieces = (self.read_range(start, min(_PIECE, self.compress_size - start))
                      for start in range(0, self.compress_size, _PIECE))
            want = self.compress_size
        else:
            want = self._wanted()
            pieces = self._inflate(0, want, _PIECE, exact=False)
        out = bytearray()
        for piece in pieces:  # charged: each piece, before the next is read
            budget.charge(units(piece), what)
            out += piece
        if len(out) != want:
            raise TensorDataError(f"corrupt zip: record '{self.name}' inflates to {len(out)} bytes, "
                                  f"declared {self.file_size}")
        return bytes(out)

"""Byte sources for storages: read-only memory maps of file ranges and zip members, opened lazily."""

from __future__ import annotations

import mmap
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ckptview.core.errors import CheckpointFormatError, TensorDataError

if TYPE_CHECKING:
    from ckptview.core.model import Checkpoint

_EMPTY = memoryview(b"")
MAX_INFLATED_RECORD = 256 << 20


class FileMap:
    """A read-only map of one file, made on first use and shared by every slice of that file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._map: mmap.mmap | None = None
        self._size: int | None = None
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        if self._size is None:
            self._size = os.path.getsize(self.path)
        return self._size

    def view(self) -> memoryview:
        with self._lock:
            if self._map is None:
                if self.size == 0:
                    return _EMPTY
                with open(self.path, "rb") as fh:
                    self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            return memoryview(self._map)

    def read(self, offset: int, length: int) -> bytes:
        """Read a small range without mapping (headers)."""
        with open(self.path, "rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    def close(self) -> None:
        with self._lock:
            if self._map is not None:
                try:
                    self._map.close()
                except BufferError:
                    return  # a view is still alive; the map closes when it is collected
                self._map = None


class FileSlice:
    """`length` bytes at `offset` of a mapped file."""

    __slots__ = ("fmap", "length", "offset")

    def __init__(self, fmap: FileMap, offset: int, length: int) -> None:
        self.fmap, self.offset, self.length = fmap, offset, length

    def describe(self) -> str:
        return f"{os.path.basename(self.fmap.path)} @ {self.offset}"

    def file_range(self) -> tuple[str, int, int]:
        """(path, offset, length) of the bytes in the file, for streamed reads that bypass the map."""
        return self.fmap.path, self.offset, self.length

    def open_buffer(self) -> memoryview:
        if self.offset < 0 or self.offset + self.length > self.fmap.size:
            raise TensorDataError(
                f"storage bytes {self.offset}..{self.offset + self.length} lie beyond the end of the file "
                f"({self.fmap.size} bytes)"
            )
        return self.fmap.view()[self.offset : self.offset + self.length]


class MemorySource:
    """Bytes that live inside the pickle itself (tensors pickled as NumPy arrays)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def describe(self) -> str:
        return f"{len(self.data)} bytes inside the pickle"

    def open_buffer(self) -> memoryview:
        return memoryview(self.data)


class ZipMember:
    """A member of a zip archive: read in place when stored, inflated (bounded) when compressed."""

    __slots__ = ("_data_offset", "compress_size", "compress_type", "file_size", "fmap", "header_offset",
                 "max_bytes", "name")

    def __init__(self, fmap: FileMap, name: str, header_offset: int, compress_type: int,
                 compress_size: int, file_size: int) -> None:
        self.fmap, self.name = fmap, name
        self.header_offset, self.compress_type = header_offset, compress_type
        self.compress_size, self.file_size = compress_size, file_size
        # Set by the reader to the bytes the storage needs: a member declaring (and inflating to)
        # gigabytes behind a 16-byte storage is a zip bomb, so never inflate past this.
        self.max_bytes: int | None = None
        self._data_offset: int | None = None

    def describe(self) -> str:
        return f"{self.name} in {os.path.basename(self.fmap.path)}"

    def data_offset(self) -> int:
        """Offset of the member's bytes: after its local header (read once, 30 bytes plus names)."""
        if self._data_offset is None:
            head = self.fmap.read(self.header_offset, 30)
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

    def _raw(self) -> memoryview:
        start = self.data_offset()
        if start + self.compress_size > self.fmap.size:
            raise TensorDataError(f"truncated zip: record '{self.name}' runs past the end of the file")
        raw = self.fmap.view()[start : start + self.compress_size]
        if self.compress_type not in (0, 8):
            raise TensorDataError(f"record '{self.name}' uses unsupported zip compression {self.compress_type}")
        return raw

    def _wanted(self) -> int:
        return self.file_size if self.max_bytes is None else min(self.file_size, self.max_bytes)

    def open_buffer(self) -> memoryview:
        raw = self._raw()
        if self.compress_type == 0:
            return raw
        # Inflate no more than the declared size, and no more than the storage needs: a zip bomb
        # cannot make us allocate beyond what the tensor itself accounts for.
        want = self._wanted()
        inflater = zlib.decompressobj(-15)
        try:
            out = inflater.decompress(raw, want)
        except zlib.error as exc:
            raise TensorDataError(f"corrupt zip: record '{self.name}' does not inflate ({exc})") from None
        if len(out) != want:
            raise TensorDataError(f"corrupt zip: record '{self.name}' inflates to {len(out)} bytes, "
                                  f"declared {self.file_size}")
        return memoryview(out)

    def iter_inflated(self, start: int, length: int, block: int) -> Iterator[bytes]:
        """`length` bytes from `start` of a compressed member, inflated `block` bytes at a time."""
        raw = self._raw()
        if start < 0 or start + length > self._wanted():
            raise TensorDataError(f"record '{self.name}' is shorter than the view needs")
        inflater = zlib.decompressobj(-15)
        fed, step, skip, buf = 0, 1 << 20, start, bytearray()
        try:
            while length > 0:
                need = min(block, length)
                while len(buf) < need:  # buf never holds more than two blocks
                    if inflater.unconsumed_tail:
                        chunk = inflater.decompress(inflater.unconsumed_tail, block)
                    elif fed < len(raw) and not inflater.eof:
                        chunk = inflater.decompress(raw[fed : fed + step], block)
                        fed += step
                    else:
                        raise TensorDataError(f"corrupt zip: record '{self.name}' ends early")
                    if skip:
                        drop = min(skip, len(chunk))
                        chunk, skip = chunk[drop:], skip - drop
                    buf += chunk
                yield bytes(buf[:need])
                del buf[:need]
                length -= need
        except zlib.error as exc:
            raise TensorDataError(f"corrupt zip: record '{self.name}' does not inflate ({exc})") from None

    def read_all(self, limit: int) -> bytes:
        """The member's bytes (for pickles and small records), refusing more than `limit`."""
        if self.compress_type != 0:
            # torch never compresses its records; a compressed one is inflated in memory, so it gets a
            # far smaller budget than a stored one (which is read from the file as it is).
            limit = min(limit, MAX_INFLATED_RECORD)
        if self.file_size > limit:
            raise CheckpointFormatError(
                f"record '{self.name}' declares {self.file_size} bytes, more than the {limit} allowed")
        return bytes(self.open_buffer())


def close_all(checkpoint: Checkpoint) -> None:
    """Close every file map a checkpoint opened."""
    for fmap in checkpoint.metadata.get("_file_maps", []):
        fmap.close()

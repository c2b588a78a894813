"""The records of a zip whose end is missing (a download cut short), found by their local headers.

A zip is read by its central directory, at its end: cut the file anywhere and the directory is gone, though
every record before the cut is whole. Each record starts with a local header (`PK\\x03\\x04`, its name, its
method); torch writes its sizes and CRC after the data, in a data descriptor (`PK\\x07\\x08`, flag bit 3), so
a record's end is known either from its size (a storage: the caller knows its bytes from data.pkl) or by
finding the descriptor that gives the distance from the data's start (small records: data.pkl, byteorder).
The walk stops at the first record the file ends in, or at anything that is not a local header (the
central directory's first record, garbage). Every byte looked at is charged to the `Budget`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import NamedTuple

from ckptview.core.budget import Budget
from ckptview.core.read.bytes.zipdir import ByteSource, ZipEntry

__all__ = ["LocalRecords", "Salvaged"]

_LOCAL = struct.Struct("<4s2xHH4xLLLHH")  # signature, flags, method, crc, sizes, name and extra lengths
_DESCRIPTOR32 = struct.Struct("<4sLLL")  # PK\x07\x08, crc, compressed and uncompressed sizes (32 bit)
_DESCRIPTOR64 = struct.Struct("<4sLQQ")  # the ZIP64 form, records of 4 GiB and more
_LOCAL_SIG, _DESCRIPTOR_SIG = b"PK\x03\x04", b"PK\x07\x08"
_HAS_DESCRIPTOR = 0x08
_FIRST_PIECE, _SCAN_PIECE = 64, 1 << 16  # bytes read at a time while looking for a descriptor: few at first
# (most records are small), doubling up to the most


class Salvaged(NamedTuple):
    """Where the walk stopped: the offset of the first record not read whole, the name of the record the
    file ends in (None when the file ends between records or the walk met no local header), the file's size."""

    stopped_at: int
    cut: str | None
    size: int


class LocalRecords:
    """Iterate the whole records of `source` from `start`, in file order, as `ZipEntry`s (header offsets
    from the start of the file); `result` says where and why the walk stopped.

    `size_of(name)`: the bytes a record holds when the caller knows them (asked when the record is met, so
    it may learn them from an earlier record), else None and the record's descriptor is looked for."""

    def __init__(self, source: ByteSource, budget: Budget, size_of: Callable[[str], int | None] = lambda _n: None,
                 start: int = 0) -> None:
        self.source, self.budget, self.size_of, self.start = source, budget, size_of, start
        self.result = Salvaged(start, None, source.size)

    def __iter__(self) -> Iterator[ZipEntry]:
        source, size = self.source, self.source.size
        pos = self.start
        while pos + _LOCAL.size <= size:
            head = source.read(pos, _LOCAL.size)
            self.budget.charge(len(head), "local headers")
            if len(head) < _LOCAL.size or head[:4] != _LOCAL_SIG:
                self.result = Salvaged(pos, None, size)  # the central directory, or bytes no zip writes
                return
            _sig, flags, method, crc, csize, usize, name_len, extra_len = _LOCAL.unpack(head)
            raw = source.read(pos + _LOCAL.size, name_len)
            self.budget.charge(name_len + extra_len, "local headers")
            name = raw.decode("utf-8" if flags & 0x800 else "cp437", "replace")
            data_at = pos + _LOCAL.size + name_len + extra_len
            if len(raw) < name_len or data_at > size:
                self.result = Salvaged(pos, name, size)
                return
            if flags & _HAS_DESCRIPTOR:
                found = self._descriptor(name, data_at, method)
                if found is None:
                    self.result = Salvaged(pos, name, size)
                    return
                crc, csize, usize, after = found
            else:
                after = data_at + csize
                if after > size or 0xFFFFFFFF in (csize, usize):  # sizes in a ZIP64 extra: not walked
                    self.result = Salvaged(pos, name, size)
                    return
            yield ZipEntry(name, pos, method, csize, usize, crc)
            pos = after
            self.result = Salvaged(pos, None, size)
        self.result = Salvaged(pos, None, size)

    def _descriptor(self, name: str, data_at: int, method: int) -> tuple[int, int, int, int] | None:
        """(crc, compressed size, size, where the next record starts) of the record whose data starts at
        `data_at`, from its data descriptor; None when the file ends before it."""
        known = self.size_of(name)
        if known is not None:
            return self._descriptor_at(data_at, data_at + known, method)
        source, size = self.source, self.source.size
        at = data_at
        tail = b""
        step = _FIRST_PIECE
        while at < size:
            piece = source.read(at, min(step, size - at))
            step = min(2 * step, _SCAN_PIECE)
            if not piece:
                return None
            self.budget.charge(len(piece), "bytes searched for a record's end")
            window = tail + piece
            base = at - len(tail)
            found = window.find(_DESCRIPTOR_SIG)
            while found >= 0:  # bounded: each turn moves past a byte of the window charged above
                hit = self._descriptor_at(data_at, base + found, method)
                if hit is not None:
                    return hit
                found = window.find(_DESCRIPTOR_SIG, found + 1)
            tail = window[-(_DESCRIPTOR64.size - 1):]
            at += len(piece)
        return None

    def _descriptor_at(self, data_at: int, end: int, method: int) -> tuple[int, int, int, int] | None:
        """The descriptor at `end` if it is one for data of `end - data_at` bytes (either form)."""
        length = end - data_at
        found = self.source.read(end, _DESCRIPTOR64.size)
        self.budget.charge(_DESCRIPTOR64.size, "data descriptors")
        for form in (_DESCRIPTOR32, _DESCRIPTOR64):
            if len(found) >= form.size:
                sig, crc, csize, usize = form.unpack_from(found)
                if sig == _DESCRIPTOR_SIG and csize == length and (usize == length or method != 0):
                    return crc, csize, usize, end + form.size
        return None

"""A zip central-directory reader: one pass over the directory bytes, no per-entry objects.

`zipfile.ZipFile` builds a ZipInfo object per member, which dominated opening checkpoints with
100,000 storages. This reads the same records (ZIP64 included) into plain tuples, the way torch's
own archive reader (miniz) does: offsets are taken as written. Python's `zipfile` adjusts them for bytes
prepended to the archive and torch does not, so an archive whose directory only makes sense with that
adjustment (a zip written twice, a zip behind other bytes) would be two different archives to the two
readers: it is refused, as is a ZIP64 locator pointing elsewhere than where its record lies.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple, Protocol

from ckptview.core.budget import Budget
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.bytes.files import open_regular
from ckptview.core.units import plural

_EOCD = struct.Struct("<4s4H2LH")
_EOCD64_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_MAX_COMMENT = 0xFFFF
ENTRY_COST = 12  # units one entry costs (a ZipEntry and its name hold ~180 bytes)


class ZipEntry(NamedTuple):
    """One central-directory record; header_offset is counted from the start of the file."""
    name: str
    header_offset: int
    compress_type: int
    compress_size: int
    file_size: int
    crc: int


class ByteSource(Protocol):
    """Bytes read by position (the byte layer's FileMap, or a record held in memory)."""

    @property
    def size(self) -> int: ...

    def read(self, offset: int, length: int) -> bytes: ...


AMBIGUOUS = "ambiguous zip"


class TruncatedZip(CheckpointFormatError):
    """The zip's end (its central directory) is missing or cut: a file cut short, as a download that stopped."""


def read_central_directory(path: str, start: int = 0, length: int | None = None,
                           source: ByteSource | None = None, budget: Budget | None = None) -> list[ZipEntry]:
    """Every member of the zip at `path` (or of the zip stored in bytes [start, start+length) of it),
    in directory order, with header offsets counted from the start of the file.

    `source` (the byte layer's open file, local or remote) is read instead of opening `path` again. The
    entries the directory declares are charged to `budget` before they are parsed."""
    if length is None:
        length = (source.size if source is not None else os.path.getsize(path)) - start  # local without one
    size = length
    with _Window(path, start, source) as fh:
        tail_len = min(size, _EOCD.size + _MAX_COMMENT)
        fh.seek(size - tail_len)
        tail = fh.read(tail_len)
        pos = tail.rfind(b"PK\x05\x06")
        if pos < 0 or len(tail) - pos < _EOCD.size:
            raise TruncatedZip("truncated or corrupt zip: end of central directory not found")
        _, disk, cd_disk, _n_disk, n_total, cd_size, cd_offset, _comment = _EOCD.unpack_from(tail, pos)
        eocd_at = size - tail_len + pos
        if disk or cd_disk:
            raise CheckpointFormatError("multi-disk zip archives are not supported")
        dir_end = eocd_at
        has_locator = pos >= _EOCD64_LOCATOR.size and tail[pos - _EOCD64_LOCATOR.size : pos - 16] == b"PK\x06\x07"
        if has_locator or n_total == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
            # torch always writes ZIP64 end records: the directory ends where that record starts.
            n_total, cd_size, cd_offset, dir_end = _zip64_end(fh, tail, pos, eocd_at)
        concat = dir_end - cd_size - cd_offset  # bytes prepended to the archive
        if concat < 0 or cd_size > size:
            raise TruncatedZip("truncated or corrupt zip: central directory out of range")
        if budget is not None:  # every entry is at least 46 bytes of the directory, which the file holds
            budget.charge(ENTRY_COST * min(n_total, cd_size // _CENTRAL.size + 1), "zip directory entries")
        if concat:  # zipfile would shift every offset by this much, torch reads them as written
            raise CheckpointFormatError(
                f"{AMBIGUOUS}: its directory is {concat} bytes from where its offsets say (bytes before the "
                "archive, or an archive written twice); torch and zipfile would read different records")
        fh.seek(cd_offset + concat)
        directory = fh.read(cd_size)
    if len(directory) != cd_size:
        raise TruncatedZip("truncated zip: central directory cut short")
    return _parse_entries(directory, n_total, concat + start)


class _Window:
    """An open file whose seek() positions are counted from `start` (a zip stored inside a file)."""

    def __init__(self, path: str, start: int, source: ByteSource | None = None) -> None:
        self.source = source
        self.fh = open_regular(path) if source is None else None  # never blocks on a FIFO; closed by __exit__
        self.start = start
        self.pos = start

    def __enter__(self) -> _Window:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fh is not None:
            self.fh.close()

    def seek(self, pos: int) -> None:
        self.pos = self.start + pos
        if self.fh is not None:
            self.fh.seek(self.pos)

    def read(self, n: int) -> bytes:
        if self.fh is not None:
            return self.fh.read(n)
        assert self.source is not None
        data = self.source.read(self.pos, n)
        self.pos += len(data)
        return data


def _zip64_end(fh: _Window, tail: bytes, pos: int, eocd_at: int) -> tuple[int, int, int, int]:
    loc_at = pos - _EOCD64_LOCATOR.size
    if loc_at < 0 or tail[loc_at : loc_at + 4] != b"PK\x06\x07":
        raise CheckpointFormatError("corrupt zip: ZIP64 locator missing")
    _, _disk, rec_offset, _disks = _EOCD64_LOCATOR.unpack_from(tail, loc_at)
    rec_at = eocd_at - _EOCD64_LOCATOR.size - _EOCD64.size  # where the record must be
    if rec_offset != rec_at:  # torch follows the locator, zipfile looks where the record must be
        raise CheckpointFormatError(f"{AMBIGUOUS}: its ZIP64 locator points to byte {rec_offset}, the record "
                                    f"lies at {rec_at}; torch and zipfile would read different directories")
    fh.seek(rec_at)
    rec = fh.read(_EOCD64.size)
    if len(rec) != _EOCD64.size or rec[:4] != b"PK\x06\x06":
        raise CheckpointFormatError("corrupt zip: ZIP64 end of central directory missing")
    (_, _sz, _v1, _v2, _d1, _d2, _n_disk, n_total, cd_size, cd_offset) = _EOCD64.unpack(rec)
    return n_total, cd_size, cd_offset, rec_at


# The fields of a central-directory record that matter here (pad bytes skip the rest): signature,
# flags, method, crc, sizes, name/extra/comment lengths, local header offset. 46 bytes in all.
_CENTRAL_FIELDS = struct.Struct("<4s4xHH4xLLLHHH8xL")


def _parse_entries(directory: bytes, n_total: int, concat: int) -> list[ZipEntry]:
    entries: list[ZipEntry] = []
    append = entries.append
    unpack = _CENTRAL_FIELDS.unpack_from
    make = tuple.__new__  # ZipEntry without its Python-level __new__: a listing makes 100,000
    pos, end = 0, len(directory)
    header = _CENTRAL.size
    while pos < end:  # bounded: each entry consumes at least 46 bytes of the directory (charged by the caller)
        if pos + header > end:
            raise CheckpointFormatError("corrupt zip: central directory entry cut short")
        sig, flags, method, crc, csize, usize, name_len, extra_len, comment_len, offset = unpack(directory, pos)
        if sig != b"PK\x01\x02":
            raise CheckpointFormatError("corrupt zip: bad central directory entry")
        pos += header
        raw_name = directory[pos : pos + name_len]
        pos += name_len
        if usize == 0xFFFFFFFF or csize == 0xFFFFFFFF or offset == 0xFFFFFFFF:
            usize, csize, offset = _zip64_extra(directory[pos : pos + extra_len], usize, csize, offset)
        pos += extra_len + comment_len
        name = raw_name.decode("utf-8" if flags & 0x800 else "cp437", "replace")
        append(make(ZipEntry, (name, offset + concat if concat else offset, method, csize, usize, crc)))
    if pos != end or len(entries) != n_total and n_total != 0xFFFF:
        raise CheckpointFormatError(
            f"corrupt zip: central directory holds {plural(len(entries), 'entry', 'entries')}, the end record says {n_total}")
    return entries


def _zip64_extra(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    pos = 0
    while pos + 4 <= len(extra):  # bounded: each step consumes 4 or more bytes of one entry's extra field
        tag, length = struct.unpack_from("<HH", extra, pos)
        body = extra[pos + 4 : pos + 4 + length]
        pos += 4 + length
        if tag != 0x0001:
            continue
        values = list(struct.unpack_from(f"<{len(body) // 8}Q", body))
        if usize == 0xFFFFFFFF and values:
            usize = values.pop(0)
        if csize == 0xFFFFFFFF and values:
            csize = values.pop(0)
        if offset == 0xFFFFFFFF and values:
            offset = values.pop(0)
        return usize, csize, offset
    raise CheckpointFormatError("corrupt zip: ZIP64 sizes missing")


def case_collision(names: list[str]) -> tuple[str, str] | None:
    """Two names that torch's reader, which finds names in any case, takes for one; None when there are none.

    Fast for what torch writes (one root folder, lower-case names below it): one pass over one string."""
    if not names:
        return None
    joined = "\0".join(names)
    root = names[0].partition("/")[0] + "/"
    if joined.startswith(root) and joined.count("\0" + root) == len(names) - 1:
        below = joined.replace("\0" + root, "\0")[len(root):]
        if below == below.lower():
            return None  # one root, nothing below it in upper case: only exact repeats, found elsewhere
    elif joined == joined.lower():
        return None
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.lower(), name)
        if other != name:
            return other, name
    return None

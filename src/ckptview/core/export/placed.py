"""An export written by several processes: the caller lays the files out, each item's bytes are written at
their place by whoever reads that item (a local worker, a Dask worker), and the caller finishes the files.

The bytes are those the export writes in one process (`plan.run_export`), byte for byte:

- npy: a temporary file per item, its header and values written by the item's writer;
- safetensors: one temporary file, its header written here and its size set; each item's values written
  at the offset its place in the header gives;
- npz: one temporary file; each member's .npy (header and values) written at the offset its zip entry
  leaves for it, its CRC-32 computed by its writer; the entries' headers and the central directory written
  here once every member is in place, as `zipfile` writes them (stored, zip64, the fixed date).

The files are temporary files of the export until all is written, renamed into place by `run_export`: a
failure anywhere leaves no file under a final name. The writers must share the folder's file system.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import zipfile
import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

from ckptview.core.export import blocks as export_io
from ckptview.core.export import npy
from ckptview.core.export import safetensors as st
from ckptview.core.export.blocks import BlockWriter
from ckptview.core.export.plan import (
    ExportError,
    ExportItem,
    ExportPlan,
    ItemWriter,
    item_values,
    named_errors,
    safetensors_layout,
)
from ckptview.core.export.temps import Temps


@dataclass(frozen=True)
class Place:
    """Where one item's bytes go: `item` (its position in the plan), the temporary `path` (the file with inode
    `inode` the caller made), the `offset` its bytes start at, and the `header` written before its values (an
    .npy header; empty for safetensors)."""

    item: int
    path: str
    offset: int
    header: bytes = b""
    inode: int = 0


Written = tuple[int, int, int]  # (item position, bytes of values written, CRC-32 of all its bytes)
WriteItems = Callable[[list[Place]], Iterator[Written]]


def _npy_header(item: ExportItem) -> bytes:
    out = io.BytesIO()
    npy.write_header(out, npy.header_descr(item.np_dtype, item.dtype), item.info.shape)
    return out.getvalue()


def _member(item: ExportItem, header_offset: int, size: int, crc: int = 0) -> zipfile.ZipInfo:
    """The zip entry of an .npz member as `zipfile` finishes it (see `npy.open_npz_member`)."""
    info = zipfile.ZipInfo(item.target + ".npy", date_time=npy.ZIP_DATE)
    info.compress_type = zipfile.ZIP_STORED
    info.flag_bits = 0
    info.external_attr = 0o600 << 16  # what zipfile gives an entry that has none
    info.header_offset = header_offset
    info.file_size = info.compress_size = size
    info.CRC = crc
    return info


def _create(temps: Temps, folder: str, size: int, head: bytes = b"") -> tuple[str, int]:
    """A temporary file of `size` bytes beginning with `head` (the rest written by the items' writers), and its
    inode (a writer checks it opens that very file)."""
    path, fd = temps.create_fd(folder)
    try:
        if head:
            os.write(fd, head)
        if size > len(head):
            os.ftruncate(fd, size)
        inode = os.fstat(fd).st_ino
    finally:
        os.close(fd)
    return path, inode


def layout(plan: ExportPlan, folder: str, temps: Temps, renames: list[tuple[str, str]]) -> list[Place]:
    """The temporary files of `plan` made in `folder` (each with its final name in `renames`), and each item's
    place in them."""
    if plan.format == "npy":
        places = []
        for i, item in enumerate(plan.items):
            path, inode = _create(temps, folder, 0)
            renames.append((path, plan.out if plan.single_file else os.path.join(folder, item.target)))
            places.append(Place(i, path, 0, _npy_header(item), inode))
        return places
    position = {id(item): i for i, item in enumerate(plan.items)}
    if plan.format == "safetensors":
        header, ordered = safetensors_layout(plan)
        path, inode = _create(temps, folder, len(header) + plan.total_bytes, header)
        places, offset = [], len(header)
        for item in ordered:
            places.append(Place(position[id(item)], path, offset, b"", inode))
            offset += item.nbytes
        renames.append((path, plan.out))
        return places
    places, offset = [], 0
    for i, item in enumerate(plan.items):  # npz: entry header, then the member's .npy
        head = _npy_header(item)
        entry = len(_member(item, offset, len(head) + item.nbytes).FileHeader(True))
        places.append(Place(i, "", offset + entry, head))
        offset += entry + len(head) + item.nbytes
    path, inode = _create(temps, folder, offset)
    renames.append((path, plan.out))
    return [Place(p.item, path, p.offset, p.header, inode) for p in places]


def _finish_npz(plan: ExportPlan, places: list[Place], crcs: dict[int, int]) -> None:
    """The entries' headers and the central directory of an npz whose members are written."""
    path = places[0].path
    # Written, never read: the members are in place, the headers and the directory go around them.
    with os.fdopen(os.open(path, os.O_WRONLY | getattr(os, "O_BINARY", 0)), "wb") as fh:
        zf = zipfile.ZipFile(fh, "w", allowZip64=True)
        end = 0
        for place in places:
            item = plan.items[place.item]
            size = len(place.header) + item.nbytes
            entry = _member(item, 0, size, crcs[place.item])
            entry.header_offset = place.offset - len(entry.FileHeader(True))
            fh.seek(entry.header_offset)
            fh.write(entry.FileHeader(True))
            zf.filelist.append(entry)
            zf.NameToInfo[entry.filename] = entry
            end = place.offset + size
        fh.seek(end)
        zf.start_dir = end
        zf.close()  # the central directory and end records, as zipfile writes them
        fh.flush()
        os.fsync(fh.fileno())


def _sync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def placed_writer(write: WriteItems) -> ItemWriter:
    """A writer for `run_export` that lays the files out here and has `write` write every item at its place
    (yielding as each is done), then finishes the files."""
    def writer(plan: ExportPlan, folder: str, temps: Temps, renames: list[tuple[str, str]],
               chunk_elems: int) -> Generator[tuple[ExportItem, int], None, None]:
        del chunk_elems  # the writers' own
        places = layout(plan, folder, temps, renames)
        crcs: dict[int, int] = {}
        for i, nbytes, crc in write(places):
            crcs[i] = crc
            yield plan.items[i], nbytes
        if plan.format == "npz":
            _finish_npz(plan, places, crcs)
        elif plan.format == "safetensors":
            _sync(places[0].path)  # its header (the values were synced by their writers)

    return writer


class _Crc:
    """A file-like writer that also computes the CRC-32 of what passes (a zip member's)."""

    def __init__(self, writer: BlockWriter) -> None:
        self.writer, self.crc = writer, 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.crc = zlib.crc32(data, self.crc)
        return self.writer.write(data)


def write_item(item: ExportItem, fmt: str, place: Place, chunk_elems: int) -> tuple[int, int]:
    """Write `item`'s bytes at `place` of the temporary file the caller made (opened here, never created):
    what the one-process export writes for it. Returns (bytes of values, CRC-32 of all its bytes: npz)."""
    size = len(place.header) + item.nbytes
    # Never a link, never another file: the folder may be shared with others, who could put one in its place.
    refused = ExportError(f"{place.path} is not the temporary file the export made: nothing written to it")
    try:
        fd = os.open(place.path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symbolic link where the file was
            raise refused from None
        raise
    try:
        found = os.fstat(fd)  # a hard link to another file: another inode, a second name
        if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1 or (place.inode and found.st_ino != place.inode):
            raise refused
        os.lseek(fd, place.offset, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    # O_DIRECT only from the start of a file (its offsets must be aligned): a .npy file of its own.
    writer = BlockWriter(fd, size, direct=fmt == "npy" and item.nbytes >= export_io.DIRECT_MIN)
    written = 0
    crc = 0
    try:
        if fmt == "npy":
            descr = npy.header_descr(item.np_dtype, item.dtype)
            for _, nbytes in named_errors(item, npy.write_npy_blocks(
                    writer, descr, item.info.shape, item.np_dtype, item_values(item, chunk_elems, convert=False))):
                written += nbytes
        elif fmt == "safetensors":
            for _, nbytes in named_errors(item, st.write_tensor_blocks(
                    writer, item.np_dtype, item_values(item, chunk_elems, convert=False))):
                written += nbytes
        else:  # npz: as zipfile's member writer is fed (`npy.write_npy`), its CRC computed on the way
            member = _Crc(writer)
            descr = npy.header_descr(item.np_dtype, item.dtype)
            for _, nbytes in named_errors(item, npy.write_npy(member, descr, item.info.shape,  # type: ignore[arg-type]
                                                              item_values(item, chunk_elems))):
                written += nbytes
            crc = member.crc
        writer.close()  # the rest, fsync, close: on disk before the caller renames the file into place
    finally:
        writer.abort()
    return written, crc

"""Byte sources for storages: file ranges and zip members, read with `os.pread` from a kept descriptor.

Nothing here memory-maps a file: a mapped page past the end of a file that shrank (a training loop
re-saving over the checkpoint) kills the process with SIGBUS, and no Python code can catch that. Every
read is a positioned read into a buffer of bounded size instead; a short read, or a file whose identity
(device, inode, size, mtime) differs from the one recorded when it was opened, raises
`FileChangedError` rather than returning bytes of two different files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
import threading
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO, NamedTuple

from ckptview.core.errors import (
    CheckpointError,
    CheckpointFormatError,
    FileChangedError,
    NotACheckpointError,
    TensorDataError,
)

if TYPE_CHECKING:
    from ckptview.core.model import Checkpoint

MAX_INFLATED_RECORD = 256 << 20
READ_STEP = 64 << 20  # one pread call reads at most this much (bounded buffers, interruptible loops)
_O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


class FileIdentity(NamedTuple):
    """What says a file is still the one that was opened: device, inode, size and modification time."""

    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        """The identity in a stat result."""
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def difference(self, now: FileIdentity) -> str | None:
        """What changed from `self` to `now` (for a person), or None when nothing did."""
        if (now.dev, now.ino) != (self.dev, self.ino):
            return "replaced by another file"
        if now.size != self.size:
            return f"size {self.size} -> {now.size} bytes"
        if now.mtime_ns != self.mtime_ns:
            return "rewritten (modification time changed)"
        return None


_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def special_kind(mode: int) -> str | None:
    """'a FIFO (named pipe)', 'a socket', ... for a file mode that is neither a regular file nor a folder."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, what in _SPECIAL:
        if test(mode):
            return what
    return "not a regular file"


def io_error(path: str, exc: OSError) -> CheckpointError:
    """One line naming the file and the system error (EIO, EACCES, ...)."""
    code = errno.errorcode.get(exc.errno or 0)
    return CheckpointFormatError(f"cannot read {path}: {exc.strerror or exc}" + (f" ({code})" if code else ""))


def stat_checked(path: str) -> os.stat_result:
    """stat() of a path that must be a regular file or a folder; anything else is refused in one line."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise NotACheckpointError(f"no such file: {path}") from None
    except OSError as exc:
        raise io_error(path, exc) from None
    if (what := special_kind(st.st_mode)) is not None:
        raise NotACheckpointError(f"not a checkpoint: {path} is {what}; only regular files and folders are opened")
    return st


def open_regular(path: str) -> BinaryIO:
    """Open a regular file for reading without ever blocking (a FIFO swapped in after a stat is refused)."""
    stat_checked(path)
    try:
        fd = os.open(path, _O_FLAGS)
    except OSError as exc:
        raise io_error(path, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotACheckpointError(f"not a checkpoint: {path} is {special_kind(st.st_mode) or 'a folder'}")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


MAX_FOLDER_FILES = 10_000
CHECKPOINT_FILES = (".distcp", ".safetensors", ".bin", ".index.json", ".pt", ".pth", ".ckpt", ".metadata")


def folder_identities(folder: str) -> dict[str, FileIdentity]:
    """Identity of each checkpoint file directly in a folder (shards, .distcp files, the index, .metadata).

    Other files (a README, config.json) may change without the checkpoint changing.
    """
    out: dict[str, FileIdentity] = {}
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if len(out) >= MAX_FOLDER_FILES:
                    break
                if not entry.name.endswith(CHECKPOINT_FILES):
                    continue
                try:
                    if entry.is_file(follow_symlinks=True):
                        out[os.path.join(folder, entry.name)] = FileIdentity.of(entry.stat(follow_symlinks=True))
                except OSError:
                    continue
    except OSError as exc:
        raise io_error(folder, exc) from None
    return out


def _fill(fd: int, view: memoryview, offset: int) -> int:
    """One positioned read into `view`; the number of bytes read (0 at the end of the file)."""
    if _HAS_PREADV:
        return os.preadv(fd, [view], offset)
    data = os.pread(fd, len(view), offset)
    view[: len(data)] = data
    return len(data)


_HAS_PREADV = hasattr(os, "preadv")


class FileMap:
    """One file of a checkpoint: its identity is recorded when it is made, its bytes read on demand.

    (The name is historical: nothing is mapped.) Reads go through one descriptor opened on first use
    and checked against the recorded identity; after every read the path is checked again, so bytes of
    a file that was truncated, rewritten or replaced meanwhile are never returned.
    """

    def __init__(self, path: str, expected: FileIdentity | None = None) -> None:
        self.path = path
        st = stat_checked(path)
        if not stat.S_ISREG(st.st_mode):
            raise NotACheckpointError(f"not a checkpoint: {path} is a folder, not a file")
        self.identity = FileIdentity.of(st)
        # A file first read long after the checkpoint was opened (a DCP shard) must still be that file.
        if expected is not None and (what := expected.difference(self.identity)) is not None:
            raise FileChangedError(path, what)
        self._fd: int | None = None
        self._users = 0
        self._closing = False
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """The size the file had when it was opened."""
        return self.identity.size

    def changed(self) -> str | None:
        """What changed on disk since the file was opened ('replaced by another file', ...), or None."""
        try:
            now = FileIdentity.of(os.stat(self.path))
        except FileNotFoundError:
            return "deleted"
        except OSError as exc:
            return f"cannot be checked: {exc.strerror or exc}"
        return self.identity.difference(now)

    def check(self) -> None:
        """Raise FileChangedError when the file on disk is no longer the one that was opened."""
        if (what := self.changed()) is not None:
            raise FileChangedError(self.path, what)

    def _acquire(self) -> int:
        with self._lock:
            if self._fd is None:
                try:
                    fd = os.open(self.path, _O_FLAGS)
                except FileNotFoundError:
                    raise FileChangedError(self.path, "deleted") from None
                except OSError as exc:
                    raise io_error(self.path, exc) from None
                try:
                    now = FileIdentity.of(os.fstat(fd))
                except OSError as exc:
                    os.close(fd)
                    raise io_error(self.path, exc) from None
                if (what := self.identity.difference(now)) is not None:
                    os.close(fd)
                    raise FileChangedError(self.path, what)
                self._fd = fd
            self._closing = False
            self._users += 1
            return self._fd

    def _release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._closing and self._users == 0:
                self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._closing = False

    def readinto(self, offset: int, buf: memoryview | bytearray, check: bool = True) -> None:
        """Fill `buf` with the file's bytes at `offset`, or raise (changed file, I/O error, past the end).

        `check=False` leaves the identity check after the read to the caller (one `check()` after many
        small reads); a short read is still refused.
        """
        view = memoryview(buf).cast("B")
        total = len(view)
        if offset < 0 or offset + total > self.size:
            self.check()
            raise TensorDataError(f"bytes {offset}..{offset + total} lie beyond the end of "
                                  f"{os.path.basename(self.path)} ({self.size} bytes)")
        fd = self._acquire()
        try:
            done = 0
            while done < total:
                step = min(total - done, READ_STEP)
                try:
                    got = _fill(fd, view[done : done + step], offset + done)
                except InterruptedError:
                    continue
                except OSError as exc:
                    self.check()
                    raise io_error(self.path, exc) from None
                if got == 0:  # shorter than its recorded size: it changed, whatever stat says
                    self.check()
                    raise FileChangedError(self.path, f"ends at byte {offset + done}, was {self.size} bytes")
                done += got
        finally:
            self._release()
        if check:
            self.check()

    def read(self, offset: int, length: int) -> bytes:
        """Up to `length` bytes at `offset` (fewer only where the file, as opened, ends)."""
        length = max(0, min(length, self.size - offset))
        if offset < 0 or length == 0:
            return b""
        buf = bytearray(length)
        self.readinto(offset, buf)
        return bytes(buf)

    def read_all(self) -> bytes:
        """The whole file (for pickles that are the whole file)."""
        return self.read(0, self.size)

    def __del__(self) -> None:
        # A checkpoint dropped without close() must not leak its descriptor (long sessions, test suites).
        fd = getattr(self, "_fd", None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Close the descriptor (now, or when the reads in flight finish); a later read reopens it."""
        with self._lock:
            if self._users:
                self._closing = True
            else:
                self._close_fd()


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

    def file_span(self) -> tuple[FileMap, int, int]:
        """(file, offset, length) of the bytes, for chunked reads."""
        return self.fmap, self.offset, self.length

    def _check_bounds(self) -> None:
        if self.offset < 0 or self.offset + self.length > self.fmap.size:
            raise TensorDataError(
                f"storage bytes {self.offset}..{self.offset + self.length} lie beyond the end of the file "
                f"({self.fmap.size} bytes)"
            )

    def read_range(self, start: int, length: int) -> bytes:
        """`length` bytes from `start` of the slice."""
        self._check_bounds()
        if start < 0 or start + length > self.length:
            raise TensorDataError(f"bytes {start}..{start + length} lie outside the storage ({self.length} bytes)")
        buf = bytearray(length)
        self.fmap.readinto(self.offset + start, buf)
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

    def read_range(self, start: int, length: int) -> bytes:
        """`length` bytes from `start`."""
        if start < 0 or start + length > len(self.data):
            raise TensorDataError(f"bytes {start}..{start + length} lie outside the storage ({len(self.data)} bytes)")
        return self.data[start : start + length]

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

    def file_span(self) -> tuple[FileMap, int, int] | None:
        """(file, offset, length) when the member is stored uncompressed, else None."""
        if self.compress_type != 0:
            return None
        self._raw_bounds()
        return self.fmap, self.data_offset(), self.compress_size

    def _raw_bounds(self) -> int:
        start = self.data_offset()
        if start + self.compress_size > self.fmap.size:
            raise TensorDataError(f"truncated zip: record '{self.name}' runs past the end of the file")
        if self.compress_type not in (0, 8):
            raise TensorDataError(f"record '{self.name}' uses unsupported zip compression {self.compress_type}")
        return start

    def _wanted(self) -> int:
        return self.file_size if self.max_bytes is None else min(self.file_size, self.max_bytes)

    def read_range(self, start: int, length: int) -> bytes:
        """`length` bytes from `start` of the member's (inflated) content."""
        if self.compress_type != 0:
            return b"".join(self.iter_inflated(start, length, max(length, 1)))
        data_start = self._raw_bounds()
        if start < 0 or start + length > self.compress_size:
            raise TensorDataError(f"record '{self.name}' is shorter than the view needs")
        buf = bytearray(length)
        self.fmap.readinto(data_start + start, buf)
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

    def iter_inflated(self, start: int, length: int, block: int) -> Iterator[bytes]:
        """`length` bytes from `start` of a compressed member, inflated `block` bytes at a time."""
        self._raw_bounds()
        if start < 0 or start + length > self._wanted():
            raise TensorDataError(f"record '{self.name}' is shorter than the view needs")
        return self._inflate(start, length, block, exact=True)

    def _inflate(self, start: int, length: int, block: int, exact: bool) -> Iterator[bytes]:
        """Inflate the compressed bytes, read from the file 1 MiB at a time; yields `block`-sized pieces.

        Pieces are handed on as zlib made them whenever one is exactly a block (the usual case): no copy.
        """
        raw_start = self._raw_bounds()
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
                        raw = self.fmap.read(raw_start + fed, min(step, self.compress_size - fed))
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


def file_maps(checkpoint: Checkpoint) -> list[FileMap]:
    """The files a checkpoint has opened so far."""
    return list(checkpoint.metadata.get("_file_maps", []))


def changed_on_disk(checkpoint: Checkpoint) -> str | None:
    """'PATH: what changed' for the first file of `checkpoint` that changed since it was opened, else None."""
    for path, identity in checkpoint.metadata.get("_identities", {}).items():
        try:
            what = identity.difference(FileIdentity.of(os.stat(path)))
        except FileNotFoundError:
            what = "deleted"
        except OSError as exc:
            what = f"cannot be checked: {exc.strerror or exc}"
        if what is not None:
            return f"{path}: {what}"
    for fmap in file_maps(checkpoint):
        if (what := fmap.changed()) is not None:
            return f"{fmap.path}: {what}"
    return None


def close_all(checkpoint: Checkpoint) -> None:
    """Close every file a checkpoint opened."""
    for fmap in file_maps(checkpoint):
        fmap.close()

"""Files of a checkpoint, read safely: identity recorded at open, positioned reads, special files refused.

Nothing here memory-maps a file: a mapped page past the end of a file that shrank (a training loop
re-saving over the checkpoint) kills the process with SIGBUS, and no Python code can catch that. Every
read is a positioned read into a buffer of bounded size instead; a short read, or a file whose identity
(device, inode, size, mtime) differs from the one recorded when it was opened, raises
`FileChangedError` rather than returning bytes of two different files. Only regular files are opened,
and never in a way that could block (a FIFO opened for reading waits for a writer).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import threading
from collections.abc import Callable, Generator
from typing import Any, BinaryIO, NamedTuple, TypeVar

from ckptview.core.errors import (
    CheckpointError,
    CheckpointFormatError,
    FileChangedError,
    NoSuchFile,
    NotACheckpointError,
    TensorDataError,
)

_O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
READ_STEP = 64 << 20  # one pread call reads at most this much (bounded buffers, interruptible loops)


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

    def changed_at(self, path: str) -> str | None:
        """What changed on disk at `path` since this identity was taken ('deleted', ...), or None."""
        try:
            now = FileIdentity.of(os.stat(path))
        except FileNotFoundError:
            return "deleted"
        except OSError as exc:
            return f"cannot be checked: {exc.strerror or exc}"
        return self.difference(now)


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
        raise NoSuchFile(f"no such file: {path}") from None
    except OSError as exc:
        raise io_error(path, exc) from None
    if (what := special_kind(st.st_mode)) is not None:
        raise NotACheckpointError(f"not a checkpoint: {path} is {what}; only regular files and folders are opened")
    return st


def open_regular(path: str, expected: FileIdentity | None = None) -> BinaryIO:
    """Open a regular file for reading without ever blocking (a FIFO swapped in after a stat is refused).

    With `expected` (the identity taken when an open began: `Source.open_file`), a file that is no longer
    that one raises FileChangedError. A local path: a URL is opened by its `Source`'s file system
    (`ckptview.core.read.bytes.fs`).
    """
    stat_checked(path)
    try:
        fd = os.open(path, _O_FLAGS)
    except OSError as exc:
        raise io_error(path, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotACheckpointError(f"not a checkpoint: {path} is {special_kind(st.st_mode) or 'a folder'}")
        if expected is not None and (what := expected.difference(FileIdentity.of(st))) is not None:
            raise FileChangedError(path, what)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)(://|::)")  # 'https://...', and chains 'simplecache::https://...'


def is_url(path: object) -> bool:
    """True for 'scheme://...' and 'scheme::...://...' (then refused or opened by the remote layer); False for
    local paths and file://."""
    return (isinstance(path, str) and "://" in path and bool(_URL.match(path))
            and not path.lower().startswith("file://"))


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

# While a `ReadAhead` is active, reads of at most SMALL_READ bytes given it come from windows of WINDOW bytes.
SMALL_READ = 64 << 10
WINDOW = 1 << 20
_Y = TypeVar("_Y")
_R = TypeVar("_R")


class ReadAhead:
    """Small reads of local files served from windows read at once, for the reads that are handed it.

    A walk over many small tensors (a diff of 100,000 of them: a local header and the bytes of each, in
    each file) makes one read and one identity check per megabyte instead of two per tensor. The walk
    makes one and passes it to its value reads (`values.iter_chunks(info, ahead=...)`, down to
    `FileMap.readinto(..., ahead=...)`); no other read ever sees it. Every window is checked against the
    file's identity after it is read, so only bytes of the file as opened are ever served; and `finish()`
    checks every file read from again, so a file that changed during the walk fails it (FileChangedError)
    even where its bytes came from a window read before the change.

    Active only inside `with` or while `run` steps a generator, never across its yields: a suspended or
    abandoned walk's reads (were anything to make them meanwhile) go to the file.
    """

    MAX_WINDOWS = 4  # files read from at once (a diff: 2); a walk over 500 checkpoints keeps the last few

    def __init__(self) -> None:
        self.windows: dict[FileMap, tuple[int, bytearray]] = {}  # the most recently read last
        self.seen: set[FileMap] = set()
        self._depth = 0  # `with` blocks (and `run` steps) in progress

    @property
    def active(self) -> bool:
        """True inside `with` (and while `run` steps its generator)."""
        return self._depth > 0

    def __enter__(self) -> ReadAhead:
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1

    def window(self, fmap: FileMap, offset: int, length: int) -> tuple[int, bytearray]:
        """The window of `fmap` holding [offset, offset + length), read (and checked) when there is none."""
        found = self.windows.pop(fmap, None)
        if found is None or not found[0] <= offset <= offset + length <= found[0] + len(found[1]):
            data = bytearray(min(WINDOW, fmap.size - offset))
            fmap._read(offset, memoryview(data))
            fmap.check()  # the window is the file as opened
            found = (offset, data)
            self.seen.add(fmap)
            if len(self.windows) >= self.MAX_WINDOWS:
                del self.windows[next(iter(self.windows))]
        self.windows[fmap] = found
        return found

    def finish(self) -> None:
        """Raise FileChangedError when a file read from no longer is the one that was opened."""
        self.windows.clear()
        seen, self.seen = self.seen, set()
        for fmap in seen:
            fmap.check()

    def run(self, steps: Generator[_Y, Any, _R]) -> Generator[_Y, Any, _R]:
        """Step `steps` with this active (as `yield from` would: sent values, thrown exceptions and
        `close()` reach it), and `finish()` when it returns."""
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            with self:
                try:
                    if thrown is not None:
                        item = steps.throw(thrown)
                    else:
                        item = steps.send(sent)
                except StopIteration as stop:
                    self.finish()
                    return stop.value  # type: ignore[no-any-return]
            sent, thrown = None, None
            try:
                sent = yield item
            except GeneratorExit:
                with self:
                    steps.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - handed on to `steps`, as yield from does
                thrown = exc


def read_ahead(walk: Callable[[ReadAhead], Generator[_Y, Any, _R]]) -> Generator[_Y, Any, _R]:
    """`walk(ahead)` (a walk over many tensors, handing `ahead` to its value reads), run with its small
    reads served from windows: see `ReadAhead`."""
    ahead = ReadAhead()
    return ahead.run(walk(ahead))


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
        return self.identity.changed_at(self.path)

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

    def readinto(self, offset: int, buf: memoryview | bytearray, check: bool = True,
                 ahead: ReadAhead | None = None) -> None:
        """Fill `buf` with the file's bytes at `offset`, or raise (changed file, I/O error, past the end).

        `check=False` leaves the identity check after the read to the caller (one `check()` after many
        small reads); a short read is still refused. A small read given an active `ahead` (a walk's) comes
        from its window of the file.
        """
        view = memoryview(buf).cast("B")
        total = len(view)
        if offset < 0 or offset + total > self.size:
            self.check()
            raise TensorDataError(f"bytes {offset}..{offset + total} lie beyond the end of "
                                  f"{os.path.basename(self.path)} ({self.size} bytes)")
        if ahead is not None and ahead._depth and total <= SMALL_READ:  # active (a plain field: per read)
            start, data = ahead.window(self, offset, total)
            view[:] = data[offset - start : offset - start + total]
            return
        self._read(offset, view)
        if check:
            self.check()

    def _read(self, offset: int, view: memoryview) -> None:
        """Fill `view` with the bytes at `offset` (inside the file as opened) by positioned reads."""
        total = len(view)
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

    def read(self, offset: int, length: int, ahead: ReadAhead | None = None) -> bytes:
        """Up to `length` bytes at `offset` (fewer only where the file, as opened, ends)."""
        length = max(0, min(length, self.size - offset))
        if offset < 0 or length == 0:
            return b""
        buf = bytearray(length)
        self.readinto(offset, buf, ahead=ahead)
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

"""Where an export writes before its files are named, and how their bytes reach the disk first.

No export leaves a file under a final name before it is complete and on disk. Two ways, chosen by
`run_export` (`core/export/plan.py`):

- **temporary names** (`.ckptview-export-*.part`) in the target folder, renamed into place at the end; used for
  single files and for a folder that exists already;
- **a staging folder** (`.ckptview-export-*` beside the target) for a folder of `.npy` files that does not exist
  yet: every file is written there under its final name, and the one folder is renamed to the target at the
  end. 200,000 files then cost one rename, not 200,000 (70 us each on ext4 here).

The bytes are made durable before any name says the file is complete: one `fsync` per file, issued in batches
by several threads (the file system joins their journal commits), or, for more than `SYNC_BATCH` files where
the kernel has it (Linux), one `syncfs` of the file system they are on: 200,000 fsyncs cost 0.8-6 ms each on
this ext4 disk, whatever a program does; one syncfs of the same files took 0.7 s. The staging folder, every
temporary file and every descriptor are removed or closed by `discard` when the export stops (Cancel, an
error, a signal).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import IO

TEMP_PREFIX = ".ckptview-export-"
SYNC_BATCH = 256  # finished files fsynced together, by SYNC_THREADS threads (ext4 joins their flushes)
SYNC_THREADS = 8


def syncfs_available() -> bool:
    """Whether this system can flush one file system at once (Linux's syncfs)."""
    return _syncfs() is not None


def _syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        call: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    return call


def sync_filesystem(folder: str) -> None:
    """Flush every written byte and name of the file system holding `folder` (syncfs); OSError on failure."""
    call = _syncfs()
    if call is None:
        raise OSError("syncfs is not available")
    fd = os.open(folder, os.O_RDONLY)
    try:
        if call(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))
    finally:
        os.close(fd)


def sync_folder(folder: str) -> None:
    """fsync a folder: the names in it (a rename into it) are on disk (nothing where folders cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Temps:
    """An export's temporary files (and staging folder), removed unless named; their bytes made durable."""

    def __init__(self, whole_filesystem: bool = False) -> None:
        """`whole_filesystem`: make the files durable with one syncfs (`syncfs_available()` must hold)."""
        self.paths: dict[str, None] = {}  # ordered, and removing one of 200,000 is not a scan
        self.staging: str | None = None
        self.whole_filesystem = whole_filesystem
        self._written: str | None = None  # a folder of the file system to syncfs ("" : none written yet)
        self._unsynced: list[int] = []
        self._pool: ThreadPoolExecutor | None = None

    def stage(self, parent: str) -> str:
        """A new staging folder in `parent` (files written there under their final names), removed by
        `discard` unless renamed into place."""
        while True:  # not mkdtemp: its 0700 mode would survive the rename; 0777 lets the umask decide
            path = os.path.join(parent, f"{TEMP_PREFIX}{os.urandom(8).hex()}")
            try:
                os.mkdir(path, 0o777)
                break
            except FileExistsError:
                continue
        self.staging = path
        return path

    def create(self, folder: str) -> tuple[str, IO[bytes]]:
        """A new temporary file as a buffered file object."""
        path, fd = self.create_fd(folder)
        return path, os.fdopen(fd, "wb")

    def create_fd(self, folder: str) -> tuple[str, int]:
        """A new temporary file as a descriptor (for a `BlockWriter`)."""
        # Not mkstemp: its 0600 mode would survive the rename; 0666 lets the umask decide, as for any file.
        while True:
            path = os.path.join(folder, f"{TEMP_PREFIX}{os.urandom(8).hex()}.part")
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
                break
            except FileExistsError:
                continue
        self.paths[path] = None
        return path, fd

    def create_staged(self, name: str) -> int:
        """A new file `name` in the staging folder, as a descriptor."""
        assert self.staging is not None
        return os.open(os.path.join(self.staging, name),
                       os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)

    def sync_later(self, fd: int, folder: str) -> None:
        """Take a written file's descriptor (its file in `folder`): durable by `sync_all`, closed by then."""
        if self.whole_filesystem:
            self._written = folder
            os.close(fd)  # syncfs needs no descriptor: 200,000 stay closed
            return
        self._unsynced.append(fd)
        if len(self._unsynced) >= SYNC_BATCH:
            self.sync_all()

    def sync_all(self) -> None:
        """Make every file taken so far durable (their descriptors closed).

        fsyncs of a batch run side by side: one at a time, each small file's fsync waits for its own journal
        commit; issued together, the file system commits them at once."""
        if self.whole_filesystem:
            folder, self._written = self._written, None
            if folder is not None:
                sync_filesystem(folder)
            return
        fds, self._unsynced = self._unsynced, []
        try:
            if len(fds) == 1:
                os.fsync(fds[0])
            elif fds:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="ckptview-export-sync")
                step = -(-len(fds) // SYNC_THREADS)
                for done in self._pool.map(_fsync_all, [fds[i:i + step] for i in range(0, len(fds), step)]):
                    del done
        except BaseException:
            self.shutdown()  # Ctrl-C, a signal: no fsync left running on a descriptor about to be closed
            raise
        finally:
            _close_all(fds)

    def discard(self) -> None:
        """Close what is open and remove every temporary file and the staging folder."""
        _close_all(self._unsynced)
        self._unsynced = []
        self.shutdown()
        for path in self.paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self.paths.clear()
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None

    def shutdown(self) -> None:
        """Stop the fsync threads (waiting for those running)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _fsync_all(fds: list[int]) -> None:
    for fd in fds:
        os.fsync(fd)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)

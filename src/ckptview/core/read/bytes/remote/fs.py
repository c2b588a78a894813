"""A remote session as a file system: the backend a URL's `Source` reads through, chosen once per open.

`RemoteFS(session)` answers what the readers ask of paths beside the one they opened (is it a file or a
folder, its size, its names; open it) with the files of `session`, the session of the open in progress
(`ReaderContext.session`): one transfer counts every request an open makes, and no registry of sessions
is kept. `opening` gives the session a URL is opened with: the enclosing open's when the URL lies below
its root (an index's shards, a folder's parts), else a new one with the user's `RemoteOptions`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import BinaryIO

from ckptview.core.errors import NoSuchFile, NotACheckpointError, RemoteError, TensorDataError
from ckptview.core.jobs import Progress
from ckptview.core.read.bytes.files import FileIdentity, FileMap, ReadAhead
from ckptview.core.read.bytes.location import Location, locate
from ckptview.core.read.bytes.remote.causes import is_missing
from ckptview.core.read.bytes.remote.file import FIRST, RemoteFile, Session
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.bytes.remote.urls import (
    dirname,
    folder_url,
    join,
    normalize,
    require_extra,
    shown,
    strip_userinfo,
)

METADATA_NAMES = (".metadata", ".json")  # read whole right after their size is asked for


def opening(url: str, outer: Session | None = None, options: RemoteOptions | None = None,
            report: Callable[[Progress], None] | None = None) -> Session:
    """The session an `open_checkpoint(url)` reads through: the enclosing open's (`outer`, from the
    reader's context) when `url` lies below its root (the shards of an index, the parts of a folder), so
    one transfer counts them all; else a new one, reading with `options`, a download reporting to `report`."""
    if outer is not None and strip_userinfo(url).startswith(outer.root):
        return outer
    return begin_session(url, options, report)


def begin_session(url: str | Location, options: RemoteOptions | None = None,
                  report: Callable[[Progress], None] | None = None) -> Session:
    """A fresh session for opening `url` (a file or a folder); files below it are read through it. The
    session holds `url`'s `Location` (its token, if any) for as long as it lives."""
    location = url if isinstance(url, Location) else locate(url)
    real = location.reach
    root = real if real.endswith("/") else dirname(real.split("?", 1)[0]) + "/"
    return Session(root, options, report, location=location)


def not_found(url: str) -> NoSuchFile:
    """'no such file: URL' (`causes.is_missing` says True of it: a shard that is not there)."""
    exc = NoSuchFile(f"no such file: {shown(url)}")
    exc.missing = True  # type: ignore[attr-defined]  # the marker `is_missing` reads, as `missing_error` sets it
    return exc


class RemoteFS:
    """The files of one remote session, by URL: the `FileSystem` of a URL's `Source`."""

    remote = True

    def __init__(self, session: Session) -> None:
        self.session = session

    def _real(self, url: str) -> str:
        """The URL to request for `url`: the session's own Location's when `url` is its shown form, else
        that of a Location still held (`locate`), else `url` as it is."""
        own = self.session.location
        if isinstance(own, Location) and strip_userinfo(url) == own.shown:
            return own.reach
        return locate(url).reach

    def file(self, url: str, first: int = 0) -> RemoteFile:
        """The RemoteFile of `url` in this session (stat'ed by its first request)."""
        require_extra(url)
        return self.session.file(self._real(url), first)

    def _known(self, url: str) -> tuple[bool, int | None] | None:
        with self.session.lock:
            return self.session.known.get(self._real(url).rstrip("/"))

    def _listed_absent(self, url: str) -> bool:
        """True when the folder of `url` was listed whole and did not name it (no request needed)."""
        with self.session.lock:
            return dirname(self._real(url).rstrip("/")) in self.session.listed

    def kind(self, url: str) -> str | None:
        """'file', 'dir' or None (not there); network errors other than 'not found' raise."""
        known = self._known(url)
        if known is not None:
            return "dir" if known[0] else "file"
        if self._listed_absent(url):
            return None
        try:
            f = self.file(url, first=1)
        except RemoteError as exc:
            if is_missing(exc):
                return None
            raise
        return "dir" if f.is_dir else "file"

    def isdir(self, path: str) -> bool:
        """A folder of a repo or bucket, a listed HTTP folder."""
        return self.kind(path) == "dir"

    def isfile(self, path: str) -> bool:
        return self.kind(path) == "file"

    def getsize(self, path: str) -> int:
        """From a folder listing when one said it, else a 1-byte request."""
        known = self._known(path)
        if known is not None and not known[0] and known[1] is not None:
            return known[1]
        # A metadata file's size is asked for just before it is read whole: fetch its start with it.
        return self.file(path, first=FIRST if path.endswith(METADATA_NAMES) else 1).size

    def listdir(self, path: str) -> list[str]:
        """The names in a folder URL (without the trailing '/' of sub-folders)."""
        return [n.rstrip("/") for n in self.file(folder_url(path)).listdir()]

    def list_files(self, folder: str, special: bool = False) -> list[str]:
        """Names of the files (not folders) in `folder`, from one listing request."""
        return [n for n in self.file(folder_url(folder)).listdir() if not n.endswith("/")]

    def abspath(self, path: str) -> str:
        """The URL with its '.' and '..' resolved."""
        return normalize(path.rstrip("/"))

    def join(self, path: str, *names: str) -> str:
        return join(path, *names)

    def dirname(self, path: str) -> str:
        return dirname(path)

    def inside(self, path: str, folder: str) -> bool:
        """True when `path` lies within `folder`: a hostile '../' must not read elsewhere."""
        return self.abspath(path).startswith(folder.rstrip("/") + "/")

    def open_regular(self, path: str, expected: FileIdentity | None = None) -> BinaryIO:
        """The remote file for header reads (seek, tell, read, close); its identity is its validator."""
        return _RemoteReader(self.file(path))  # type: ignore[return-value]

    def file_map(self, path: str, expected: FileIdentity | None = None) -> FileMap:
        """The remote file for positioned reads (range requests through the block cache)."""
        return RemoteFileMap(self.file(path))

    def folder_identities(self, folder: str) -> dict[str, FileIdentity]:
        """None taken: a remote file's identity is its validator, checked on every response."""
        return {}


class RemoteFileMap(FileMap):
    """A remote file of a checkpoint: positioned reads become range requests through a bounded cache.

    `path` is the URL as shown to a person (no credentials or tokens); the real URL stays in the
    remote module. The identity is the size (and the validator the remote file checks on every response).
    """

    def __init__(self, remote: RemoteFile) -> None:  # noqa: D107 - no stat: the first request recorded it
        self.remote = remote
        if remote.is_dir:
            raise NotACheckpointError(f"not a checkpoint: {remote.shown} is a folder, not a file")
        self.path = remote.shown
        self.identity = FileIdentity(0, 0, remote.size, 0)
        self._fd = None
        self._users = 0
        self._closing = False
        self._lock = threading.Lock()

    def changed(self) -> str | None:
        """What a response showed changed since the file was opened (asks the server nothing)."""
        return self.remote.changed()

    def readinto(self, offset: int, buf: memoryview | bytearray, check: bool = True,
                 ahead: ReadAhead | None = None) -> None:
        """Fill `buf` with the file's bytes at `offset` (range requests through the block cache, which
        reads ahead itself: `ahead` is not used), or raise."""
        view = memoryview(buf).cast("B")
        total = len(view)
        if offset < 0 or offset + total > self.size:
            raise TensorDataError(f"bytes {offset}..{offset + total} lie beyond the end of "
                                  f"{self.path.rsplit('/', 1)[-1]} ({self.size} bytes)")
        self.remote.readinto(offset, view)

    def close(self) -> None:
        """Nothing to close: requests are made per read."""

    def __del__(self) -> None:
        pass


class _RemoteReader:
    """A read-only file object over a remote file (header reads: zip directory, safetensors header)."""

    def __init__(self, remote: RemoteFile) -> None:
        if remote.is_dir:
            raise NotACheckpointError(f"not a checkpoint: {remote.shown} is a folder, not a file")
        self.remote, self.pos = remote, 0

    def __enter__(self) -> _RemoteReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.remote.size}[whence]
        self.pos = max(0, base + pos)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.remote.size - self.pos
        data = self.remote.read(self.pos, n)
        self.pos += len(data)
        return data

    def close(self) -> None:
        pass

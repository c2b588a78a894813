"""A remote file opened for positioned reads (the first request records its size and validator), and the
session of the remote files one opened checkpoint reads, with the transfer that counts them.

The first request of a file asks for its size, its validator and its first bytes at once: a speculative
range (`Session.first_range`) large enough for most headers, so that one request reads a shard's header. A
read that runs past those bytes (a longer header) asks for exactly the rest, and the file keeps it with
them (up to `HEAD_KEPT`); the session learns how long its files' headers run, and asks that much of the next
file's first request. The files of a session share one pool of connections (`HttpPool`), sized to the
requests in flight at once (`RemoteOptions.concurrency`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ckptview.core.errors import Cancelled, FileChangedError, RangesIgnored, RemoteError
from ckptview.core.jobs import Progress
from ckptview.core.message import Fix, Hint, Message
from ckptview.core.read.bytes.remote.cache import CACHE, Transfer
from ckptview.core.read.bytes.remote.fsspec_backend import FsspecBackend
from ckptview.core.read.bytes.remote.http import HttpBackend, HttpPool
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.bytes.remote.urls import protocol, require_extra, shown
from ckptview.core.units import human_bytes

if TYPE_CHECKING:
    from ckptview.core.read.bytes.location import Location

BLOCK = 256 << 10            # read-ahead: a small read fetches the aligned 256 KiB blocks around it
FIRST = 64 << 10             # the first request of a file (its size, validator and first bytes), at least
FIRST_MOST = 8 << 20         # ... and at most, however long the headers of the session's files ran
HEAD_KEPT = 16 << 20         # the most leading bytes a file keeps beside the cache (a header read in two parts)
LEARNED_MARGIN = 1.1         # the next file's first request: the longest header seen so far, and a tenth more
LARGE_REQUEST = 16 << 20     # values are fetched in requests of at most this many bytes
_SERIALS = itertools.count()


def backend_for(url: str, session: Session) -> HttpBackend | FsspecBackend:
    require_extra(url)
    if protocol(url) in ("http", "https"):
        return HttpBackend(url, session.transfer, session.options, session.http_pool())
    return FsspecBackend(url, session.transfer, session.options)


class RemoteFile:
    """A remote file opened for positioned reads: size and validator recorded by the first request."""

    def __init__(self, url: str, session: Session, first: int = FIRST) -> None:
        self.url, self.shown, self.session = url, shown(url), session
        self.serial = next(_SERIALS)  # the cache's key (an id() could be reused by a later file)
        self.backend = backend_for(url, session)
        self._changed: str | None = None
        self._head = b""
        self._listing: list[tuple[str, bool, int | None]] | None = None
        self._local: Any = None  # a downloaded copy (server without Range support, --download)
        self._lock = threading.Lock()
        size, self.validator, head, self.is_dir = self.backend.stat(first)
        if size < 0:  # the server ignored Range
            size = self._download(-2 - size if size <= -2 else None)
            session.count_download(size)
        self.size = size
        self._head = head  # kept beside the cache: most headers (safetensors, zip data.pkl) lie in it

    def _download(self, full: int | None) -> int:
        """The whole file (`full` bytes announced, or None) into a temporary file read from then on; its size.

        Only when the user allowed the download, and never more than announced (or than the user's cap when
        nothing was):
        a body without end is stopped, and the temporary file (unnamed, or removed at once) goes with it.
        """
        session = self.session
        cap = session.options.max_download
        what = f"{full} bytes ({human_bytes(full)})" if full is not None else "the whole file (size unknown)"
        if not session.options.download:
            raise RangesIgnored(Message(f"cannot open {self.shown}: the server does not honour range requests; "
                                        f"reading it means downloading {what}", Hint(Fix.DOWNLOAD)), self.shown, full)
        if full is None and cap is None:
            raise RangesIgnored(Message(f"cannot open {self.shown}: the server does not honour range requests and "
                                        "announces no size", Hint(Fix.MAX_DOWNLOAD)), self.shown, None)
        if full is not None and cap is not None and full > cap:
            raise RemoteError(Message(f"cannot open {self.shown}: downloading it means {what}, more than the "
                                      f"{human_bytes(cap)} a download may fetch", Hint(Fix.MAX_DOWNLOAD)))
        limit = full if full is not None else (cap or 0)
        local = tempfile.TemporaryFile(prefix="ckptview-download-")  # noqa: SIM115 - kept open, closed by close()
        report = session.report
        name = self.shown.rsplit("/", 1)[-1]

        def progress(done: int) -> None:
            if report is not None:  # it checks the open's cancel token: Cancelled stops the download
                report(Progress(done, limit, f"downloading {name}: {human_bytes(done)} of {human_bytes(limit)}"))

        try:
            self.backend.download(local, limit, full is not None, progress)
        except BaseException:
            local.close()
            raise
        local.flush()  # the size on disk is the size of the copy: the buffer's last bytes count too
        self._local = local
        return os.fstat(local.fileno()).st_size

    def changed(self) -> str | None:
        """What a response showed changed since the file was opened, else None (asks the server nothing)."""
        return self._changed

    def _fetch(self, start: int, end: int) -> bytes:
        try:
            data = self.backend.fetch(start, end, self.size, self.validator)
        except FileChangedError as exc:
            self._changed = getattr(exc, "what", "") or "changed since it was opened"  # later reads refused too
            raise
        return data

    def readinto(self, offset: int, view: memoryview) -> None:
        """Fill `view` with the bytes at `offset` (the caller checked the bounds)."""
        n = len(view)
        if n == 0:
            return
        if self._changed is not None:
            raise FileChangedError(self.shown, self._changed)
        if self._local is not None:
            with self._lock:
                self._local.seek(offset)
                got = self._local.readinto(view)
            if got != n:
                raise FileChangedError(self.shown, "downloaded copy is short")
            return
        head = self._head
        if offset + n <= len(head):
            view[:] = head[offset : offset + n]
            return
        if head and offset <= len(head) < offset + n:  # a header longer than the first request brought
            have = len(head) - offset
            view[:have] = head[offset:]
            offset, n, view = len(head), n - have, view[have:]
            if len(head) + n <= HEAD_KEPT:  # exactly the rest, in one request, kept with the first bytes
                rest = self._fetch(offset, offset + n)
                view[:] = rest
                with self._lock:
                    if len(self._head) == offset:
                        self._head = head + rest
                self.session.learn_header(self.url, offset + n)
                return
        if n >= 4 * BLOCK:  # values: large requests of their own, not through the block cache
            done = 0
            while done < n:
                step = min(LARGE_REQUEST, n - done)
                view[done : done + step] = self._fetch(offset + done, offset + done + step)
                done += step
            return
        first, last = offset // BLOCK, (offset + n - 1) // BLOCK
        blocks: dict[int, bytes] = {}
        missing: list[int] = []
        for b in range(first, last + 1):
            data = self.session.cache.get((self.serial, b))
            if data is None:
                missing.append(b)
            else:
                blocks[b] = data
        # One request per run of consecutive missing blocks (merged reads).
        runs: list[list[int]] = []
        for b in missing:
            if runs and runs[-1][-1] == b - 1:
                runs[-1].append(b)
            else:
                runs.append([b])
        for run in runs:
            start, end = run[0] * BLOCK, min((run[-1] + 1) * BLOCK, self.size)
            data = self._fetch(start, end)
            for b in run:
                piece = data[(b - run[0]) * BLOCK : (b - run[0] + 1) * BLOCK]
                blocks[b] = piece
                self.session.cache.put((self.serial, b), piece)
        joined = b"".join(blocks[b] for b in range(first, last + 1))
        skip = offset - first * BLOCK
        view[:] = joined[skip : skip + n]

    def read(self, offset: int, length: int) -> bytes:
        """Up to `length` bytes at `offset`."""
        length = max(0, min(length, self.size - offset))
        buf = bytearray(length)
        self.readinto(offset, memoryview(buf))
        return bytes(buf)

    def listdir(self) -> list[str]:
        """Names in a folder URL (a trailing '/' marks sub-folders); listed once per open, remembered."""
        if self._listing is None:
            self._listing = self.backend.listdir()
        entries = self._listing
        base = self.url.split("?", 1)[0].rstrip("/")
        with self.session.lock:
            for name, is_dir, size in entries:
                self.session.known.setdefault(base + "/" + name, (is_dir, size))
            if entries and self.backend.lists_everything:  # a name it does not list is not there
                self.session.listed.add(base)
        return [name + ("/" if is_dir else "") for name, is_dir, _ in entries]

    def forget_head(self) -> None:
        """Let go of the first bytes kept beside the cache (the open that needed them has ended), unless they
        are the whole file (a small file: a host may answer a later range with the whole file again)."""
        with self._lock:
            if len(self._head) < self.size:
                self._head = b""

    def close(self) -> None:
        """Drop a downloaded copy and the backend's own connections (a session's pool stays for its files)."""
        local, self._local = getattr(self, "_local", None), None
        if local is not None:
            with contextlib.suppress(OSError):
                local.close()
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _kind(url: str) -> str:
    """A file's kind, as far as its header's length goes: its extension ('.safetensors', '.json', '')."""
    name = url.split("?", 1)[0].rsplit("/", 1)[-1]
    return name[name.rfind("."):] if "." in name else ""


class Session:
    """The remote files one opened checkpoint reads, their shared cache and transfer counters, and the
    options they are read with. The open that begins it hands it down in its `ReaderContext`."""

    def __init__(self, root: str, options: RemoteOptions | None = None,
                 report: Callable[[Progress], None] | None = None, location: Location | None = None) -> None:
        self.root = root
        # The `Location` the open began with: held here, its token lives as long as the session (and the
        # checkpoint whose files read through it), and no longer.
        self.location = location
        self.options = options if options is not None else RemoteOptions()
        # The open's report: a download (`--download`, the window's "Download and open") hands it each
        # piece, and whatever it raises (Cancelled) stops the download.
        self.report = report
        self.transfer = Transfer()
        self.cache = CACHE
        self.files: dict[str, RemoteFile] = {}
        # What folder listings said: URL -> (is a folder, size or None); spares a request per file.
        self.known: dict[str, tuple[bool, int | None]] = {}
        self.listed: set[str] = set()  # folders whose listing names everything in them (an object store's)
        self.lock = threading.Lock()
        self._pool: HttpPool | None = None
        # How far from its start a file of this session was read in one run (a header), by the file name's
        # extension: a shard's header says how long the next shard's is, an index's says nothing of it.
        self._headers: dict[str, int] = {}
        self.downloads: list[int] = []  # sizes of the files downloaded whole (a host without range support)
        self.abandoned = False

    def http_pool(self) -> HttpPool:
        """The connections of this session's https:// files (made on first use)."""
        with self.lock:
            if self._pool is None:
                self._pool = HttpPool(self.options)
            return self._pool

    def first_range(self, url: str) -> int:
        """Bytes the first request of `url` asks for: FIRST, or more once the headers of this session's files
        of its kind (its extension) ran longer."""
        with self.lock:
            learned = int(self._headers.get(_kind(url), 0) * LEARNED_MARGIN)
        return min(FIRST_MOST, max(FIRST, learned))

    def learn_header(self, url: str, end: int) -> None:
        """`url` was read from its start to byte `end` in one run (a header)."""
        kind = _kind(url)
        with self.lock:
            self._headers[kind] = max(self._headers.get(kind, 0), end)

    def count_download(self, size: int) -> None:
        """A file was downloaded whole (its host ignores range requests)."""
        with self.lock:
            self.downloads.append(size)

    def abandon(self) -> None:
        """Cut this session's requests in flight and refuse new ones (the open reading it was cancelled)."""
        self.abandoned = True
        with self.lock:
            pool = self._pool
        if pool is not None:
            pool.abandon()

    def file(self, url: str, first: int = 0) -> RemoteFile:
        """The RemoteFile of `url` in this session (opened, i.e. stat'ed, on first use).

        The first request also fetches the first `first` bytes (default: `first_range()`, for a file about
        to be read); a size or existence check asks for one byte.
        """
        with self.lock:
            found = self.files.get(url)
        if found is None:
            if self.abandoned:
                raise Cancelled("cancelled")
            found = RemoteFile(url, self, first or self.first_range(url))
            with self.lock:
                found = self.files.setdefault(url, found)
        return found

    def settle(self) -> None:
        """The open is over: files let go of the first bytes they kept (the block cache bounds the rest)."""
        with self.lock:
            files = list(self.files.values())
        for f in files:
            f.forget_head()

    def close(self) -> None:
        """Forget cached blocks, any downloaded copies, and the kept connections."""
        for f in list(self.files.values()):
            f.close()
        if self._pool is not None:
            self._pool.close()

"""Remote checkpoint files (https://, hf://, s3://, any fsspec protocol), read by range requests.

This is the second implementation of the file layer of `ckptview.core.files`: a `RemoteFile` gives
the readers the same positioned reads as a local file, fetched as HTTP range requests (or the fsspec
protocol's ranged reads) through a bounded block cache. Small reads (headers, directories, pickles)
fetch whole aligned blocks (read-ahead) and merge neighbouring missing blocks into one request; large
reads (tensor values) go out as large requests of their own. Every request has a timeout, and every
response is checked against the file's validator (ETag / Last-Modified / size) recorded at open: a
file that changed between two requests raises `FileChangedError`.

Credentials come only from each library's standard places (HF_TOKEN and the hub's token file, AWS
environment and profiles, ~/.netrc); user:password in a URL is dropped, never sent, never shown.
URLs shown to a person (`shown`) carry neither userinfo nor query strings (presigned tokens).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import posixpath
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ckptview.core.errors import CheckpointError, FileChangedError, NotACheckpointError, RemoteError

EXTRA_HINT = "pip install 'ckptview[remote]'"
BLOCK = 256 << 10            # read-ahead: a small read fetches the aligned 256 KiB blocks around it
FIRST = 64 << 10             # the first request of a file (its size, validator and first bytes)
LARGE_REQUEST = 16 << 20     # values are fetched in requests of at most this many bytes
CACHE_BYTES = 64 << 20       # the bounded local cache of blocks, shared by every remote file
MAX_SESSIONS = 32            # sessions remembered for files first read after the open (DCP shards)
METADATA_NAMES = (".metadata", ".json")  # read whole right after their size is asked for
MAX_LISTING = 4 << 20        # an HTML folder listing larger than this is not read
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_URL_ANYWHERE = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]*@")
_QUERY_ANYWHERE = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?#]*)[?#]\S*")

def download_allowed() -> bool:
    """True when `--download` (CKPTVIEW_DOWNLOAD=1) lets a server that ignores Range send the whole file."""
    return os.environ.get("CKPTVIEW_DOWNLOAD", "") not in ("", "0")


def timeout() -> float:
    """Seconds any one request may wait for the server (CKPTVIEW_TIMEOUT, default 30)."""
    try:
        return max(0.01, float(os.environ.get("CKPTVIEW_TIMEOUT", "30")))
    except ValueError:
        return 30.0


__all__ = ["RemoteError", "RemoteFile", "Session", "Transfer", "is_url", "redact", "remote_file", "shown"]


def is_url(path: object) -> bool:
    """True for 'scheme://...' (https, hf, s3, any fsspec protocol); False for local paths and file://."""
    return isinstance(path, str) and bool(_URL.match(path)) and not path.lower().startswith("file://")


def shown(url: str) -> str:
    """The URL as a person may see it: no user:password, no query string or fragment (tokens)."""
    if not is_url(url):
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def redact(text: str) -> str:
    """`text` with every URL in it shown as `shown` shows it (error messages, logs)."""
    return _QUERY_ANYWHERE.sub(r"\1", _URL_ANYWHERE.sub(r"\1", text))


def _strip_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, parts.fragment))


def _protocol(url: str) -> str:
    return url.split("://", 1)[0].lower()


def require_extra(url: str) -> None:
    """One line naming the extra to install when the libraries for `url`'s protocol are missing."""
    proto = _protocol(url)
    needed = {"http": "requests", "https": "requests", "hf": "huggingface_hub", "s3": "s3fs"}.get(proto)
    for module in ("fsspec", needed):
        if module and importlib.util.find_spec(module) is None:
            raise RemoteError(f"cannot open {shown(url)}: URLs need the remote extra ({module} is missing): "
                              f"{EXTRA_HINT}")


@dataclass
class Transfer:
    """Bytes and requests a checkpoint's remote reads have cost so far (thread-safe counters)."""

    bytes: int = 0
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, nbytes: int, requests: int = 1) -> None:
        """Count one more request of `nbytes` bytes."""
        with self._lock:
            self.bytes += nbytes
            self.requests += requests

    def as_dict(self) -> dict[str, int]:
        """{"bytes": N, "requests": M} (the `info --json` contract)."""
        return {"bytes": self.bytes, "requests": self.requests}


class _BlockCache:
    """A bounded LRU of (file serial, block index) -> bytes."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit, self.size = limit, 0
        self.blocks: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[int, int]) -> bytes | None:
        with self.lock:
            data = self.blocks.get(key)
            if data is not None:
                self.blocks.move_to_end(key)
            return data

    def put(self, key: tuple[int, int], data: bytes) -> None:
        with self.lock:
            if key in self.blocks:
                return
            self.blocks[key] = data
            self.size += len(data)
            while self.size > self.limit and self.blocks:
                _, old = self.blocks.popitem(last=False)
                self.size -= len(old)


class Session:
    """The remote files one opened checkpoint reads, their shared cache and transfer counters."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.transfer = Transfer()
        self.cache = _CACHE
        self.files: dict[str, RemoteFile] = {}
        # What folder listings said: URL -> (is a folder, size or None); spares a request per file.
        self.known: dict[str, tuple[bool, int | None]] = {}
        self.lock = threading.Lock()

    def file(self, url: str, first: int = 0) -> RemoteFile:
        """The RemoteFile of `url` in this session (opened, i.e. stat'ed, on first use).

        The first request also fetches the first `first` bytes (default FIRST: a file about to be read);
        a size or existence check asks for one byte.
        """
        with self.lock:
            found = self.files.get(url)
        if found is None:
            found = RemoteFile(url, self, first or FIRST)
            with self.lock:
                found = self.files.setdefault(url, found)
        return found

    def close(self) -> None:
        """Forget cached blocks and any downloaded copies."""
        for f in list(self.files.values()):
            f.close()


_CACHE = _BlockCache()
_SESSIONS: OrderedDict[str, Session] = OrderedDict()
_SERIALS = itertools.count()
_REAL: dict[str, str] = {}  # shown URL -> URL with its query string (presigned tokens stay in here)
_REG_LOCK = threading.Lock()


_OPENING = threading.local()  # the session of the open in progress on this thread (shards join it)


@contextlib.contextmanager
def opening(url: str) -> Iterator[Session]:
    """The session an `open_checkpoint(url)` reads through: a new one, or the enclosing open's when
    `url` lies below it (the shards of an index, the parts of a folder), so one transfer counts them all."""
    outer: Session | None = getattr(_OPENING, "session", None)
    if outer is not None and _strip_userinfo(url).startswith(outer.root):
        yield outer
        return
    session = begin_session(url)
    _OPENING.session = session
    try:
        yield session
    finally:
        _OPENING.session = outer


def remember(url: str) -> str:
    """The shown form of `url`, to hand around in its place (tabs, logs); reads map it back to `url`."""
    url = _strip_userinfo(url)
    with _REG_LOCK:
        if shown(url) != url:  # never map a URL's token away by a later mention without it
            _REAL[shown(url)] = url
    return shown(url)


def begin_session(url: str) -> Session:
    """A fresh session for opening `url` (a file or a folder); files below it are read through it."""
    url = real_url(url)
    root = url if url.endswith("/") else dirname(url.split("?", 1)[0]) + "/"
    session = Session(root)
    with _REG_LOCK:
        _SESSIONS.pop(session.root, None)
        _SESSIONS[session.root] = session
        while len(_SESSIONS) > MAX_SESSIONS:
            _SESSIONS.popitem(last=False)
        if shown(url) != url:  # never map a URL's token away by a later mention without it
            _REAL[shown(url)] = url
    return session


def real_url(url: str) -> str:
    """The URL to request for `url` (a shown URL maps back to the one the user gave, tokens included)."""
    url = _strip_userinfo(url)
    with _REG_LOCK:
        return _REAL.get(url, url)


def session_for(url: str) -> Session:
    """The session whose root holds `url` (the newest open of that folder), else a new one."""
    url = real_url(url)
    with _REG_LOCK:
        best = max((r for r in _SESSIONS if url.startswith(r)), key=len, default=None)
        if best is not None:
            return _SESSIONS[best]
    return begin_session(url)


def remote_file(url: str, first: int = 0) -> RemoteFile:
    """The RemoteFile of `url` (through the session of the checkpoint being opened or read)."""
    require_extra(url)
    return session_for(url).file(real_url(url), first)


# ---------------------------------------------------------------------------------------------- backends


def _network_cause(exc: BaseException) -> str:
    """A short cause for a failed request: 'host not found', 'connection refused', 'timed out', ..."""
    import socket

    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen and len(seen) < 10:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__ or (cur.args[0] if cur.args and isinstance(cur.args[0], BaseException) else None)
    names = " ".join(type(e).__name__ for e in seen) + " " + " ".join(str(e) for e in seen)
    if any(isinstance(e, socket.gaierror) for e in seen) or "NameResolution" in names or "Name or service" in names:
        return "host not found (DNS)"
    if any(isinstance(e, (TimeoutError, socket.timeout)) for e in seen) or "Timeout" in names or "timed out" in names:
        return f"timed out after {timeout():g} s"
    if any(isinstance(e, ConnectionRefusedError) for e in seen) or "refused" in names.lower():
        return "connection refused"
    if any(isinstance(e, ConnectionResetError) for e in seen) or "reset" in names.lower():
        return "connection reset by the server"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return redact(text)[:160]


def _missing(message: str) -> RemoteError:
    """A RemoteError saying the file is not there (HTTP 404, no such key): `exists_kind` answers None."""
    exc = RemoteError(message)
    exc.missing = True  # type: ignore[attr-defined]
    return exc


def is_missing(exc: BaseException) -> bool:
    """True for the error of a URL that names nothing (as opposed to a network or access failure)."""
    return bool(getattr(exc, "missing", False))


def _status_cause(status: int) -> str:
    if status == 404:
        return "not found (HTTP 404)"
    if status in (401, 403):
        return (f"access denied (HTTP {status}): credentials come from HF_TOKEN or the hub's token file, "
                "AWS environment/profiles, or ~/.netrc")
    if status == 416:
        return "range not satisfiable (HTTP 416)"
    return f"HTTP {status}"


class _HttpBackend:
    """https:// and http:// through `requests`: ranged GETs, redirects followed, a timeout on each."""

    def __init__(self, url: str, transfer: Transfer) -> None:
        import requests

        self.url, self.requests, self.transfer = url, requests, transfer
        self.http = requests.Session()
        self.http.headers["User-Agent"] = "ckptview"
        self.http.headers["Accept-Encoding"] = "identity"  # byte ranges of the file, never of a gzip of it

    def _get(self, headers: dict[str, str], stream: bool = True) -> Any:
        self.transfer.add(0)  # one request; the body's bytes are counted as they are read
        try:
            return self.http.get(self.url, headers=headers, timeout=timeout(), stream=stream, allow_redirects=True)
        except self.requests.RequestException as exc:
            raise RemoteError(f"cannot read {shown(self.url)}: {_network_cause(exc)}") from None

    def stat(self, first: int) -> tuple[int, str, bytes, bool]:
        """(size, validator, the first `first` bytes, is a folder) from one ranged GET."""
        resp = self._get({"Range": f"bytes=0-{first - 1}"})
        with contextlib.closing(resp):
            final = resp.url or self.url
            if resp.status_code == 416:  # an empty file
                return 0, self._validator(resp), b"", False
            if resp.status_code in (403, 404) and self.url.split("?", 1)[0].endswith("/"):
                return 0, "", b"", True  # a folder the server does not list (object stores, CDNs)
            if resp.status_code == 404:
                raise _missing(f"cannot open {shown(self.url)}: {_status_cause(404)}")
            if resp.status_code >= 400:
                raise RemoteError(f"cannot open {shown(self.url)}: {_status_cause(resp.status_code)}")
            if final.split("?", 1)[0].endswith("/") or self.url.split("?", 1)[0].endswith("/"):
                return 0, "", b"", True  # a folder (servers redirect 'folder' to 'folder/')
            if resp.status_code == 200:  # Range ignored: the whole file is coming
                length = resp.headers.get("Content-Length")
                if length is not None and length.isdigit() and int(length) <= first:
                    # No more than was asked for: some servers answer a range covering the whole file so.
                    return int(length), self._validator(resp), self._body(resp, int(length)), False
                return -1 if length is None else -2 - int(length), self._validator(resp), b"", False
            total = self._total(resp)
            data = self._body(resp, min(first, total))
            return total, self._validator(resp), data, False

    @staticmethod
    def _validator(resp: Any) -> str:
        etag = resp.headers.get("ETag", "")
        if etag.startswith("W/"):
            etag = etag[2:]
        return etag or resp.headers.get("Last-Modified", "")

    def _total(self, resp: Any) -> int:
        rng = resp.headers.get("Content-Range", "")
        m = re.match(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", rng)
        if not m or m.group(3) == "*":
            raise RemoteError(f"cannot read {shown(self.url)}: the server answered a range request without a "
                              f"usable Content-Range ({rng[:60]!r})")
        return int(m.group(3))

    def _body(self, resp: Any, expect: int) -> bytes:
        try:
            data = resp.raw.read(expect + 1, decode_content=False)
        except Exception as exc:  # a timeout or reset in the middle of the body
            raise RemoteError(f"cannot read {shown(self.url)}: {_network_cause(exc)}") from None
        self.transfer.add(len(data), 0)
        if len(data) != expect:
            raise RemoteError(f"cannot read {shown(self.url)}: the server sent {len(data)} bytes for a "
                              f"{expect}-byte range (connection cut?)")
        return data

    def fetch(self, start: int, end: int, size: int, validator: str) -> bytes:
        """Bytes [start, end) of the file; FileChangedError when the file is no longer the one opened."""
        resp = self._get({"Range": f"bytes={start}-{end - 1}"})
        with contextlib.closing(resp):
            if resp.status_code >= 400:
                raise RemoteError(f"cannot read {shown(self.url)}: {_status_cause(resp.status_code)}")
            now = self._validator(resp)
            if validator and now and now != validator:
                raise FileChangedError(shown(self.url), f"ETag/Last-Modified {validator} -> {now}")
            if resp.status_code != 206:
                raise FileChangedError(shown(self.url), f"the server stopped honouring range requests "
                                                        f"(HTTP {resp.status_code})")
            total = self._total(resp)
            if total != size:
                raise FileChangedError(shown(self.url), f"size {size} -> {total} bytes")
            return self._body(resp, end - start)

    def download(self, into: Any) -> None:
        """The whole file into the open binary file `into` (a server that ignores Range; opted in)."""
        resp = self._get({})
        with contextlib.closing(resp):
            if resp.status_code >= 400:
                raise RemoteError(f"cannot read {shown(self.url)}: {_status_cause(resp.status_code)}")
            total = 0
            try:
                for chunk in resp.iter_content(1 << 20):
                    into.write(chunk)
                    total += len(chunk)
                    self.transfer.add(len(chunk), 0)
            except Exception as exc:
                raise RemoteError(f"cannot read {shown(self.url)}: {_network_cause(exc)}") from None

    def close(self) -> None:
        """Close the pooled connections."""
        self.http.close()

    def listdir(self) -> list[tuple[str, bool, int | None]]:
        """(name, is a folder, None) for each name linked from the folder's HTML listing."""
        resp = self._get({})
        with contextlib.closing(resp):
            if resp.status_code in (403, 404):  # not listed: its files are reached by name only
                return []
            if resp.status_code >= 400:
                raise RemoteError(f"cannot list {shown(self.url)}: {_status_cause(resp.status_code)}")
            raw = resp.raw.read(MAX_LISTING, decode_content=True)
            self.transfer.add(len(raw), 0)
            text = raw.decode("utf-8", "replace")
        names = []
        for href in re.findall(r'href="([^"?#]+)"', text):
            name = href.rstrip("/").rsplit("/", 1)[-1]
            from urllib.parse import unquote

            name = unquote(name)
            if name and name not in (".", "..") and not href.startswith(("http:", "https:")) and \
                    all(n != name for n, _, _ in names):
                names.append((name, href.endswith("/"), None))
        return names


class _FsspecBackend:
    """Any other protocol (hf://, s3://, gs://, memory://, ...) through fsspec's ranged reads."""

    def __init__(self, url: str, transfer: Transfer) -> None:
        import fsspec

        self.transfer = transfer
        kwargs: dict[str, Any] = {}
        proto = _protocol(url)
        if proto == "s3":
            kwargs = {"config_kwargs": {"connect_timeout": timeout(), "read_timeout": timeout(),
                                        "retries": {"max_attempts": 2}}}
        if proto == "hf":  # the hub reads its timeouts at import: set them where it looks for them
            from huggingface_hub import constants

            constants.HF_HUB_ETAG_TIMEOUT = constants.HF_HUB_DOWNLOAD_TIMEOUT = timeout()  # type: ignore[assignment]
        self.url = url
        try:
            self.fs, self.path = fsspec.core.url_to_fs(url, **kwargs)
        except (ImportError, ValueError) as exc:
            raise RemoteError(f"cannot open {shown(url)}: {redact(str(exc))[:160]} ({EXTRA_HINT})") from None

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.transfer.add(0)  # one call (the protocol may make more requests; not seen from here)
        try:
            return fn(*args, **kwargs)
        except FileNotFoundError:
            raise _missing(f"cannot {what} {shown(self.url)}: not found") from None
        except PermissionError:
            raise RemoteError(f"cannot {what} {shown(self.url)}: {_status_cause(403)}") from None
        except CheckpointError:
            raise
        except Exception as exc:
            status = getattr(getattr(exc, "response", None), "status_code", None)
            cause = _status_cause(status) if isinstance(status, int) else _network_cause(exc)
            raise RemoteError(f"cannot {what} {shown(self.url)}: {cause}") from None

    def info(self) -> dict[str, Any]:
        """fsspec's info() of the path."""
        return self._call("open", self.fs.info, self.path)

    @staticmethod
    def validator(info: dict[str, Any]) -> str:
        for key in ("ETag", "etag", "sha", "blob_id", "LastModified", "last_modified", "mtime", "created"):
            if info.get(key):
                return str(info[key])
        return ""

    def stat(self, first: int) -> tuple[int, str, bytes, bool]:
        info = self.info()
        if info.get("type") == "directory":
            return 0, "", b"", True
        size = int(info.get("size") or 0)
        data = self.fetch(0, min(first, size), size, "") if size else b""
        return size, self.validator(info), data, False

    def fetch(self, start: int, end: int, size: int, validator: str) -> bytes:
        import fsspec

        # The generic cat_file opens a buffered file whose default cache reads ahead by megabytes
        # (HfFileSystem among others): ask for exactly the range. Protocols with their own ranged
        # cat_file (s3fs, http) read exactly what is asked already.
        generic = type(self.fs).cat_file is fsspec.AbstractFileSystem.cat_file and not getattr(self.fs, "async_impl", False)
        exact = {"cache_type": "none"} if generic else {}
        data = self._call("read", self.fs.cat_file, self.path, start=start, end=end, **exact)
        self.transfer.add(len(data), 0)
        if len(data) != end - start:
            raise FileChangedError(shown(self.url), f"ends before byte {end}, was {size} bytes")
        return bytes(data)

    def download(self, into: Any) -> None:
        data = self._call("read", self.fs.cat_file, self.path)
        self.transfer.add(len(data), 0)
        into.write(data)

    def listdir(self) -> list[tuple[str, bool, int | None]]:
        entries = self._call("list", self.fs.ls, self.path, detail=True)
        return [(posixpath.basename(e["name"].rstrip("/")), e.get("type") == "directory",
                 int(e["size"]) if isinstance(e.get("size"), int) and e.get("type") != "directory" else None)
                for e in entries]

    def close(self) -> None:
        """Nothing to close: fsspec keeps its filesystems."""

    def exists_file(self) -> bool:
        try:
            return bool(self.fs.isfile(self.path))
        except Exception:
            return False


def _backend(url: str, transfer: Transfer) -> _HttpBackend | _FsspecBackend:
    require_extra(url)
    if _protocol(url) in ("http", "https"):
        return _HttpBackend(url, transfer)
    return _FsspecBackend(url, transfer)


# ---------------------------------------------------------------------------------------------- the file


class RemoteFile:
    """A remote file opened for positioned reads: size and validator recorded by the first request."""

    def __init__(self, url: str, session: Session, first: int = FIRST) -> None:
        self.url, self.shown, self.session = url, shown(url), session
        self.serial = next(_SERIALS)  # the cache's key (an id() could be reused by a later file)
        with _REG_LOCK:
            if self.shown != url:
                _REAL[self.shown] = url
        self.backend = _backend(url, session.transfer)
        self._changed: str | None = None
        self._head = b""
        self._listing: list[tuple[str, bool, int | None]] | None = None
        self._local: Any = None  # a downloaded copy (server without Range support, --download)
        self._lock = threading.Lock()
        size, self.validator, head, self.is_dir = self.backend.stat(first)
        if size < 0:  # the server ignored Range
            full = -2 - size if size <= -2 else None
            if not download_allowed():
                what = f"{full} bytes ({_human(full)})" if full is not None else "the whole file (size unknown)"
                raise RemoteError(f"cannot open {self.shown}: the server does not honour range requests; reading "
                                  f"it means downloading {what}: pass --download to do that")
            size = self._download()
        self.size = size
        self._head = head  # kept beside the cache: most headers (safetensors, zip data.pkl) lie in it

    def _download(self) -> int:
        """The whole file into a temporary file read from then on; its size."""
        local = tempfile.TemporaryFile(prefix="ckptview-download-")  # noqa: SIM115 - kept open, closed by close()
        try:
            self.backend.download(local)
        except BaseException:
            local.close()
            raise
        self._local = local
        return os.fstat(local.fileno()).st_size

    def changed(self) -> str | None:
        """What a response showed changed since the file was opened, else None (asks the server nothing)."""
        return self._changed

    def _fetch(self, start: int, end: int) -> bytes:
        try:
            data = self.backend.fetch(start, end, self.size, self.validator)
        except FileChangedError as exc:
            self._changed = str(exc).split("(", 1)[-1].rsplit(")", 1)[0] if "(" in str(exc) else "changed"
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
        if offset + n <= len(self._head):
            view[:] = self._head[offset : offset + n]
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
        return [name + ("/" if is_dir else "") for name, is_dir, _ in entries]

    def close(self) -> None:
        """Drop a downloaded copy and the backend's pooled connections."""
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


def _human(n: int | None) -> str:
    from ckptview.core.units import human_bytes

    return human_bytes(n or 0)


# ---------------------------------------------------------------------------------------------- path helpers


def _known(url: str) -> tuple[bool, int | None] | None:
    session, real = session_for(url), real_url(url)
    with session.lock:
        return session.known.get(real.rstrip("/"))


def size_of(url: str) -> int:
    """The size of the file at `url`: from a folder listing when one said it, else a 1-byte request."""
    known = _known(url)
    if known is not None and not known[0] and known[1] is not None:
        return known[1]
    # A metadata file's size is asked for just before it is read whole: fetch its start with it.
    return remote_file(url, first=FIRST if url.endswith(METADATA_NAMES) else 1).size


def exists_kind(url: str) -> str | None:
    """'file', 'dir' or None (not there) for a URL; network errors other than 'not found' raise."""
    known = _known(url)
    if known is not None:
        return "dir" if known[0] else "file"
    try:
        f = remote_file(url, first=1)
    except RemoteError as exc:
        if is_missing(exc):
            return None
        raise
    return "dir" if f.is_dir else "file"


def listdir(url: str) -> list[str]:
    """The names in a folder URL (without the trailing '/' of sub-folders)."""
    return [n.rstrip("/") for n in remote_file(folder_url(url)).listdir()]


def folder_url(url: str) -> str:
    """`url` with one trailing '/' (how a folder is requested)."""
    return url if url.endswith("/") else url + "/"


def join(url: str, *names: str) -> str:
    """`url` with names appended as path components."""
    base = url.rstrip("/")
    for name in names:
        base = base + "/" + name.lstrip("/")
    return base


def dirname(url: str) -> str:
    """The folder URL of a file URL."""
    return url.rstrip("/").rsplit("/", 1)[0] if url.count("/") > 2 else url


def normalize(url: str) -> str:
    """`url` with '.' and '..' resolved in its path (never above the host/bucket)."""
    parts = urlsplit(url)
    path = posixpath.normpath(parts.path) if parts.path else ""
    if path == ".":
        path = ""
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def not_found(url: str) -> NotACheckpointError:
    """'no such file: URL'."""
    return NotACheckpointError(f"no such file: {shown(url)}")

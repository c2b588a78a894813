"""https:// and http:// through `requests`: ranged GETs, each within a deadline, every answer checked.

Each request runs under an overall deadline (`deadline.Deadline`: connect, first byte, whole body);
every 206 answer's Content-Range must be the range asked for (first byte, last byte, and the size when
the file's size is known); a whole-file download writes at most the size it was given. The files of one
remote session share one `HttpPool`: one requests session whose connections are kept and reused, as many
as requests may be in flight at once (`RemoteOptions.concurrency`), and the requests in flight, cut
together when the session is abandoned (a cancelled open).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

from ckptview.core.errors import Cancelled, FileChangedError, RemoteError
from ckptview.core.message import Fix, Hint, Message
from ckptview.core.read.bytes.remote.cache import Transfer
from ckptview.core.read.bytes.remote.causes import missing_error, network_cause, status_cause
from ckptview.core.read.bytes.remote.deadline import (
    Deadline,
    InFlight,
    allowance,
    late,
    request_timeout,
    watched_adapter,
)
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.bytes.remote.urls import shown
from ckptview.core.units import human_bytes

MAX_LISTING = 4 << 20  # an HTML folder listing larger than this is not read
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$")


HOSTS_KEPT = 8  # hosts whose connections a pool keeps (a redirect to a CDN is a second host)


class HttpPool:
    """The connections of one remote session's https:// files: one requests session, its pool per host
    sized to the requests that may be in flight at once, and those requests, to cut them all together."""

    def __init__(self, options: RemoteOptions) -> None:
        import requests

        self.http = requests.Session()
        adapter = watched_adapter()
        for scheme in ("http://", "https://"):
            self.http.mount(scheme, adapter(pool_connections=HOSTS_KEPT, pool_maxsize=options.concurrency))
        self.http.headers["User-Agent"] = "ckptview"
        self.http.headers["Accept-Encoding"] = "identity"  # byte ranges of the file, never of a gzip of it
        self.in_flight = InFlight()

    def abandon(self) -> None:
        """Cut every request in flight now and refuse new ones (the open was cancelled)."""
        self.in_flight.abandon()

    def close(self) -> None:
        """Close the kept connections."""
        self.http.close()


class HttpBackend:
    """https:// and http:// through `requests`: ranged GETs, redirects followed, a deadline on each."""

    lists_everything = False  # an HTML listing may leave names out (web servers hide dot files)

    def __init__(self, url: str, transfer: Transfer, options: RemoteOptions, pool: HttpPool | None = None) -> None:
        import requests

        self.url, self.requests, self.transfer, self.options = url, requests, transfer, options
        self._own_pool = pool is None
        self.pool = pool if pool is not None else HttpPool(options)
        self.http = self.pool.http
        self._listing: bytes | None = None  # a folder's HTML listing, when the first request brought it whole

    @contextlib.contextmanager
    def _within(self, nbytes: int) -> Iterator[Deadline]:
        """A deadline for one request carrying about `nbytes`: past it, one line naming the deadline."""
        limit = Deadline(allowance(self.options.deadline, nbytes))
        try:
            with limit:
                if not self.pool.in_flight.add(limit):
                    raise Cancelled("cancelled")
                try:
                    yield limit
                finally:
                    self.pool.in_flight.discard(limit)
        except Cancelled:
            raise
        except Exception:
            if self.pool.in_flight.abandoned:  # cut because the open was cancelled, not by its deadline
                raise Cancelled("cancelled") from None
            if limit.passed():  # whatever the cut connection looked like to the library
                raise late(shown(self.url), limit.seconds) from None
            raise
        if self.pool.in_flight.abandoned:
            raise Cancelled("cancelled")
        if limit.passed():  # a body cut short may have looked complete (a listing)
            raise late(shown(self.url), limit.seconds)

    def _get(self, headers: dict[str, str], limit: Deadline) -> Any:
        self.transfer.add(0)  # one request; the body's bytes are counted as they are read
        try:
            return self.http.get(self.url, headers=headers, stream=True, allow_redirects=True,
                                 timeout=request_timeout(min(self.options.timeout, limit.remaining()), self.options.timeout,
                                                         limit))
        except self.requests.RequestException as exc:
            if limit.passed():
                raise late(shown(self.url), limit.seconds) from None
            raise RemoteError(f"cannot read {shown(self.url)}: {network_cause(exc, self.options.timeout)}") from None

    def stat(self, first: int) -> tuple[int, str, bytes, bool]:
        """(size, validator, the first `first` bytes, is a folder) from one ranged GET.

        A server that ignores Range answers the whole file: the size is then -1 (not announced) or
        -2 - N (N bytes announced), and nothing of the body is read.
        """
        with self._within(first) as limit:
            resp = self._get({"Range": f"bytes=0-{first - 1}"}, limit)
            with contextlib.closing(resp):
                return self._stat(resp, first)

    def _stat(self, resp: Any, first: int) -> tuple[int, str, bytes, bool]:
        final = resp.url or self.url
        if resp.status_code == 416:  # an empty file
            return 0, self._validator(resp), b"", False
        if resp.status_code in (403, 404) and self.url.split("?", 1)[0].endswith("/"):
            self._listing = b""  # a folder the server does not list (object stores, CDNs)
            return 0, "", b"", True
        if resp.status_code == 404:
            raise missing_error(f"cannot open {shown(self.url)}: {status_cause(404)}")
        if resp.status_code >= 400:
            raise RemoteError(f"cannot open {shown(self.url)}: {status_cause(resp.status_code)}")
        if final.split("?", 1)[0].endswith("/") or self.url.split("?", 1)[0].endswith("/"):
            # A folder (servers redirect 'folder' to 'folder/'): its listing came whole (a 200, not a part of
            # it), so it is kept, and listing the folder costs no second request.
            if resp.status_code == 200 and "html" in str(resp.headers.get("Content-Type", "")).lower():
                self._listing = self._read_listing(resp)
            return 0, "", b"", True
        if resp.status_code == 200:  # Range ignored: the whole file is coming
            length = resp.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) <= first:
                # No more than was asked for: some servers answer a range covering the whole file so.
                return int(length), self._validator(resp), self._body(resp, int(length)), False
            return -1 if length is None or not length.isdigit() else -2 - int(length), self._validator(resp), b"", False
        if resp.status_code != 206:
            raise RemoteError(f"cannot open {shown(self.url)}: HTTP {resp.status_code} for a range request")
        start, last, total = self._range(resp)
        if total is None:
            raise RemoteError(f"cannot read {shown(self.url)}: the server answered a range request without the "
                              f"file's size in its Content-Range ({self._header(resp)!r})")
        self._check_range(resp, 0, min(first, total) - 1, first - 1, (start, last, total))
        return total, self._validator(resp), self._body(resp, last + 1), False

    @staticmethod
    def _validator(resp: Any) -> str:
        etag: str = resp.headers.get("ETag", "")
        if etag.startswith("W/"):
            etag = etag[2:]
        modified: str = resp.headers.get("Last-Modified", "")
        return etag or modified

    @staticmethod
    def _header(resp: Any) -> str:
        return str(resp.headers.get("Content-Range", ""))[:80]

    def _range(self, resp: Any) -> tuple[int, int, int | None]:
        """(first byte, last byte, size or None) of a 206 answer's Content-Range; one line if it has none."""
        m = _CONTENT_RANGE.match(str(resp.headers.get("Content-Range", "")))
        if not m or int(m.group(1)) > int(m.group(2)):
            raise RemoteError(f"cannot read {shown(self.url)}: the server answered a range request without a "
                              f"usable Content-Range ({self._header(resp)!r})")
        total = None if m.group(3) == "*" else int(m.group(3))
        return int(m.group(1)), int(m.group(2)), total

    def _check_range(self, resp: Any, start: int, last: int, asked_last: int,
                     got: tuple[int, int, int | None]) -> None:
        """The answered range must be the one asked for: bytes start..last, within the file's size."""
        if got[0] != start or got[1] != last or (got[2] is not None and got[1] >= got[2]):
            raise RemoteError(f"cannot read {shown(self.url)}: asked for bytes {start}-{asked_last}, the server "
                              f"answered Content-Range {self._header(resp)!r} (not the range asked for)")

    def _body(self, resp: Any, expect: int) -> bytes:
        try:
            data: bytes = resp.raw.read(expect + 1, decode_content=False)
        except Exception as exc:  # a timeout or reset in the middle of the body
            raise RemoteError(f"cannot read {shown(self.url)}: {network_cause(exc, self.options.timeout)}") from None
        self.transfer.add(len(data), 0)
        if len(data) != expect:
            raise RemoteError(f"cannot read {shown(self.url)}: the server sent {len(data)} bytes for a "
                              f"{expect}-byte range (connection cut?)")
        return data

    def fetch(self, start: int, end: int, size: int, validator: str) -> bytes:
        """Bytes [start, end) of the file; FileChangedError when the file is no longer the one opened."""
        with self._within(end - start) as limit:
            resp = self._get({"Range": f"bytes={start}-{end - 1}"}, limit)
            with contextlib.closing(resp):
                if resp.status_code >= 400:
                    raise RemoteError(f"cannot read {shown(self.url)}: {status_cause(resp.status_code)}")
                now = self._validator(resp)
                if validator and now and now != validator:
                    raise FileChangedError(shown(self.url), f"ETag/Last-Modified {validator} -> {now}")
                if resp.status_code != 206:
                    raise FileChangedError(shown(self.url), f"the server stopped honouring range requests "
                                                            f"(HTTP {resp.status_code})")
                got = self._range(resp)
                if got[2] is not None and got[2] != size:
                    raise FileChangedError(shown(self.url), f"size {size} -> {got[2]} bytes")
                self._check_range(resp, start, end - 1, end - 1, got)
                return self._body(resp, end - start)

    def download(self, into: Any, limit: int, announced: bool,
                 progress: Callable[[int], None] | None = None) -> None:
        """The whole file into the open binary file `into` (a server that ignores Range; opted in), at most
        `limit` bytes: the size the server announced (`announced`), else `--max-download`. `progress` gets
        the bytes written after each piece; whatever it raises (Cancelled) stops the download."""
        with self._within(limit) as within:
            resp = self._get({}, within)
            with contextlib.closing(resp):
                if resp.status_code >= 400:
                    raise RemoteError(f"cannot read {shown(self.url)}: {status_cause(resp.status_code)}")
                if resp.status_code != 200:  # a part of the file, or no file at all
                    raise RemoteError(f"cannot read {shown(self.url)}: HTTP {resp.status_code} for the whole file")
                total = 0
                try:
                    for chunk in resp.iter_content(1 << 20):
                        if total + len(chunk) > limit:
                            why = ("than the size it announced" if announced
                                   else "(the most a download may fetch; the server announced no size)")
                            raise RemoteError(Message(f"cannot read {shown(self.url)}: the server sent more than "
                                                      f"{limit} bytes ({human_bytes(limit)}) {why}; download stopped",
                                                      *([] if announced else [Hint(Fix.MAX_DOWNLOAD)])))
                        into.write(chunk)
                        total += len(chunk)
                        self.transfer.add(len(chunk), 0)
                        if progress is not None:
                            progress(total)
                except (RemoteError, Cancelled):
                    raise
                except OSError:  # the temporary folder's disk (ENOSPC): the caller's one line
                    raise
                except Exception as exc:
                    if within.passed():
                        raise late(shown(self.url), within.seconds) from None
                    raise RemoteError(f"cannot read {shown(self.url)}: {network_cause(exc, self.options.timeout)}") from None
                if announced and total != limit:
                    raise RemoteError(f"cannot read {shown(self.url)}: the server sent {total} of the {limit} bytes "
                                      "it announced (connection cut?)")

    def close(self) -> None:
        """Close the pooled connections (those of the session's pool stay for its other files)."""
        if self._own_pool:
            self.pool.close()

    def _read_listing(self, resp: Any) -> bytes:
        try:
            raw: bytes = resp.raw.read(MAX_LISTING, decode_content=True)
        except Exception as exc:
            raise RemoteError(f"cannot list {shown(self.url)}: {network_cause(exc, self.options.timeout)}") from None
        self.transfer.add(len(raw), 0)
        return raw

    def listdir(self) -> list[tuple[str, bool, int | None]]:
        """(name, is a folder, None) for each name linked from the folder's HTML listing."""
        raw = self._listing
        if raw is None:
            with self._within(MAX_LISTING) as limit:
                resp = self._get({}, limit)
                with contextlib.closing(resp):
                    if resp.status_code in (403, 404):  # not listed: its files are reached by name only
                        return []
                    if resp.status_code >= 400:
                        raise RemoteError(f"cannot list {shown(self.url)}: {status_cause(resp.status_code)}")
                    raw = self._read_listing(resp)
        text = raw.decode("utf-8", "replace")
        names: dict[str, tuple[str, bool, int | None]] = {}
        for href in re.findall(r'href="([^"?#]+)"', text):
            name = unquote(href.rstrip("/").rsplit("/", 1)[-1])
            if name and name not in (".", "..") and not href.startswith(("http:", "https:")):
                names.setdefault(name, (name, href.endswith("/"), None))
        return list(names.values())

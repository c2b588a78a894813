"""https:// and http:// through `requests`: ranged GETs with a timeout each, validators checked."""

from __future__ import annotations

import contextlib
import re
from typing import Any
from urllib.parse import unquote

from ckptview.core.errors import FileChangedError, RemoteError
from ckptview.core.read.remote.cache import Transfer
from ckptview.core.read.remote.causes import missing_error, network_cause, status_cause
from ckptview.core.read.remote.urls import shown, timeout

MAX_LISTING = 4 << 20  # an HTML folder listing larger than this is not read


class HttpBackend:
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
            raise RemoteError(f"cannot read {shown(self.url)}: {network_cause(exc)}") from None

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
                raise missing_error(f"cannot open {shown(self.url)}: {status_cause(404)}")
            if resp.status_code >= 400:
                raise RemoteError(f"cannot open {shown(self.url)}: {status_cause(resp.status_code)}")
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
        etag: str = resp.headers.get("ETag", "")
        if etag.startswith("W/"):
            etag = etag[2:]
        modified: str = resp.headers.get("Last-Modified", "")
        return etag or modified

    def _total(self, resp: Any) -> int:
        rng = resp.headers.get("Content-Range", "")
        m = re.match(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", rng)
        if not m or m.group(3) == "*":
            raise RemoteError(f"cannot read {shown(self.url)}: the server answered a range request without a "
                              f"usable Content-Range ({rng[:60]!r})")
        return int(m.group(3))

    def _body(self, resp: Any, expect: int) -> bytes:
        try:
            data: bytes = resp.raw.read(expect + 1, decode_content=False)
        except Exception as exc:  # a timeout or reset in the middle of the body
            raise RemoteError(f"cannot read {shown(self.url)}: {network_cause(exc)}") from None
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
                raise RemoteError(f"cannot read {shown(self.url)}: {status_cause(resp.status_code)}")
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
                raise RemoteError(f"cannot read {shown(self.url)}: {status_cause(resp.status_code)}")
            total = 0
            try:
                for chunk in resp.iter_content(1 << 20):
                    into.write(chunk)
                    total += len(chunk)
                    self.transfer.add(len(chunk), 0)
            except Exception as exc:
                raise RemoteError(f"cannot read {shown(self.url)}: {network_cause(exc)}") from None

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
                raise RemoteError(f"cannot list {shown(self.url)}: {status_cause(resp.status_code)}")
            raw = resp.raw.read(MAX_LISTING, decode_content=True)
            self.transfer.add(len(raw), 0)
            text = raw.decode("utf-8", "replace")
        names: dict[str, tuple[str, bool, int | None]] = {}
        for href in re.findall(r'href="([^"?#]+)"', text):
            name = unquote(href.rstrip("/").rsplit("/", 1)[-1])
            if name and name not in (".", "..") and not href.startswith(("http:", "https:")):
                names.setdefault(name, (name, href.endswith("/"), None))
        return list(names.values())

"""A local HTTP server for the remote tests: serves a folder, honours Range (or not), counts requests.

Also answers the few Hub API routes `huggingface_hub.HfFileSystem` calls, so `hf://` can be pointed at
it with HF_ENDPOINT: files of repo ORG/REPO live under `hub/ORG/REPO/` of the served folder.

`Shaping` is what the local servers inject so that a test can see concurrency without timing anything: a
delay before every answer (a round trip), a cap on each connection's bandwidth, the most requests in flight
at once, and a gate that holds the first N matching requests until N are in flight together (a client that
asks one at a time never gets past it, and fails its test instead of passing by luck).
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HUB_SHA = "0123456789abcdef0123456789abcdef01234567"


class Counters:
    """Requests and body bytes served, per path and in all, and the client connections they came on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes = 0
        self.paths: list[str] = []
        self.bytes_by_path: dict[str, int] = {}
        self.connections: set[object] = set()  # the client ends (host, port) requests came from

    def add(self, path: str, nbytes: int, client: object = None) -> None:
        with self.lock:
            self.requests += 1
            self.bytes += nbytes
            self.paths.append(path)
            key = urllib.parse.urlsplit(path).path
            self.bytes_by_path[key] = self.bytes_by_path.get(key, 0) + nbytes
            if client is not None:
                self.connections.add(client)

    def add_bytes(self, nbytes: int, path: str | None = None) -> None:
        with self.lock:
            self.bytes += nbytes
            if path is not None:
                key = urllib.parse.urlsplit(path).path
                self.bytes_by_path[key] = self.bytes_by_path.get(key, 0) + nbytes

    def reset(self) -> None:
        with self.lock:
            self.requests = self.bytes = 0
            self.paths = []
            self.bytes_by_path = {}
            self.connections = set()


class Shaping:
    """A delay before each answer, a per-connection bandwidth cap, requests in flight, and a gate.

    `delay`: seconds before a request is answered (an injected round trip). `rate`: bytes per second each
    connection may send (None: no cap). `hold(n, pattern)`: the first `n` requests whose path matches
    `pattern` wait until `n` of them are in flight at once, then all go on (after `HOLD_LIMIT` seconds a
    held request goes on anyway and `hold_timeouts` counts it: the test then fails on its counts).
    `max_in_flight` is the most requests the server was answering at once.
    """

    HOLD_LIMIT = 60.0

    def __init__(self) -> None:
        self.delay = 0.0
        self.rate: float | None = None
        self.cond = threading.Condition()
        self.in_flight = 0
        self.max_in_flight = 0
        self._hold = 0
        self._pattern: re.Pattern[str] | None = None
        self._held = 0
        self.hold_timeouts = 0
        self.blocked: threading.Event | None = None  # set: matching requests wait on it (never answered)

    def hold(self, n: int, pattern: str) -> None:
        """Hold the first `n` requests matching `pattern` until `n` are in flight together."""
        with self.cond:
            self._hold, self._pattern, self._held = n, re.compile(pattern), 0

    def block(self, pattern: str) -> threading.Event:
        """Requests matching `pattern` are never answered until the returned event is set (a stuck host)."""
        with self.cond:
            self._pattern = re.compile(pattern)
            self.blocked = threading.Event()
            return self.blocked

    def wait_in_flight(self, n: int) -> bool:
        """Wait until `n` requests are in flight at once (True), or HOLD_LIMIT seconds (False)."""
        with self.cond:
            return self.cond.wait_for(lambda: self.in_flight >= n, self.HOLD_LIMIT)

    def reset(self) -> None:
        with self.cond:
            self.max_in_flight = self.in_flight
            self._hold = self._held = self.hold_timeouts = 0
            self._pattern = None
            self.blocked = None

    def enter(self, path: str) -> None:
        """A request arrived: count it in flight, hold it at the gate if it must, then wait the delay."""
        with self.cond:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.cond.notify_all()
            matches = self._pattern is not None and self._pattern.search(path) is not None
            blocked = self.blocked if matches else None
            if matches and self._held < self._hold:
                self._held += 1
                self.cond.notify_all()
                if not self.cond.wait_for(lambda: self._held >= self._hold, self.HOLD_LIMIT):
                    self.hold_timeouts += 1
        if blocked is not None:
            blocked.wait(self.HOLD_LIMIT)
        if self.delay:
            time.sleep(self.delay)

    def leave(self) -> None:
        with self.cond:
            self.in_flight -= 1
            self.cond.notify_all()

    def pieces(self, body: bytes | Iterable[bytes]) -> Iterator[bytes]:
        """The body in pieces, sent no faster than `rate` bytes per second (this connection's cap)."""
        chunks = [body] if isinstance(body, bytes) else body
        rate = self.rate
        for chunk in chunks:
            if rate is None or not chunk:
                yield chunk
                continue
            step = max(1, int(rate / 100))  # a hundredth of a second's worth at a time
            for i in range(0, len(chunk), step):
                piece = chunk[i:i + step]
                time.sleep(len(piece) / rate)
                yield piece


class _Handler(BaseHTTPRequestHandler):
    server: RangeServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, head: bool = False) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # Counted before the client can see the body.
        self.server.counters.add(self.path, 0 if head else len(body), self.client_address)
        if not head:
            for piece in self.server.shaping.pieces(body):
                self.wfile.write(piece)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._serve(head=False)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self._serve(head=False, post=body)

    def _serve(self, head: bool, post: bytes | None = None) -> None:
        shaping = self.server.shaping
        shaping.enter(self.path)
        try:
            self._answer(head, post)
        finally:
            shaping.leave()

    def _answer(self, head: bool, post: bytes | None = None) -> None:
        srv = self.server
        if srv.hang is not None:
            srv.hang.wait(60)  # a server that never answers (until the test ends)
            return
        url = urllib.parse.urlsplit(self.path)
        rel = urllib.parse.unquote(url.path)
        if rel.startswith("/api/"):
            return self._hub_api(rel, url.query, post)
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.*)$", rel)
        if m:
            rel = f"/hub/{m.group(1)}/{m.group(3)}"
        if rel.startswith("/private/"):
            return self._send(403, b"forbidden", head=head)
        full = os.path.realpath(os.path.join(srv.root, rel.lstrip("/")))
        if not full.startswith(os.path.realpath(srv.root)) or not os.path.exists(full):
            if m:  # the Hub says which kind of 'not found' (huggingface_hub's file_exists reads it)
                return self._send(404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound",
                                                                       "Content-Type": "application/json"},
                                  head=head)
            return self._send(404, b"not found", head=head)
        if os.path.isdir(full):
            if not srv.listings:  # an object store: folders are not there, only their files
                return self._send(404, b"not found", head=head)
            if not rel.endswith("/"):
                return self._send(301, b"", {"Location": rel + "/"}, head=head)
            names = sorted(os.listdir(full))
            links = "".join(f'<a href="{html.escape(n)}{"/" if os.path.isdir(os.path.join(full, n)) else ""}">'
                            f"{html.escape(n)}</a>\n" for n in names)
            return self._send(200, f"<html><body>{links}</body></html>".encode(), {"Content-Type": "text/html"},
                              head=head)
        st = os.stat(full)
        size = st.st_size
        etag = f'"{st.st_mtime_ns:x}-{size:x}"'
        headers = {"ETag": etag, "Content-Type": "application/octet-stream"}
        if srv.honour_range:
            headers["Accept-Ranges"] = "bytes"
        rng = self.headers.get("Range")
        if rng and srv.honour_range:
            mm = re.match(r"bytes=(\d+)-(\d*)$", rng)
            if not mm:
                return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head=head)
            start = int(mm.group(1))
            end = min(int(mm.group(2)) if mm.group(2) else size - 1, size - 1)
            if srv.lie == "shift-all" or srv.lie == "shift" and start > 0:  # another range, labelled as such
                start, end = min(start + 8, size - 1), min(end + 8, size - 1)
            if start >= size:
                return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head=head)
            with open(full, "rb") as fh:
                fh.seek(start)
                body = fh.read(end - start + 1)
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            if srv.lie == "long":  # a hostile server: more bytes than the range holds
                body += b"\0" * (1 << 20)
            if m:
                headers.update(self._hub_headers(full, etag))
            return self._send(206, body, headers, head=head)
        # The whole file: sent in pieces so a large file costs no memory; stopped when the client goes.
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        if m:
            for k, v in self._hub_headers(full, etag).items():
                self.send_header(k, v)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        srv.counters.add(self.path, 0, self.client_address)  # a request; its bytes are counted as they go
        if not head:
            try:
                with open(full, "rb") as fh:
                    while piece := fh.read(1 << 20):
                        for part in srv.shaping.pieces(piece):
                            self.wfile.write(part)
                        srv.counters.add_bytes(len(piece), self.path)
                        if srv.stall is not None:  # a slow link: the rest waits until the test lets it go
                            self.wfile.flush()
                            srv.stall.wait(60)
            except OSError:  # the client read what it wanted and closed
                self.close_connection = True

    # ---- the Hub routes HfFileSystem uses
    def _hub_headers(self, full: str, etag: str) -> dict[str, str]:
        return {"X-Repo-Commit": HUB_SHA, "X-Linked-Etag": etag, "X-Linked-Size": str(os.path.getsize(full))}

    def _entry(self, repo_dir: str, rel: str) -> dict[str, object]:
        full = os.path.join(repo_dir, rel)
        if os.path.isdir(full):
            return {"type": "directory", "oid": HUB_SHA, "size": 0, "path": rel}
        size = os.path.getsize(full)
        oid = hashlib.sha1(rel.encode()).hexdigest()
        return {"type": "file", "oid": oid, "size": size, "path": rel,
                "lfs": {"oid": hashlib.sha256(rel.encode()).hexdigest(), "size": size, "pointerSize": 130}}

    def _hub_api(self, rel: str, query: str, post: bytes | None) -> None:
        srv = self.server
        m = re.match(r"^/api/(models|datasets|spaces)/([^/]+/[^/]+)(?:/(revision|tree|paths-info)/([^/]+)(/.*)?)?$", rel)
        if not m:
            return self._send(404, b'{"error": "not found"}', {"Content-Type": "application/json"})
        repo, kind, _rev, sub = m.group(2), m.group(3), m.group(4), (m.group(5) or "").lstrip("/")
        repo_dir = os.path.join(srv.root, "hub", repo)
        if not os.path.isdir(repo_dir):
            return self._send(404, json.dumps({"error": "Repository not found"}).encode(),
                              {"Content-Type": "application/json", "X-Error-Code": "RepoNotFound"})
        if kind in (None, "revision"):
            body = {"id": repo, "sha": HUB_SHA, "siblings": []}
        elif kind == "tree":
            folder = os.path.join(repo_dir, sub)
            if not os.path.isdir(folder):
                return self._send(404, b'{"error": "not found"}', {"Content-Type": "application/json",
                                                                      "X-Error-Code": "EntryNotFound"})
            recursive = "recursive=true" in query.lower()
            items = []
            for dirpath, dirnames, filenames in os.walk(folder):
                for n in sorted(dirnames) + sorted(filenames):
                    items.append(self._entry(repo_dir, os.path.relpath(os.path.join(dirpath, n), repo_dir)))
                if not recursive:
                    break
            body = items
        else:  # paths-info
            form = urllib.parse.parse_qs(post.decode() if post else "")
            paths = form.get("paths", [])
            if not paths and post:
                try:
                    paths = json.loads(post).get("paths", [])
                except ValueError:
                    paths = []
            body = [self._entry(repo_dir, p) for p in paths if os.path.exists(os.path.join(repo_dir, p))]
        return self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})


class RangeServer(ThreadingHTTPServer):
    """The server: `honour_range=False` makes one that ignores Range; set `hang` to make it never answer,
    `stall` to make a whole file's answer wait after each MiB, `lie` to make it answer wrongly."""

    daemon_threads = True
    request_queue_size = 256  # a client's pool of connections is accepted at once, not five at a time

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up: not the test's business

    def __init__(self, root: str, honour_range: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root, self.honour_range = root, honour_range
        self.counters = Counters()
        self.shaping = Shaping()
        self.hang: threading.Event | None = None
        self.stall: threading.Event | None = None  # a whole-file answer waits on it after each MiB
        self.lie: str | None = None
        self.listings = True  # False: folders answer 404, as object stores and CDNs do
        # lie: "long": range answers carry more bytes than asked for; "shift": a range not at byte 0 is
        # answered with the range 8 bytes further on (its Content-Range says so); "shift-all": every range.
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        for event in (self.hang, self.stall, self.shaping.blocked):
            if event is not None:
                event.set()
        self.shutdown()
        self.server_close()
        self.thread.join(10)

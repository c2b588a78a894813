"""An overall deadline per request: connect, first byte and whole body, however slowly a server drips.

A socket timeout bounds each wait, not a request: a server sending one byte per second holds a reader
forever. So every request of the http backend runs under a `Deadline`: the connections it uses are
registered with it (the `watched_adapter` of its requests session), and when its time is up a timer
shuts their sockets down; the blocked read returns at once and the request fails with one line naming
the deadline. The deadline travels with its request, never with the thread: requests hands the
request's timeout object (`request_timeout`, which carries the deadline) down to the connection pool,
and the pool gives it to the connection the request holds while the response is awaited; two threads
reading one remote file at once each get their own. Connecting (and the TLS handshake, whose socket timeout CPython applies to the whole
handshake) waits at most the time left. The fsspec protocols get the same deadline from fsspec's own
`timeout` (async filesystems, which cancel the request) or from a waiting caller (the others).
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
from typing import Any

from ckptview.core.errors import RemoteTooSlow
from ckptview.core.message import Fix, Hint, Message

MIN_RATE = 128 << 10  # bytes per second: a request's allowance grows by one second per 128 KiB it carries


def allowance(deadline: float, nbytes: int) -> float:
    """Seconds a request carrying `nbytes` may take in all: `deadline` plus one second per 128 KiB."""
    return deadline + max(0, nbytes) / MIN_RATE


def late(url_shown: str, seconds: float) -> RemoteTooSlow:
    """The one-line error of a request that ran past its deadline."""
    return RemoteTooSlow(Message(f"cannot read {url_shown}: no complete answer within {seconds:.4g} s (the "
                                 "deadline of a request)", Hint(Fix.DEADLINE)), seconds)


class Deadline:
    """The sockets one request uses, shut down when its time is up (a read blocked on them then returns)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._ends = time.monotonic() + seconds
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def remaining(self) -> float:
        """Seconds left (at least a little: a wait of 0 would mean 'no timeout' to some libraries)."""
        return max(0.001, self._ends - time.monotonic())

    def passed(self) -> bool:
        """True once the time is up (a wait bounded by `remaining()` may end just before the timer fires)."""
        return self.expired or time.monotonic() >= self._ends

    def watch(self, sock: socket.socket | None) -> None:
        """Shut `sock` down when the time is up (at once if it is up already)."""
        if sock is None:
            return
        with self._lock:
            if not self.expired:
                self._socks.append(sock)
                return
        _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            socks, self._socks = self._socks, []
        for sock in socks:
            _shut(sock)

    def cut(self) -> None:
        """End the request now (its sockets shut down: a read blocked on them returns at once)."""
        self._ends = time.monotonic()
        self._expire()

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._socks = []


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _watch(deadline: Deadline | None, sock: Any) -> None:
    if deadline is not None and isinstance(sock, socket.socket):
        deadline.watch(sock)


def request_timeout(connect: float, read: float, deadline: Deadline) -> Any:
    """requests' `timeout=` for one request: (connect, read) seconds, carrying the request's `deadline`
    (a urllib3 Timeout, which requests hands to the pool as it is, redirects included)."""
    return _timeout_class()(connect=connect, read=read, deadline=deadline)


@functools.cache
def _timeout_class() -> Any:
    from urllib3.util.timeout import Timeout

    class DeadlineTimeout(Timeout):
        """A urllib3 Timeout that carries its request's Deadline through the pool's copies of it."""

        def __init__(self, *args: Any, deadline: Deadline | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.deadline = deadline

        def clone(self) -> Timeout:
            return DeadlineTimeout(connect=self._connect, read=self._read, total=self.total, deadline=self.deadline)

    return DeadlineTimeout


@functools.cache
def watched_adapter() -> Any:
    """A requests transport adapter whose connections register their socket with their request's deadline
    when a response is awaited (new and reused connections alike, redirects included).

    The deadline comes with the request's timeout (`request_timeout`); the pool hands it to the
    connection the request holds (a pooled connection serves one request at a time), never to a thread.
    """
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class WatchedHTTPConnection(HTTPConnection):
        deadline: Deadline | None = None  # of the request holding this connection, set by its pool

        def getresponse(self, *args: Any, **kwargs: Any) -> Any:
            _watch(self.deadline, self.sock)
            return super().getresponse(*args, **kwargs)

    class WatchedHTTPSConnection(HTTPSConnection):
        deadline: Deadline | None = None

        def getresponse(self, *args: Any, **kwargs: Any) -> Any:
            _watch(self.deadline, self.sock)
            return super().getresponse(*args, **kwargs)

    def make_request(pool: Any, base: Any, conn: Any, *args: Any, **kwargs: Any) -> Any:
        """The pool's `_make_request` with the request's deadline on the connection it holds meanwhile."""
        conn.deadline = getattr(kwargs.get("timeout"), "deadline", None)
        try:
            return base._make_request(pool, conn, *args, **kwargs)
        finally:
            conn.deadline = None

    class WatchedHTTPPool(HTTPConnectionPool):
        ConnectionCls = WatchedHTTPConnection

        def _make_request(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
            return make_request(self, HTTPConnectionPool, conn, *args, **kwargs)

    class WatchedHTTPSPool(HTTPSConnectionPool):
        ConnectionCls = WatchedHTTPSConnection

        def _make_request(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
            return make_request(self, HTTPSConnectionPool, conn, *args, **kwargs)

    # urllib3 names the pool's class in its messages: keep the names people know.
    WatchedHTTPPool.__name__, WatchedHTTPSPool.__name__ = HTTPConnectionPool.__name__, HTTPSConnectionPool.__name__
    pools = {"http": WatchedHTTPPool, "https": WatchedHTTPSPool}

    class WatchedAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

        def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **kwargs)
            if not proxy.lower().startswith("socks"):  # SOCKS managers bring their own connections
                manager.pool_classes_by_scheme = pools
            return manager

    return WatchedAdapter


class InFlight:
    """The deadlines of the requests a session has in flight, to cut them all at once when it is abandoned
    (an open cancelled while a pool of requests waits on the server): no thread stays blocked on a socket."""

    def __init__(self) -> None:
        self._live: set[Deadline] = set()
        self._lock = threading.Lock()
        self.abandoned = False

    def add(self, deadline: Deadline) -> bool:
        """Count `deadline` in flight; False (and cut) when the session was abandoned already."""
        with self._lock:
            if not self.abandoned:
                self._live.add(deadline)
                return True
        deadline.cut()
        return False

    def discard(self, deadline: Deadline) -> None:
        with self._lock:
            self._live.discard(deadline)

    def abandon(self) -> None:
        """Cut every request in flight; later ones are refused by `add`."""
        with self._lock:
            self.abandoned = True
            live, self._live = list(self._live), set()
        for deadline in live:
            deadline.cut()


class DeadlinePassed(Exception):
    """A call waited for by `call_within` did not end in time."""


def call_within(seconds: float, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` in a helper thread, waited for at most `seconds`; DeadlinePassed after that.

    For libraries whose requests cannot be interrupted from outside: the caller gets its answer (or
    the error) in time; a transfer still dripping is left to end on its own (the thread is a daemon).
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="ckptview-remote-call", daemon=True).start()
    if not done.wait(seconds):
        raise DeadlinePassed(f"no answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]

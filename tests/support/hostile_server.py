"""Hostile servers on 127.0.0.1 for the remote tests: raw TCP, each connection answered by a function.

`RawServer(answer)` accepts connections and calls `answer(conn, server)` for each in its own thread; the
answers below drip, send garbage where TLS is expected, or send a body without end. Every answer stops
when the client goes away or `stop()` is called, and each sends a bounded number of bytes, so a client
that never gives up still sees the connection end (a test then fails on its message instead of hanging).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable


class RawServer:
    """A TCP server on 127.0.0.1 answering every connection with `answer(conn, server)`."""

    def __init__(self, answer: Callable[[socket.socket, RawServer], None]) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.stopped = threading.Event()
        self.connections = 0
        self.threads: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _handle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            self.answer(conn, self)

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds` unless stopped; True when stopped."""
        return self.stopped.wait(seconds)

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()
        self.thread.join(10)
        for t in self.threads:
            t.join(10)


def read_request(conn: socket.socket) -> bytes:
    """The request's line and headers (up to the blank line)."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        piece = conn.recv(4096)
        if not piece:
            break
        data += piece
    return data


def drip(answer: bytes, step: float, at: int = 0, most: int = 400) -> Callable[[socket.socket, RawServer], None]:
    """Send `answer[:at]` at once, then one byte every `step` seconds (at most `most` bytes, then hang up)."""

    def serve(conn: socket.socket, server: RawServer) -> None:
        read_request(conn)
        conn.sendall(answer[:at])
        for i in range(at, min(len(answer), at + most)):
            if server.wait(step):
                return
            conn.sendall(answer[i : i + 1])

    return serve


def garbage(conn: socket.socket, server: RawServer) -> None:
    """Answer a TLS client hello with plain text: the client's handshake fails."""
    conn.recv(4096)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 4)
    server.wait(0.5)


def endless(limit: int) -> Callable[[socket.socket, RawServer], None]:
    """Ignore Range: answer 200 with no length and send zeros until the client goes (at most `limit` bytes)."""

    def serve(conn: socket.socket, server: RawServer) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n")
        piece = b"\0" * (64 << 10)
        sent = 0
        while sent < limit and not server.stopped.is_set():
            conn.sendall(piece)
            sent += len(piece)

    return serve

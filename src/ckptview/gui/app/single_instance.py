"""One window per user: a second launch hands its paths to the first over a QLocalSocket and exits.

The socket is the user's own: it lives in a private folder (`$XDG_RUNTIME_DIR`, else a 0700 folder in
the temporary directory, checked before use: a real folder, owned by us, no access for others), and
each side checks that the other runs as the same user. Messages are one line of JSON,
`{"paths": [absolute path, ...]}`, at most `MAX_MESSAGE` bytes, read within `READ_DEADLINE_MS`;
anything else is dropped with a log line. The server answers `ok`; a launch that gets no answer (a
foreign, squatted or hung socket) opens its own window instead of exiting with none.
"""

from __future__ import annotations

import json
import logging
import os
import socket as pysocket
import stat
import struct
import tempfile
from typing import Any

from PySide6.QtCore import QEventLoop, QObject, QTimer, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

SOCKET_FILE = "ckptview.sock"
MAX_MESSAGE = 1 << 20  # bytes, newline included
MAX_PATHS = 1000
READ_DEADLINE_MS = 5000
HANDOVER_TIMEOUT_MS = 3000  # how long a launch waits for the running window to confirm
ACK = b"ok\n"

log = logging.getLogger(__name__)


def _uid() -> int | None:
    """Our user id (None where the platform has none: Windows named pipes are per-session already)."""
    return os.getuid() if hasattr(os, "getuid") else None


def is_private_dir(path: str) -> bool:
    """True for a real folder (not a symlink) owned by us that no other user can enter or list."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == _uid() and st.st_mode & 0o077 == 0


def private_dir() -> str | None:
    """The per-user folder for the socket; None when no safe one exists (then no single instance)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and is_private_dir(runtime):
        return runtime
    folder = os.path.join(tempfile.gettempdir(), f"ckptview-{_uid()}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        log.warning("single instance off: cannot create %s (%s)", folder, exc)
        return None
    if not is_private_dir(folder):  # someone else made it, or it is a symlink, or others may enter
        log.warning("single instance off: %s is not a private folder owned by this user", folder)
        return None
    return folder


def server_name() -> str | None:
    """The user's server name: a socket path in the private folder (a named pipe per user on Windows).
    `$CKPTVIEW_SERVER_NAME` (tests) is read by cli.py and given to `launch` instead."""
    if _uid() is None:  # Windows: a named pipe per user name
        return f"ckptview-{os.environ.get('USERNAME', 'user')}"
    folder = private_dir()
    return None if folder is None else os.path.join(folder, SOCKET_FILE)


def peer_uid(sock: QLocalSocket) -> int | None:
    """The user id of the process at the other end (Linux), else the owner of the socket file."""
    fd = int(sock.socketDescriptor())
    peercred = getattr(pysocket, "SO_PEERCRED", None)
    if fd >= 0 and peercred is not None:
        try:
            with pysocket.socket(fileno=os.dup(fd)) as probe:
                _pid, uid, _gid = struct.unpack("3i", probe.getsockopt(pysocket.SOL_SOCKET, peercred,
                                                                      struct.calcsize("3i")))
            return int(uid)
        except OSError:
            pass
    path = sock.fullServerName()
    try:
        return os.stat(path).st_uid if path else None
    except OSError:
        return None


def send_to_running(paths: list[str], name: str | None, timeout_ms: int | None = None) -> bool:
    """Give `paths` to a running instance of this user; False when none took them (open a window then)."""
    if not name:
        return False
    timeout_ms = HANDOVER_TIMEOUT_MS if timeout_ms is None else timeout_ms
    sock = QLocalSocket()
    sock.connectToServer(name)
    try:
        if not sock.waitForConnected(timeout_ms):
            return False
        owner = peer_uid(sock)
        if _uid() is not None and owner != _uid():
            log.warning("not handing files to %s: its server runs as user %s, not %s", name, owner, _uid())
            return False
        sock.write(encode_message([os.path.abspath(p) for p in paths]))
        sock.flush()
        return _wait_for_ack(sock, timeout_ms)
    finally:
        sock.abort()


def _wait_for_ack(sock: QLocalSocket, timeout_ms: int) -> bool:
    # An event loop, not waitForReadyRead: the server may live in this very thread (tests, timing).
    reply = b""
    loop = QEventLoop()
    timer = QTimer()
    timer.setSingleShot(True)
    timer.timeout.connect(loop.quit)
    sock.readyRead.connect(loop.quit)
    sock.disconnected.connect(loop.quit)
    timer.start(timeout_ms)
    while timer.isActive():
        reply += bytes(sock.readAll().data())
        if b"\n" in reply or sock.state() != QLocalSocket.LocalSocketState.ConnectedState:
            break
        loop.exec()
    reply += bytes(sock.readAll().data())
    timer.stop()
    if reply.startswith(ACK):
        return True
    log.warning("the running instance did not confirm the hand-over: opening a window of our own")
    return False


def encode_message(paths: list[str]) -> bytes:
    """The one message a client sends."""
    return json.dumps({"paths": paths}).encode() + b"\n"


def decode_message(data: bytes) -> list[str] | None:
    """The paths of a well-formed message, else None (logged): exactly `{"paths": [absolute str, ...]}`."""
    try:
        message: Any = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        log.warning("ignored a hand-over message that is not JSON text (%s)", type(exc).__name__)
        return None
    if not isinstance(message, dict) or set(message) != {"paths"} or not isinstance(message["paths"], list):
        log.warning("ignored a hand-over message that is not {\"paths\": [...]}")
        return None
    paths = message["paths"]
    if len(paths) > MAX_PATHS or not all(isinstance(p, str) and p and "\0" not in p and os.path.isabs(p)
                                         for p in paths):
        log.warning("ignored a hand-over message whose paths are not a list of absolute paths")
        return None
    return list(paths)


class InstanceServer(QObject):
    """Listens for later launches; `paths_received(list[str])` for each (an empty list means 'raise')."""

    paths_received = Signal(list)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self.server.newConnection.connect(self._on_connection)
        self._buffers: dict[QLocalSocket, bytes] = {}
        self._timers: dict[QLocalSocket, QTimer] = {}

    def listen(self, name: str | None) -> bool:
        """Start listening; a stale socket from a crashed instance is removed first."""
        if not name:
            return False
        if self.server.listen(name):
            return True
        QLocalServer.removeServer(name)
        return self.server.listen(name)

    def close(self) -> None:
        """Stop listening."""
        self.server.close()

    def _on_connection(self) -> None:
        while self.server.hasPendingConnections():
            sock = self.server.nextPendingConnection()
            uid = _uid()
            if uid is not None and peer_uid(sock) not in (uid, None):
                log.warning("refused a hand-over from another user")
                sock.abort()
                sock.deleteLater()
                continue
            self._buffers[sock] = b""
            timer = QTimer(self)
            timer.setSingleShot(True)
            timer.timeout.connect(lambda s=sock: self._drop(s, "no complete message in time"))
            timer.start(READ_DEADLINE_MS)
            self._timers[sock] = timer
            sock.readyRead.connect(lambda s=sock: self._read(s))
            sock.disconnected.connect(lambda s=sock: self._closed(s))
            self._read(sock)

    def _read(self, sock: QLocalSocket) -> None:
        if sock not in self._buffers:
            return
        room = MAX_MESSAGE - len(self._buffers[sock])
        self._buffers[sock] += bytes(sock.read(room + 1).data())
        data = self._buffers[sock]
        end = data.find(b"\n")
        if end >= 0:
            paths = decode_message(data[:end])
            if paths is not None:
                sock.write(ACK)
                sock.flush()
            self._drop(sock, None)
            if paths is not None:
                self.paths_received.emit(paths)
        elif len(data) > MAX_MESSAGE - 1:
            self._drop(sock, f"message longer than {MAX_MESSAGE} bytes")

    def _closed(self, sock: QLocalSocket) -> None:
        self._read(sock)  # what arrived with the hang-up
        self._drop(sock, "the client hung up before a complete message" if sock in self._buffers
                   and self._buffers[sock] else None)

    def _drop(self, sock: QLocalSocket, reason: str | None) -> None:
        if self._buffers.pop(sock, None) is None:
            return
        if reason:
            log.warning("ignored a hand-over: %s", reason)
        timer = self._timers.pop(sock, None)
        if timer is not None:
            timer.stop()
            timer.deleteLater()
        sock.disconnectFromServer()  # sends what was written (the ack) first
        sock.deleteLater()


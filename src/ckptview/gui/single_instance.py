"""One window per user: a second launch hands its paths to the first over a QLocalSocket and exits."""

from __future__ import annotations

import getpass
import json
import os

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

SERVER_ENV = "CKPTVIEW_SERVER_NAME"


def server_name() -> str:
    """The per-user server name (`$CKPTVIEW_SERVER_NAME` overrides it, e.g. for tests)."""
    override = os.environ.get(SERVER_ENV)
    if override:
        return override
    try:
        user = getpass.getuser()
    except Exception:  # no user name (containers): fall back to the uid
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    return f"ckptview-{user}"


def send_to_running(paths: list[str], name: str, timeout_ms: int = 1000) -> bool:
    """Give `paths` to a running instance; False when none is listening."""
    socket = QLocalSocket()
    socket.connectToServer(name)
    if not socket.waitForConnected(timeout_ms):
        return False
    message = json.dumps({"paths": [os.path.abspath(p) for p in paths]}).encode() + b"\n"
    socket.write(message)
    socket.flush()
    ok = socket.waitForBytesWritten(timeout_ms) or socket.bytesToWrite() == 0
    socket.disconnectFromServer()
    if socket.state() != QLocalSocket.LocalSocketState.UnconnectedState:
        socket.waitForDisconnected(timeout_ms)
    return ok


class InstanceServer(QObject):
    """Listens for later launches; `paths_received(list[str])` for each (an empty list means 'raise')."""

    paths_received = Signal(list)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self.server.newConnection.connect(self._on_connection)
        self._buffers: dict[QLocalSocket, bytes] = {}

    def listen(self, name: str) -> bool:
        """Start listening; a stale socket from a crashed instance is removed first."""
        if self.server.listen(name):
            return True
        QLocalServer.removeServer(name)
        return self.server.listen(name)

    def close(self) -> None:
        """Stop listening."""
        self.server.close()

    def _on_connection(self) -> None:
        while self.server.hasPendingConnections():
            socket = self.server.nextPendingConnection()
            self._buffers[socket] = b""
            socket.readyRead.connect(lambda s=socket: self._read(s))
            socket.disconnected.connect(lambda s=socket: self._finish(s))
            self._read(socket)

    def _read(self, socket: QLocalSocket) -> None:
        if socket not in self._buffers:
            return
        self._buffers[socket] += bytes(socket.readAll().data())
        if b"\n" in self._buffers[socket]:
            self._finish(socket)

    def _finish(self, socket: QLocalSocket) -> None:
        data = self._buffers.pop(socket, None)
        if data is None:
            return
        socket.deleteLater()
        try:
            paths = json.loads(data.split(b"\n", 1)[0] or b"{}").get("paths", [])
        except (ValueError, AttributeError):
            return  # not one of ours; ignore
        self.paths_received.emit([str(p) for p in paths if isinstance(p, str)])

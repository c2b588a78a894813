"""The single-instance socket: private to the user, same-user peers only, bounded and schema-checked messages."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading

import pytest

from ckptview.cli import window_args
from ckptview.gui.app import single_instance
from ckptview.gui.app.launch import launch
from ckptview.gui.app.single_instance import InstanceServer, decode_message, send_to_running
from tests.support.guihelpers import make_state_dict


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """No $CKPTVIEW_SERVER_NAME, no $XDG_RUNTIME_DIR: the fallback folder goes under tmp_path."""
    monkeypatch.delenv("CKPTVIEW_SERVER_NAME", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    base = tmp_path / "tmp"
    base.mkdir()
    monkeypatch.setattr(single_instance.tempfile, "gettempdir", lambda: str(base))
    return base


@pytest.fixture
def server(qtbot, tmp_path):
    srv = InstanceServer()
    name = str(tmp_path / "s.sock")
    assert srv.listen(name)
    received: list[list[str]] = []
    srv.paths_received.connect(received.append)
    yield srv, name, received
    srv.close()


def _send_raw(name: str, payload: bytes) -> dict:
    """Send bytes from another thread (the server reads in this one); returns what happened."""
    result: dict = {"reply": b""}

    def go() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(20)
            s.connect(name)
            try:
                s.sendall(payload)
                while chunk := s.recv(100):
                    result["reply"] += chunk
            except OSError as exc:  # the server hung up on an oversized message
                result["error"] = exc
        result["done"] = True

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    result["thread"] = thread
    return result


@pytest.mark.parametrize("payload", [
    b'{"paths": "abc"}\n',
    b'{"paths": ["a", "b"]}\n',  # relative
    b'{"paths": [1, 2]}\n',
    b'{"paths": ["/x"], "run": "rm -rf"}\n',
    b'["/x"]\n',
    b"[" * 200_000 + b"\n",
    b'{"paths": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
    b'{"paths": ["/\xff\xfe"]}\n',
    b"\xff\xfe\xfd\n",
    b'{"paths": ["/a\\u0000b"]}\n',
])
def test_malformed_messages_open_nothing(qtbot, server, caplog, payload):
    srv, name, received = server
    with caplog.at_level(logging.WARNING, logger="ckptview.gui.app.single_instance"):
        sent = _send_raw(name, payload)
        qtbot.waitUntil(lambda: sent.get("done", False), timeout=10_000)
    assert received == [] and sent["reply"] == b""
    assert any("ignored a hand-over" in r.getMessage() for r in caplog.records)
    # The server still serves well-formed hand-overs afterwards.
    assert send_to_running(["/tmp/after.pt"], name)
    assert received == [["/tmp/after.pt"]]


def test_an_oversized_message_without_newline_is_cut_off(qtbot, server, caplog):
    srv, name, received = server
    with caplog.at_level(logging.WARNING, logger="ckptview.gui.app.single_instance"):
        sent = _send_raw(name, b"x" * (8 * single_instance.MAX_MESSAGE))
        qtbot.waitUntil(lambda: sent.get("done", False), timeout=20_000)
    assert received == [] and "error" in sent  # the server hung up long before 8 MiB
    assert any("longer than" in r.getMessage() for r in caplog.records)


def test_a_message_that_never_ends_is_dropped_at_the_deadline(qtbot, server, caplog, monkeypatch):
    monkeypatch.setattr(single_instance, "READ_DEADLINE_MS", 200)
    srv, name, received = server
    with caplog.at_level(logging.WARNING, logger="ckptview.gui.app.single_instance"), \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(name)
        s.sendall(b'{"paths": ["/x"')  # and then nothing, connection kept open
        qtbot.waitUntil(lambda: any("in time" in r.getMessage() for r in caplog.records), timeout=10_000)
        s.settimeout(10)
        assert s.recv(10) == b""  # the server closed it
    assert received == []


def test_decode_accepts_only_the_schema():
    assert decode_message(json.dumps({"paths": ["/a", "/b c"]}).encode()) == ["/a", "/b c"]
    assert decode_message(b'{"paths": []}') == []
    assert decode_message(b'{"paths": "abc"}') is None


def test_socket_lives_in_a_private_folder(private_tmp, monkeypatch, tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert single_instance.server_name() == str(runtime / "ckptview.sock")
    runtime.chmod(0o755)  # others may enter: not used; the 0700 fallback folder is made instead
    name = single_instance.server_name()
    folder = os.path.dirname(name)
    assert os.path.dirname(folder) == str(private_tmp)
    assert os.stat(folder).st_mode & 0o777 == 0o700 and os.stat(folder).st_uid == os.getuid()


@pytest.mark.parametrize("attack", ["open_mode", "symlink", "file", "foreign_owner"])
def test_an_unsafe_fallback_folder_turns_single_instance_off(private_tmp, monkeypatch, tmp_path, attack):
    folder = private_tmp / f"ckptview-{os.getuid()}"
    if attack == "open_mode":
        folder.mkdir(mode=0o777)
        folder.chmod(0o777)
    elif attack == "symlink":
        target = tmp_path / "elsewhere"
        target.mkdir(mode=0o700)
        folder.symlink_to(target)
    elif attack == "file":
        folder.write_text("")
    else:
        folder.mkdir(mode=0o700)
        monkeypatch.setattr(single_instance, "_uid", lambda: os.getuid() + 1)
    assert single_instance.server_name() is None


def test_default_name_hands_over_between_two_launches(qtbot, private_tmp, settings, tmp_path):
    first = make_state_dict(str(tmp_path / "one.pth"))
    second = make_state_dict(str(tmp_path / "two.pth"))
    window = launch(window_args([first]), settings)
    assert window is not None
    qtbot.addWidget(window)
    assert launch(window_args([second]), settings) is None
    qtbot.waitUntil(lambda: window.tabs.count() == 2, timeout=10_000)
    window.close()


class _ListeningServer:
    """A plain socket server that takes any hand-over and acknowledges it: it runs no peer check of its own,
    so only the client's check of the server's user can keep the paths from it."""

    def __init__(self, name: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(name)
        self.sock.listen(5)
        self.sock.settimeout(0.1)
        self.received = b""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(20)
                try:
                    while not self.received.endswith(b"\n") and (chunk := conn.recv(4096)):
                        self.received += chunk
                    if self.received:
                        conn.sendall(single_instance.ACK)
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.sock.close()


def test_a_server_of_another_user_gets_nothing_and_a_window_opens(qtbot, settings, tmp_path, monkeypatch):
    name = str(tmp_path / "foreign.sock")
    foreign = _ListeningServer(name)
    # Only the client asks for its peer's user here (the server above never does): the check under test is
    # the client's own.
    monkeypatch.setattr(single_instance, "peer_uid", lambda sock: os.getuid() + 1)
    try:
        path = make_state_dict(str(tmp_path / "mine.pth"))
        window = launch(window_args([path]), settings, name)
    finally:
        foreign.close()
    assert window is not None  # never exit 0 with no window
    qtbot.addWidget(window)
    assert foreign.received == b""  # the paths never left this process
    window.close()


def test_a_client_of_another_user_is_refused_by_the_server(qtbot, server, caplog, monkeypatch):
    srv, name, received = server
    # Only the server asks for its peer's user here (the raw client never does): the check under test is the
    # server's own.
    monkeypatch.setattr(single_instance, "peer_uid", lambda sock: os.getuid() + 1)
    with caplog.at_level(logging.WARNING, logger=single_instance.log.name):
        result = _send_raw(name, single_instance.encode_message([os.path.abspath("x.pth")]))
        qtbot.waitUntil(lambda: result.get("done", False), timeout=30_000)
    result["thread"].join(30)
    assert received == []
    assert not result["reply"].startswith(single_instance.ACK)
    assert any("from another user" in r.getMessage() for r in caplog.records), (result, caplog.records)


def test_a_squatted_socket_that_never_answers_still_opens_a_window(qtbot, settings, tmp_path, monkeypatch):
    monkeypatch.setattr(single_instance, "HANDOVER_TIMEOUT_MS", 300)
    name = str(tmp_path / "squat.sock")
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(name)
    squatter.listen(5)  # accepts in the kernel, reads nothing, answers nothing
    try:
        path = make_state_dict(str(tmp_path / "mine.pth"))
        window = launch(window_args([path]), settings, name)
        assert window is not None
        qtbot.addWidget(window)
        window.close()
    finally:
        squatter.close()

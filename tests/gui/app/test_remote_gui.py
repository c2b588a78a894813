"""The window and URLs: File > Open URL (Ctrl+L), links dropped on the window, recent files, status bar."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QUrl
from PySide6.QtGui import QKeySequence

from ckptview.core.units import plural
from ckptview.gui.app.main_window import _local_paths
from tests.support.guihelpers import make_state_dict, wait_settled
from tests.support.remote_server import RangeServer

pytest.importorskip("fsspec")
pytest.importorskip("requests")


@pytest.fixture
def server(tmp_path):
    make_state_dict(str(tmp_path / "model.pth"))
    srv = RangeServer(str(tmp_path))
    yield srv
    srv.stop()


def test_open_url_shows_tree_transfer_and_recent_without_tokens(qtbot, window, server, monkeypatch):
    assert window.menus.open_url_action.shortcut() == QKeySequence("Ctrl+L")
    host = server.url.split("://", 1)[1]
    from PySide6.QtWidgets import QInputDialog

    monkeypatch.setattr(QInputDialog, "getText",
                        staticmethod(lambda *a, **k: (f"http://me:pw@{host}/model.pth?token=hf_SECRET", True)))
    window.menus.open_url_action.trigger()
    (tab,) = window.checkpoint_tabs()
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    assert window.tabs.tabText(window.tabs.indexOf(tab)) == "model.pth"
    assert window.settings.recent_files() == [f"{server.url}/model.pth"]
    status = window.statusBar().currentMessage()
    assert "request" in status and "bytes" in status
    transfer = tab.checkpoint.metadata["_transfer"]
    qtbot.waitUntil(lambda: window.transfer_label.text() ==
                    f"transferred {transfer.bytes:,} bytes in {plural(transfer.requests, 'request')}", timeout=10_000)
    assert "SECRET" not in window.tabs.tabToolTip(0) and "pw" not in window.tabs.tabToolTip(0)
    assert tab.path == f"{server.url}/model.pth"  # what the tab logs and shows carries no token
    assert all("token=hf_SECRET" in p for p in server.counters.paths)  # ... yet every request carried it


def test_a_url_token_never_reaches_the_log_or_the_error_page(qtbot, window, server, caplog):
    host = server.url.split("://", 1)[1]
    (tab,) = window.open_paths([f"http://me:pw@{host}/missing.pth?token=hf_SECRET"])
    wait_settled(qtbot, tab)
    assert tab.state != "ready"
    assert "SECRET" not in caplog.text and "me:pw" not in caplog.text
    assert "SECRET" not in tab.error_text and "pw@" not in tab.error_text


def test_a_dropped_link_opens_and_a_404_is_a_message_in_its_tab(qtbot, window, server):
    mime = QMimeData()
    mime.setUrls([QUrl(f"{server.url}/missing.pth")])
    paths = _local_paths(mime)
    assert paths == [f"{server.url}/missing.pth"]
    (tab,) = window.open_paths(paths)
    wait_settled(qtbot, tab)
    assert tab.state != "ready"
    assert "missing.pth" in tab.error_text and ("not found" in tab.error_text or "no such file" in tab.error_text)
    assert window.isVisible()


@pytest.fixture
def shards_server(tmp_path):
    from tests.support.shards import write_shards

    shards = write_shards(str(tmp_path / "m"), 12, 20)
    srv = RangeServer(str(tmp_path))
    yield srv, shards
    srv.stop()


def test_a_remote_folder_shows_shards_read_of_all_as_it_opens(qtbot, window, shards_server):
    srv, shards = shards_server
    (tab,) = window.open_paths([f"{srv.url}/m/"])
    seen: list[str] = []
    tab.opener.progress.connect(lambda step: seen.append(step.message))
    wait_settled(qtbot, tab, timeout=60_000)
    assert tab.state == "ready", tab.error_text
    assert len(tab.checkpoint.tensors()) == 12 * 20
    assert f"{len(shards.names)} of {len(shards.names)} shards read" in seen, seen


def test_cancel_stops_a_remote_folders_open_and_its_requests(qtbot, window, shards_server):
    """The loading page's Cancel, while the shard requests wait on a host that never answers them: the tab
    says so at once, and every thread of the open's pool returns (its request cut), not at its deadline."""
    import threading

    srv, _ = shards_server
    blocked = srv.shaping.block(r"\.safetensors$")
    (tab,) = window.open_paths([f"{srv.url}/m/"])
    assert srv.shaping.wait_in_flight(4)
    pool = [t for t in threading.enumerate() if t.name == "ckptview-fan-out"]  # before Cancel: it ends them
    assert pool  # the shard requests are in flight ...
    tab._loading.cancel_clicked.emit()
    assert tab.state == "error" and "cancelled" in tab.error_text
    for thread in pool:  # ... and each returns now, while the host still holds its request
        thread.join(60)
    assert not any(t.is_alive() for t in pool)
    assert not blocked.is_set()


def test_a_reload_keeps_the_token_and_closing_the_tab_lets_it_go(qtbot, window, server):
    """The tab holds its URL's `Location`: a reload requests with the token the user gave; once the tab is
    closed and its open's session collected, no state of the process keeps the token (issue 47, finding 4)."""
    from PySide6.QtCore import QCoreApplication, QEvent

    from ckptview.core.gc_policy import release_parked
    from ckptview.core.read.bytes.location import held_tokens

    host = server.url.split("://", 1)[1]
    (tab,) = window.open_paths([f"http://me:pw@{host}/model.pth?X-Amz-Signature=hf_SECRET"])
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    assert tab.path == f"{server.url}/model.pth" and "SECRET" not in repr(tab.location)
    server.counters.reset()
    tab.reload()
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    assert server.counters.paths and all("X-Amz-Signature=hf_SECRET" in p for p in server.counters.paths)
    window.close_tab(window.tabs.indexOf(tab))
    del tab
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)

    def gone() -> bool:
        release_parked()  # what the window does once a closed tab is deleted: the session's cycle is collected
        return tab_url not in held_tokens()

    tab_url = f"{server.url}/model.pth"
    qtbot.waitUntil(gone, timeout=10_000)

"""The window survives what files do under it: special files, files re-saved while open, errors from any
worker, huge headers and many files at once. Each case checks the window is alive, the other tabs keep
their state and the message names the problem."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import textwrap

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QFrame, QLabel, QPushButton

from ckptview.core.errors import CheckpointFormatError, FileChangedError
from ckptview.gui.checkpoint.tab import CheckpointTab
from tests.support.guihelpers import make_state_dict, wait_settled


def open_ready(qtbot, window, path: str) -> CheckpointTab:
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    return tab


def select(tab: CheckpointTab, name: str) -> None:
    """Select only `name`, as a click does (explicitly: a modifier key left down elsewhere must not toggle)."""
    from PySide6.QtCore import QItemSelectionModel

    from ckptview.core.inspect.grouping import find_row

    index = tab.model.index_of(find_row(tab.top, name))
    assert index.isValid()
    flags = QItemSelectionModel.SelectionFlag
    tab.tree.selectionModel().setCurrentIndex(index, flags.ClearAndSelect | flags.Rows)
    assert [r.name for r in tab.selected_rows()] == [name]


def keeps_state(tab: CheckpointTab, name: str) -> None:
    """`tab` is still open, ready, without a changed bar, with `name` selected."""
    assert tab.state == "ready" and not tab.changed_bar.changed_text
    assert tab.changed_bar.isHidden()  # (isVisible is False for any tab in the background)
    assert [r.name for r in tab.selected_rows()] == [name]


@pytest.fixture
def other(qtbot, window, tmp_path):
    """A second tab with a selection, which every case must leave as it was."""
    tab = open_ready(qtbot, window, make_state_dict(str(tmp_path / "other.pth")))
    select(tab, "decoder.embed.weight")
    return tab


# --- special files -----------------------------------------------------------------------------------
def _unix_socket(folder: str) -> tuple[str, socket.socket]:
    path = os.path.join(folder, "sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    return path, sock


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX special files")
def test_special_files_fail_at_once_in_their_tab(qtbot, window, other):
    folder = tempfile.mkdtemp(prefix="ckv")  # short: a socket path is limited to about 100 bytes
    fifo = os.path.join(folder, "pipe.pth")
    os.mkfifo(fifo)
    sock_path, sock = _unix_socket(folder)
    cases = [(fifo, "FIFO"), (sock_path, "socket"), (os.devnull, "character device")]
    if os.path.exists("/proc/self/maps"):
        cases += [("/proc/self/maps", "/proc"), ("/proc/self/mem", "/proc")]
    try:
        for path, named in cases:
            (tab,) = window.open_paths([path])
            # At once: no worker was started, so nothing waits on the event loop (or on a writer).
            assert tab.state == "error", path
            assert named in tab.error_text and "not a regular file" in tab.error_text
            assert tab.error_label.text() == tab.error_text
            assert tab.findChild(QPushButton, "reloadButton") is not None
        assert window.isVisible()
        keeps_state(other, "decoder.embed.weight")
        from ckptview.gui.base.workers import wait_for_workers

        assert wait_for_workers(30_000)  # no worker is blocked in open() on the FIFO
    finally:
        sock.close()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX special files")
def test_process_with_a_fifo_tab_exits(tmp_path):
    """`ckptview FIFO`: the window shows the error and the process ends when the window closes."""
    fifo = str(tmp_path / "pipe.pth")
    os.mkfifo(fifo)
    script = textwrap.dedent(f"""
        import os, sys
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        from PySide6.QtCore import QTimer
        from ckptview.cli import window_args
        from ckptview.gui.app import launch as app
        from ckptview.gui.base.settings import Settings
        qapp = app.application()
        window = app.launch(window_args(["--new-instance", {fifo!r}]), Settings({str(tmp_path / "s.ini")!r}),
                            name="ckptview-test-fifo-{os.getpid()}")
        tab = window.checkpoint_tabs()[0]
        print(tab.state, tab.error_text, flush=True)
        QTimer.singleShot(200, window.close)
        qapp.exec()
        from ckptview.gui.base.workers import wait_for_workers
        print("workers done", wait_for_workers(20_000), flush=True)
    """)
    # The deadline is far from normal (about a second): it only turns a hang into a failure.
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=str(tmp_path), check=False)
    assert result.returncode == 0, result.stderr
    assert "error not a regular file" in result.stdout and "FIFO" in result.stdout
    assert "workers done True" in result.stdout


# --- files that change on disk -----------------------------------------------------------------------
def settle_reads(qtbot) -> None:
    """Let the panels' reads of the current selection finish (including those a repaint starts)."""
    from ckptview.gui.base.workers import wait_for_workers

    assert wait_for_workers(60_000)
    qtbot.wait(10)
    assert wait_for_workers(60_000)


def _resave(path: str, **extra) -> None:
    import torch

    torch.manual_seed(1)
    state = {"encoder.layers.0.attn.q_proj.weight": torch.randn(4, 4), "decoder.embed.weight": torch.randn(3, 2)}
    state.update(extra)
    torch.save(state, path)


def test_resaved_file_shows_the_bar_and_reload_keeps_the_place(qtbot, window, other, tmp_path):
    path = make_state_dict(str(tmp_path / "model.pth"))
    from ckptview.core.inspect.grouping import find_row

    tab = open_ready(qtbot, window, path)
    tab.tree.collapseAll()
    tab.tree.expand(tab.model.index_of(find_row(tab.top, "decoder")))
    tab.tree.expand(tab.model.index_of(find_row(tab.top, "decoder.embed")))  # collapsed when a file opens
    select(tab, "encoder.layers.0.attn.q_proj.weight")
    tab.side_tabs.setCurrentIndex(tab.side_tabs.count() - 1)
    side = tab.side_tabs.tabText(tab.side_tabs.currentIndex())
    assert not tab.check_file() and not tab.changed_bar.isVisible()
    settle_reads(qtbot)  # a read in flight while the file is rewritten faults until the core checks it
    _resave(path, new=__import__("torch").zeros(5))  # a training loop saving over the same path
    window.poll_files()
    assert tab.changed_bar.changed_text and tab.changed_bar.isVisible()
    assert "changed on disk" in tab.changed_bar.label.text()
    assert "size" in tab.changed_bar.label.text() or "rewritten" in tab.changed_bar.label.text()
    assert tab.changed_bar.findChild(QPushButton, "reloadButton").text() == "Reload"
    keeps_state(other, "decoder.embed.weight")  # polled too, but its file did not change

    assert window.menus.reload_action.shortcut() == QKeySequence("Ctrl+R")
    assert window.menus.reload_action in window.menus["File"].actions()
    window.tabs.setCurrentWidget(tab)
    window.menus.reload_action.trigger()
    wait_settled(qtbot, tab)
    assert tab.state == "ready" and not tab.changed_bar.changed_text and not tab.changed_bar.isVisible()
    assert [r.name for r in tab.selected_rows()] == ["encoder.layers.0.attn.q_proj.weight"]
    assert "4 × 4" in tab.detail.toPlainText()  # the new file's shape, not the old 8 × 16
    assert tab.model.index_of(find_row(tab.top, "new")).isValid()
    assert tab.side_tabs.tabText(tab.side_tabs.currentIndex()) == side  # by title: the tabs may differ now
    assert tab.tree.isExpanded(tab.model.index_of(find_row(tab.top, "decoder.embed")))  # expanded by hand
    assert len(window.checkpoint_tabs()) == 2
    keeps_state(other, "decoder.embed.weight")


def test_selecting_after_the_file_shrank_shows_the_bar_instead_of_reading(qtbot, window, other, tmp_path):
    """The window used to die (SIGBUS) when a tensor was selected after its file was truncated or re-saved."""
    import torch

    from ckptview.gui.base.workers import wait_for_workers

    path = str(tmp_path / "big.pth")
    torch.save({"a.weight": torch.randn(256, 256), "b.weight": torch.randn(256, 256)}, path)
    tab = open_ready(qtbot, window, path)
    select(tab, "a.weight")  # the panels read its values through a map of the file
    settle_reads(qtbot)  # no event runs between the truncation and select(): nothing reads meanwhile
    os.truncate(path, 40)  # pages past the new end now fault when touched; inside data.pkl: nothing to salvage
    select(tab, "b.weight")
    assert tab.changed_bar.isVisible() and "size" in tab.changed_bar.label.text()
    assert wait_for_workers(60_000)
    qtbot.wait(10)
    assert window.isVisible() and tab.state == "ready"
    keeps_state(other, "decoder.embed.weight")
    tab.reload()
    wait_settled(qtbot, tab)
    assert tab.state == "error" and tab.error_text  # the truncated file is now refused in place


def test_deleted_and_replaced_files_show_the_bar(qtbot, window, other, tmp_path):
    gone = open_ready(qtbot, window, make_state_dict(str(tmp_path / "gone.pth")))
    replaced = open_ready(qtbot, window, make_state_dict(str(tmp_path / "replaced.pth")))
    os.remove(gone.path)
    _resave(str(tmp_path / "new.pth"))
    os.replace(str(tmp_path / "new.pth"), replaced.path)  # an atomic save: a new inode under the old name
    for tab in (gone, replaced):
        window.tabs.setCurrentWidget(tab)  # switching to a tab checks its file at once
        assert tab.changed_bar.isVisible(), tab.path
    assert "deleted" in gone.changed_bar.label.text()
    assert "replaced" in replaced.changed_bar.label.text()
    gone.reload()  # the file is gone: the tab says so in place, nothing else changes
    wait_settled(qtbot, gone)
    assert gone.state == "error" and "no such file" in gone.error_text
    keeps_state(other, "decoder.embed.weight")


def test_a_worker_that_finds_the_file_changed_offers_the_reload(qtbot, window, other, tmp_path):
    from ckptview.gui.base.workers import GeneratorWorker

    tab = open_ready(qtbot, window, make_state_dict(str(tmp_path / "model.pth")))

    def read_values(token=None):  # stands in for a panel's read that the core found changed
        raise FileChangedError(tab.path, "size 1,000 -> 10 bytes")

    worker = GeneratorWorker(read_values)
    with qtbot.waitSignal(worker.signals.errored, timeout=20_000):
        worker.start()
    qtbot.waitUntil(lambda: tab.changed_bar.isVisible(), timeout=20_000)
    assert "changed on disk" in tab.changed_bar.label.text()
    keeps_state(other, "decoder.embed.weight")

    # The core may name the file through a symlink, or a shard inside a folder checkpoint.
    link = str(tmp_path / "link.pth")
    os.symlink(other.path, link)

    def read_through_link(token=None):
        raise FileChangedError(link, "inode changed")

    worker = GeneratorWorker(read_through_link)
    with qtbot.waitSignal(worker.signals.errored, timeout=20_000):
        worker.start()
    qtbot.waitUntil(lambda: bool(other.changed_bar.changed_text), timeout=20_000)
    assert not other.changed_bar.isHidden()  # shown as soon as its tab is (it is in the background now)


@pytest.mark.parametrize("error", [FileChangedError("/x/model.pth", "inode changed"),
                                   CheckpointFormatError("truncated zip: central directory missing"),
                                   OSError(5, "Input/output error"), RuntimeError("reader bug")])
def test_any_error_from_the_opening_worker_stays_in_its_tab(qtbot, window, other, tmp_path, monkeypatch, error):
    import ckptview.gui.checkpoint.opener as tab_opener

    def failing(path, header_limit=None):
        raise error

    monkeypatch.setattr(tab_opener, "open_and_prepare", failing)
    (tab,) = window.open_paths([make_state_dict(str(tmp_path / "model.pth"))])
    wait_settled(qtbot, tab)
    assert tab.state == "error" and tab.error_label.text() == tab.error_text
    words = {"FileChangedError": "changed on disk", "CheckpointFormatError": "truncated zip",
             "OSError": "Input/output error", "RuntimeError": "reader bug"}[type(error).__name__]
    assert words in tab.error_text and "Traceback" not in tab.error_text
    monkeypatch.undo()
    tab.findChild(QPushButton, "reloadButton").click()  # the error page offers to try again
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    assert window.isVisible()
    keeps_state(other, "decoder.embed.weight")


# --- big headers, many files -------------------------------------------------------------------------
def _safetensors(path: str, count: int) -> str:
    import torch
    from safetensors.torch import save_file

    save_file({f"layers.{i}.weight": torch.full((2,), float(i)) for i in range(count)}, path)
    return path


def test_a_huge_header_asks_before_opening(qtbot, window, other, tmp_path):
    window.settings.set_header_ask_bytes(2000)
    path = _safetensors(str(tmp_path / "wide.safetensors"), 200)  # a header of about 12 KB
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab)
    assert tab.state == "asking" and tab.checkpoint is None  # nothing was parsed
    text = tab.ask_label.text()
    assert "header" in text and "KiB" in text and "Open it anyway" in text
    keeps_state(other, "decoder.embed.weight")
    tab.open_anyway_button.click()
    wait_settled(qtbot, tab)
    assert tab.state == "ready" and tab.top.tensors == 200
    small = open_ready(qtbot, window, _safetensors(str(tmp_path / "small.safetensors"), 3))  # below: no question
    assert small.top.tensors == 3
    window.settings.set_header_ask_bytes(None)
    assert window.settings.header_ask_bytes() is None


def test_150_files_build_one_tab_per_event_loop_turn(qtbot, window, tmp_path, monkeypatch):
    import torch

    paths = []
    for i in range(150):
        path = str(tmp_path / f"ckpt_{i:03d}.pt")
        torch.save({"step": torch.tensor(i), f"layer{i}.weight": torch.zeros(2, 2)}, path)
        paths.append(path)
    ticks = [0]
    ticker = QTimer(window, interval=0)
    ticker.timeout.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
    built_at: list[int] = []
    original = CheckpointTab.finish_open

    def counting(self):
        if self.build_pending:
            built_at.append(ticks[0])
        original(self)

    monkeypatch.setattr(CheckpointTab, "finish_open", counting)
    ticker.start()
    tabs = window.open_paths(paths)
    qtbot.waitUntil(lambda: all(t.state != "loading" for t in tabs), timeout=120_000)
    ticker.stop()
    assert [t.state for t in tabs] == ["ready"] * 150
    assert len(built_at) == 150
    per_turn = {tick: built_at.count(tick) for tick in set(built_at)}
    # The event loop ran between builds: never more than the current tab and one queued tab per turn.
    assert max(per_turn.values()) <= 2, sorted(per_turn.values())[-5:]
    assert window.tabs.count() == 150 and not window.progress.isVisibleTo(window)
    assert tabs[-1].summary.facts["Tensors"] == "2"
    first = tabs[0]
    window.tabs.setCurrentWidget(first)
    assert first.select_name("layer0.weight")


def test_closing_a_tab_waiting_for_its_build_releases_its_file(qtbot, window, tmp_path, monkeypatch):
    from ckptview.gui.app.main_window import MainWindow

    monkeypatch.setattr(MainWindow, "_build_next", lambda self: None)  # the queue never gets its turn
    a = make_state_dict(str(tmp_path / "a.pth"))
    b = make_state_dict(str(tmp_path / "b.pth"))
    tab_a, tab_b = window.open_paths([a, b])  # b is current: a opens in the background and waits
    qtbot.waitUntil(lambda: tab_a.build_pending, timeout=20_000)
    assert tab_a.state == "loading"
    closed = []
    tab_a.opener.pending.checkpoint.close = lambda: closed.append(True)
    window.close_tab(window.tabs.indexOf(tab_a))
    assert closed == [True]
    wait_settled(qtbot, tab_b)
    assert tab_b.state == "ready" and window.tabs.count() == 1


def test_banner_frames_are_named(qtbot, window, other):
    # The changed bar and the safety banner are distinct frames: tests and styles find them by name.
    assert other.findChild(QFrame, "changedBar") is other.changed_bar
    assert isinstance(other.findChild(QLabel, "changedLabel"), QLabel)


def test_a_stuck_background_read_does_not_keep_the_process_alive(tmp_path):
    """After the window closes, a worker blocked forever (a read on a FIFO, a dead mount) is left behind."""
    script = textwrap.dedent("""
        import os, threading
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        from ckptview.cli import window_args
        from ckptview.gui.app import launch as app
        from ckptview.gui.base.workers import GeneratorWorker
        qapp = app.application()
        reading = threading.Event()

        def stuck():
            reading.set()
            threading.Event().wait()  # never returns

        GeneratorWorker(stuck).start()
        assert reading.wait(60)  # blocked in its read (not still queued: a job asked to stop before it starts does not)
        print("closing", flush=True)
        raise SystemExit(app.finish(3, timeout_ms=300))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=str(tmp_path), check=False)
    assert result.returncode == 3, result.stderr
    assert "closing" in result.stdout and "did not finish" in result.stderr


def test_closing_a_tab_frees_its_tree_and_keeps_the_other_tabs_frozen(qtbot, window, tmp_path) -> None:
    import gc
    import weakref

    from PySide6.QtCore import QCoreApplication, QEvent

    from tests.support.guihelpers import make_state_dict

    first = make_state_dict(str(tmp_path / "a.pth"))
    second = make_state_dict(str(tmp_path / "b.pth"))
    tab_a, tab_b = window.open_paths([first, second])
    wait_settled(qtbot, tab_a)
    wait_settled(qtbot, tab_b)
    qtbot.waitUntil(lambda: not any(t.build_pending for t in window.checkpoint_tabs()), timeout=10_000)
    gone = weakref.ref(tab_a.checkpoint.tensors()[0].info)  # a tensor of the tab that will close
    kept = tab_b.checkpoint.tensors()[0].info
    assert gc.get_freeze_count() > 0  # opened trees are kept out of the collector
    window.close_tab(window.tabs.indexOf(tab_a))
    del tab_a

    def deleted() -> bool:
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)  # deleteLater runs here
        return gone() is None

    qtbot.waitUntil(deleted, timeout=5000)  # the closed tab's tree is freed...
    assert gc.get_freeze_count() > 0 and gc.is_tracked(kept)  # ...and the other tab's is frozen again
    assert tab_b.state == "ready" and tab_b.model.rowCount() > 0


def test_a_closed_tab_is_released_a_slice_per_turn_and_collected_once(qtbot, window, tmp_path, monkeypatch) -> None:
    """Closing a big tab cuts its trees a slice at a time (the window keeps turning), then one collection:
    a collector pass over a 900,000-tensor tree stopped the window for seconds."""
    import weakref

    import torch
    from PySide6.QtCore import QCoreApplication, QEvent

    from ckptview.gui.base import gc_guard
    from tests.support.guihelpers import make_state_dict

    big = tmp_path / "big.pt"
    torch.save({f"layers.{i}.block.{i % 7}.weight": torch.zeros(2) for i in range(3000)}, big)
    other = make_state_dict(str(tmp_path / "other.pth"))
    tab, kept_tab = window.open_paths([str(big), other])
    for t in (tab, kept_tab):
        wait_settled(qtbot, t)
    qtbot.waitUntil(lambda: not any(t.build_pending for t in window.checkpoint_tabs()), timeout=10_000)
    window.tabs.setCurrentWidget(tab)
    tab.filter_edit.setText("block")  # builds the filter's list of rows, which is released too
    qtbot.waitUntil(lambda: window.current_tab().model.flat_rows_if_built() is not None, timeout=10_000)
    monkeypatch.setattr(gc_guard, "RELEASE_SLICE", 500)
    slices, collections = [], []
    real_release, real_collect = gc_guard._release_then_collect, gc_guard._collect_and_refreeze
    monkeypatch.setattr(gc_guard, "_release_then_collect", lambda stack, in_use: (slices.append(len(stack)),
                                                                                   real_release(stack, in_use)))
    monkeypatch.setattr(gc_guard, "_collect_and_refreeze", lambda: (collections.append(1), real_collect()))
    gone = weakref.ref(tab.checkpoint.tensors()[-1].info)
    window.close_tab(window.tabs.indexOf(tab))
    del tab

    def done() -> bool:
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        return bool(collections) and gone() is None

    qtbot.waitUntil(done, timeout=20_000)
    assert len(slices) > 10  # many turns of the event loop, a slice each
    assert collections == [1]
    assert kept_tab.state == "ready" and kept_tab.model.rowCount() > 0
    assert kept_tab.checkpoint.tensors() and kept_tab.checkpoint.root.children

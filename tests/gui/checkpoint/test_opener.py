"""`TabOpener` on its own: it opens a file in a worker and says what happened through its signals; a
result nobody waits for any more is released, never handed over."""

from __future__ import annotations

import os
import threading

import pytest
import torch
from PySide6.QtCore import QObject

from ckptview.core.jobs import Progress
from ckptview.gui.base.workers import wait_for_workers
from ckptview.gui.checkpoint import opener as tab_opener
from ckptview.gui.checkpoint.opener import TabOpener
from tests.support.guihelpers import make_state_dict


@pytest.fixture
def owner(qtbot):
    parent = QObject()
    yield parent
    wait_for_workers(30_000)


def test_opened_hands_over_the_result_once(qtbot, owner, tmp_path):
    path = make_state_dict(str(tmp_path / "model.pth"))
    opener = TabOpener(path, owner)
    with qtbot.waitSignal(opener.opened, timeout=20_000):
        opener.start(None)
        assert opener.busy and opener.worker is not None
    assert opener.worker is None and opener.busy  # the result waits to be taken
    opened = opener.take()
    assert opened is not None and opener.take() is None and not opener.busy
    names = {t.name for t in opened.checkpoint.tensors()}
    assert names == set(torch.load(path, weights_only=True))
    opened.release()


def test_a_special_file_fails_at_once(qtbot, owner, tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("POSIX special files")
    fifo = str(tmp_path / "pipe.pth")
    os.mkfifo(fifo)
    opener = TabOpener(fifo, owner)
    failures: list[str] = []
    opener.failed.connect(failures.append)
    opener.start(None)  # no worker: a FIFO would block it
    assert len(failures) == 1 and "FIFO" in failures[0] and "not a regular file" in failures[0]
    assert not opener.busy


@pytest.mark.parametrize(("content", "words"), [(b"hello, world\n" * 40, "not a checkpoint"),
                                                 (b"PK\x03\x04 truncated", "zip")])
def test_an_unreadable_file_fails_with_one_line(qtbot, owner, tmp_path, content, words):
    path = tmp_path / "bad.pth"
    path.write_bytes(content)
    opener = TabOpener(str(path), owner)
    with qtbot.waitSignal(opener.failed, timeout=20_000) as blocker:
        opener.start(None)
    (text,) = blocker.args
    assert words in text.lower() and "\n" not in text and "Traceback" not in text
    assert not opener.busy and opener.pending is None


def test_a_reader_bug_is_one_line_for_a_person(qtbot, owner, tmp_path, monkeypatch):
    def broken(path, header_limit=None):
        raise ZeroDivisionError("reader bug")

    monkeypatch.setattr(tab_opener, "open_and_prepare", broken)
    opener = TabOpener(make_state_dict(str(tmp_path / "model.pth")), owner)
    with qtbot.waitSignal(opener.failed, timeout=20_000) as blocker:
        opener.start(None)
    assert blocker.args == ["internal error: ZeroDivisionError: reader bug"]


def test_a_huge_header_asks_and_reports_progress_when_read(qtbot, owner, tmp_path, monkeypatch):
    from safetensors.torch import save_file

    import ckptview.core.session.opening as opening

    monkeypatch.setattr(opening, "PROGRESS_INTERVAL", 0.0)
    path = str(tmp_path / "wide.safetensors")
    save_file({f"layers.{i}.weight": torch.zeros(2) for i in range(200)}, path)
    opener = TabOpener(path, owner)
    with qtbot.waitSignal(opener.asks, timeout=20_000) as blocker:
        opener.start(2000)
    (size,) = blocker.args
    assert size > 2000 and not opener.busy
    steps: list[Progress] = []
    opener.progress.connect(steps.append)
    with qtbot.waitSignal(opener.opened, timeout=20_000):
        opener.start(None)  # the user said yes
    assert steps and all(isinstance(s, Progress) for s in steps)
    opened = opener.take()
    assert opened is not None and opened.top.tensors == 200
    opened.release()


def test_abandoned_results_are_released_never_handed_over(qtbot, owner, tmp_path, monkeypatch):
    real = tab_opener.open_and_prepare
    inside, go_on = threading.Event(), threading.Event()
    closed: list[object] = []

    def held(path, header_limit=None):
        opened = real(path, header_limit)
        inside.set()  # the file is open: a cancel from now on cannot keep the reader from returning it
        go_on.wait(60)  # far from any normal wait: the test sets it as soon as it has abandoned
        real_close = opened.checkpoint.close
        opened.checkpoint.close = lambda: (closed.append(opened), real_close())
        return opened

    monkeypatch.setattr(tab_opener, "open_and_prepare", held)
    opener = TabOpener(make_state_dict(str(tmp_path / "model.pth")), owner)
    handed: list[bool] = []
    opener.opened.connect(lambda: handed.append(True))
    opener.failed.connect(lambda text: handed.append(False))
    opener.start(None)
    assert inside.wait(60)  # (a job cancelled before it starts never runs: nothing to release)
    opener.abandon()  # Cancel, a reload or the tab closing
    assert not opener.busy
    go_on.set()
    assert wait_for_workers(30_000)
    qtbot.waitUntil(lambda: len(closed) == 1, timeout=10_000)  # the late result let its file go
    assert handed == [] and opener.pending is None

    # A result that waits for its page is released as well when nobody takes it.
    monkeypatch.setattr(tab_opener, "open_and_prepare", real)
    with qtbot.waitSignal(opener.opened, timeout=20_000):
        opener.start(None)
    pending = opener.pending
    assert pending is not None
    released: list[bool] = []
    real_release = pending.release
    pending.release = lambda: (released.append(True), real_release())  # type: ignore[method-assign]
    opener.close()
    assert released == [True] and opener.pending is None
    opener.accept(pending)  # a result queued before the close: released again, not shown
    assert released == [True, True] and opener.pending is None and handed == [True]

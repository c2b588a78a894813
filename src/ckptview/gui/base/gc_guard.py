"""Collect garbage on the GUI thread only.

Python's cyclic collector runs in whichever thread happens to allocate when a threshold is crossed.
With worker threads that is often a worker, and a cycle holding Qt objects (closed tabs, plots) then
gets finalised off the GUI thread: a crash in PySide6. The usual cure for threaded Qt applications:
switch automatic collection off and collect generation by generation from a GUI-thread timer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer

from ckptview.core import gc_policy
from ckptview.core.checkpoint import Checkpoint

_guard: GuiThreadCollector | None = None
# How long a worker's `paused_gc` may hold collections off: an open blocked on a dead mount must not
# switch the collector off for good (opening 900,000 tensors takes seconds, not a minute).
MAX_DEFER_S = 60.0


class GuiThreadCollector(QObject):
    """Runs the generational collector from a timer on the GUI thread."""

    def __init__(self, interval_ms: int = 250) -> None:
        super().__init__()
        self.thresholds = gc_policy.stop_automatic_collection()
        self.paused_since: float | None = None
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.check)
        self.timer.start(interval_ms)

    def check(self) -> None:
        """Collect the generations whose counts crossed their thresholds, as gc itself would."""
        if gc_policy.take_park_request():  # a worker opened a tree: parked here, before any pass walks it
            return
        if gc_policy.gc_paused():  # a worker is building a checkpoint's objects: a pass now would only stall it
            now = time.monotonic()
            self.paused_since = self.paused_since if self.paused_since is not None else now
            if now - self.paused_since < MAX_DEFER_S:
                return
        else:
            self.paused_since = None
        gc_policy.collect_due(self.thresholds)


def install_gc_guard() -> None:
    """Install the collector once per process (from the GUI thread, once a QApplication exists)."""
    global _guard
    app = QCoreApplication.instance()
    if _guard is not None or app is None or QThread.currentThread() is not app.thread():
        return
    _guard = GuiThreadCollector()
    _guard.moveToThread(app.thread())


def collect_when_deleted(widget: QObject, trees: list[Any] | None = None,
                         in_use: Callable[[Checkpoint], bool] = lambda checkpoint: False) -> None:
    """Once `widget` (a closed or reloaded tab's page) is deleted, collect what it left and freeze again.

    Frozen objects are never collected, and `gc.unfreeze` thaws every tab at once: so the thaw waits for
    the deletion (before it, the closed tree is not garbage yet), one pass collects it, and everything
    still alive (the other tabs' trees) goes straight back out of the collector's view.

    `trees`: the tab's trees (its checkpoints, the display rows); a checkpoint still `in_use` (held by a
    lease of the window's workspace: shown by another tab or a comparison) is left alone. Their parent links
    are cut first, a slice per turn of the event loop, so reference counting frees them as it goes and
    the collector's pass no longer walks them: at 900,000 tensors that pass stopped the window for
    seconds.
    """
    held = list(trees or ())
    # Not inside `destroyed`: the tab's Python side is still referenced while Qt deletes it. The next turn
    # of the event loop, it is garbage.
    widget.destroyed.connect(lambda *_: QTimer.singleShot(0, lambda: _release_then_collect(held, in_use)))


RELEASE_SLICE = 20_000  # items released per turn of the event loop (a few milliseconds)


def _release_then_collect(stack: list[Any], in_use: Callable[[Checkpoint], bool]) -> None:
    """Release `stack` a slice at a time (each slice on its own turn of the event loop), then collect.

    A tree (checkpoint nodes, display rows) has its links cut node by node; a list (the filter's rows)
    is emptied from the end; a checkpoint drops its listing caches (their lists go on the stack). What
    no longer has a referrer is freed by reference counting as this goes.
    """
    budget = RELEASE_SLICE
    while stack and budget > 0:
        item = stack.pop()
        if type(item) is list:
            cut = min(len(item), budget)
            del item[len(item) - cut:]
            budget -= cut + 1
            if item:
                stack.append(item)
            continue
        budget -= 1
        if isinstance(item, Checkpoint):
            if not in_use(item):  # another tab or a comparison still shows it (the window's workspace)
                stack.append(item.root)
                stack.extend(item.drop_caches())
            continue
        children = item.children
        if children:
            stack.extend(children)
            item.children = ()
        item.parent = None
    if stack:
        QTimer.singleShot(0, lambda: _release_then_collect(stack, in_use))
        return
    _collect_and_refreeze()


def _collect_and_refreeze() -> None:
    gc_policy.release_parked()

"""Collect garbage on the GUI thread only.

Python's cyclic collector runs in whichever thread happens to allocate when a threshold is crossed.
With worker threads that is often a worker, and a cycle holding Qt objects (closed tabs, plots) then
gets finalised off the GUI thread: a crash in PySide6. The usual cure for threaded Qt applications:
switch automatic collection off and collect generation by generation from a GUI-thread timer.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer

_guard: GuiThreadCollector | None = None


class GuiThreadCollector(QObject):
    """Runs the generational collector from a timer on the GUI thread."""

    def __init__(self, interval_ms: int = 250) -> None:
        super().__init__()
        self.thresholds = gc.get_threshold()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.check)
        self.timer.start(interval_ms)

    def check(self) -> None:
        """Collect the generations whose counts crossed their thresholds, as gc itself would."""
        count0, count1, count2 = gc.get_count()
        t0, t1, t2 = self.thresholds
        if count0 > t0:
            gc.collect(0)
            if count1 > t1:
                gc.collect(1)
                if count2 > t2:
                    gc.collect(2)


def install_gc_guard() -> None:
    """Install the collector once per process (from the GUI thread, once a QApplication exists)."""
    global _guard
    app = QCoreApplication.instance()
    if _guard is not None or app is None or QThread.currentThread() is not app.thread():
        return
    _guard = GuiThreadCollector()
    _guard.moveToThread(app.thread())

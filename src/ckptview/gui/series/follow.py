"""The series tab's Follow switch: keep the timeline up to date while the run writes checkpoints.

A worker runs :func:`ckptview.core.series.watch.watch_run` (cache and executor as the command's);
each time the timeline changed it hands the tab a new :class:`SeriesResult` (never one it still changes),
and the tab shows it as after a read. Checkpoints that were deleted stay, counted as gone.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from PySide6.QtCore import QObject, Signal

from ckptview.core.jobs import CancelToken
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.series.cache import SeriesCache
from ckptview.core.series.live import LiveRun
from ckptview.core.series.model import SeriesProgress
from ckptview.core.series.watch import watch_run
from ckptview.core.text import printable
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.base.wrap import LINE_CHARS, breakable


def follow_job(paths: list[str], stall_threshold: float, explode_factor: float, settle: float,
               remote: RemoteOptions, token: CancelToken) -> Generator[Any, None, None]:
    """Watch the run until cancelled: yields progress, and ("update", result, events, gone count). URLs
    are read with `remote` (the window's)."""
    cache = SeriesCache()
    run = LiveRun(paths, cache=cache, stall_threshold=stall_threshold, explode_factor=explode_factor,
                  remote=remote)
    try:
        for item in watch_run(run, settle=settle, token=token):
            if isinstance(item, SeriesProgress):
                yield item
            else:
                gone = sum(1 for e in run.entries.values() if e.gone and e.ref is not None)
                yield ("update", run.result, item, gone)
    finally:
        cache.close()


class Follow(QObject):
    """Starts and stops following for one series tab (``tab.follow_box`` toggles it)."""

    updated = Signal(object)  # the --watch events of one update

    settle = 1.0  # seconds a file must stay unchanged before it is read

    def __init__(self, tab: Any) -> None:
        super().__init__(tab)
        self.tab = tab
        self.slot = JobSlot(self)  # stops when the tab (this object's parent) goes
        self.slot.yielded.connect(self._on_yielded)
        self.slot.errored.connect(self._on_errored)
        self.gone = 0
        tab.follow_box.toggled.connect(self.set_following)

    def following(self) -> bool:
        """True while a follow worker runs."""
        return self.slot.running

    def set_following(self, on: bool) -> None:
        """Start (after stopping the first read) or stop following."""
        if not on:
            self.slot.cancel()
            self.tab.progress.hide()
            self.tab._update_summary()
            return
        if self.following():
            return
        self.tab.cancel()  # the first read: following reads everything that is still missing
        tab = self.tab
        tab.summary_label.setText(tab.summary_label.text() + " — following…")  # printable (and breakable) already
        self.slot.start(follow_job, tab.paths, tab.stall_threshold, tab.explode_factor, self.settle,
                        tab.workspace.remote)

    def _on_yielded(self, item: Any) -> None:
        tab = self.tab
        if isinstance(item, SeriesProgress):
            tab.progress.show()
            tab.progress.setValue(int(item.fraction * 1000))
            return
        _, result, events, self.gone = item
        tab.progress.hide()
        tab.result = result
        tab.view.finished(result)
        tab.forget_spectra([e["checkpoint"]["path"] for e in events])  # rewritten, gone or new: fitted again
        tab.refresh()
        tab._update_summary("following" + (f", {self.gone} gone" if self.gone else ""))
        self.updated.emit(events)

    def _on_errored(self, exc: BaseException) -> None:
        self.tab.summary_label.setText(breakable(f"error while following: {printable(str(exc) or type(exc).__name__)}",
                                                 LINE_CHARS))
        self.tab.follow_box.setChecked(False)

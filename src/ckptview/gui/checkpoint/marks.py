"""The tree marks the rows that hold NaN or Inf as soon as any figure finds them (Statistics of a whole
model, the filter's figures, a histogram): the tensor and every module row above it.

The checkpoint's Analysis tells of each summary it computes, in the worker that computed it; a NaN or Inf
found there is forwarded to the GUI thread (a queued signal), and, a moment later, a worker walks the rows
(`core.inspect.marks`) and hands the marks to the model. The GUI thread never walks the tree for it.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QTreeView

from ckptview.core.figures.analysis import Analysis
from ckptview.core.inspect.marks import nonfinite_marks
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.checkpoint.tree_model import CheckpointTreeModel

__all__ = ["NonFiniteMarks"]
SETTLE_MS = 150  # a burst of findings (a module's tensors) is walked once


class NonFiniteMarks(QObject):
    """Keeps `model`'s NaN/Inf marks up to date with what `analysis` has found."""

    found = Signal()  # emitted from workers (queued to this object's thread)
    marked = Signal()  # the model shows the latest marks

    def __init__(self, model: CheckpointTreeModel, tree: QTreeView, analysis: Analysis,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model, self.tree, self.analysis = model, tree, analysis
        self.slot = JobSlot(self)
        self.slot.returned.connect(self._on_marks)
        self._timer = QTimer(self, singleShot=True, interval=SETTLE_MS)
        self._timer.timeout.connect(self.refresh)
        self.found.connect(self._timer.start)
        self.analysis.add_listener(self._on_summary)
        if analysis.nonfinite_found:  # figures shared with another view found some before this tab opened
            self._timer.start()

    def _on_summary(self, _info: Any, stats: Any) -> None:  # in a worker thread
        if stats.nan or stats.posinf or stats.neginf:
            self.found.emit()

    def refresh(self) -> None:
        """Walk the rows in a worker and show the marks it finds."""
        self.slot.start(nonfinite_marks, self.model.flat_rows(), self.analysis)

    def _on_marks(self, marks: object) -> None:
        assert isinstance(marks, dict)
        self.model.set_nonfinite(marks)
        self.tree.viewport().update()
        self.marked.emit()

    def stop(self) -> None:
        """The tab reloads or closes: no more news, no walk."""
        self.analysis.remove_listener(self._on_summary)
        self._timer.stop()
        self.slot.cancel()

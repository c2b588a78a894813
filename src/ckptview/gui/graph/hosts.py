"""The Graph view in the tabs of several checkpoints: a comparison's (coloured by the relative change of
each box's tensors) and a run's (by the update ratio, or a figure, at a chosen step).

Each host builds its `GraphPage` when it is first shown (reading a graph costs a worker), gives it the
figures its tab already computed (nothing is read again for them) and forwards selections both ways:
`keys_selected(list[str])` when boxes are selected, `show_keys(names)` for a row selected in the tab.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.figures.analysis import Analysis
from ckptview.core.graph import GraphCache
from ckptview.core.graph.adapter import compared_graph_job, held_graph_job
from ckptview.core.graph.compare import GraphComparison
from ckptview.core.graph.overlay import ABS_MAX, CHANGE, NONFINITE, NORM, UPDATE, pair_figures, step_figures
from ckptview.core.session.workspace import Holdings
from ckptview.core.text import printable
from ckptview.gui.graph.page import GraphPage

if TYPE_CHECKING:  # the tabs import these where they first need them
    from ckptview.core.compare.diff import DiffResult
    from ckptview.core.series.model import SeriesResult

RUN_FIGURES = (UPDATE, NORM, ABS_MAX, NONFINITE)  # what a run gives at a step, the first shown first


class _Host(QWidget):
    keys_selected = Signal(list)

    def __init__(self, parent: QWidget | None = None, graph_cache: GraphCache | None = None) -> None:
        super().__init__(parent)
        self.graph_cache = graph_cache  # where traced graphs are kept: the window's
        self.page: GraphPage | None = None
        self.box = QVBoxLayout(self)
        self.box.setContentsMargins(0, 0, 0, 0)
        self.waiting = QLabel("")
        self.waiting.setWordWrap(True)
        self.box.addWidget(self.waiting)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        """The graph is read when first shown."""
        super().showEvent(event)
        self.build()

    def build(self) -> GraphPage | None:
        """Build the Graph view and start reading the graph (once its source is known); returns it."""
        if self.page is None:
            page = self._make()
            if page is None:
                return None
            self.waiting.hide()
            self.page = page
            page.keys_selected.connect(self.keys_selected)
            self.box.addWidget(page, 1)
            page.start()
            self.refresh()
        return self.page

    def _make(self) -> GraphPage | None:
        raise NotImplementedError

    def refresh(self) -> None:
        """Give the view the tab's figures as they are now."""

    def show_keys(self, names: list[str]) -> None:
        """A row selected in the tab: show the node that reads it."""
        if self.page is not None and self.isVisible():
            self.page.show_keys(names)

    def stop(self) -> None:
        """Stop the view's jobs (the tab is closing)."""
        if self.page is not None:
            self.page.stop()


class CompareGraph(_Host):
    """The two checkpoints' graphs merged (A's nodes, then those only B has), coloured by each box's relative
    change ||B - A|| / ||A||, with the nodes added, removed and changed in shape outlined."""

    def __init__(self, source: Callable[[], tuple[Checkpoint, Analysis, Checkpoint] | None],
                 result: Callable[[], DiffResult | None], parent: QWidget | None = None,
                 graph_cache: GraphCache | None = None) -> None:
        super().__init__(parent, graph_cache)
        self.source, self.result = source, result
        self.finished = False
        self.found: dict[str, GraphComparison] = {}  # the merged graph's comparison, once read
        self.waiting.setText("The graphs are drawn once both files are open.")

    def _make(self) -> GraphPage | None:
        found = self.source()
        if found is None:
            return None
        checkpoint, analysis, other = found
        page = GraphPage(checkpoint, analysis, compared_graph_job(other, self.found, self.graph_cache),
                         graph_cache=self.graph_cache)
        page.graph_ready.connect(lambda: page.set_comparison(self.found.get("comparison")))
        return page

    def set_finished(self, finished: bool) -> None:
        """The comparison is done (its relative changes are final) or started again."""
        self.finished = finished
        self.refresh()

    def refresh(self) -> None:
        """Offer the relative change once the comparison has its figures."""
        result = self.result()
        if self.page is not None and result is not None and self.finished:
            self.page.set_given_figures(CHANGE, pair_figures(result.tensors))


class RunGraph(_Host):
    """The graph of a run's checkpoint, coloured by a figure of the run at the step chosen above it."""

    def __init__(self, holdings: Holdings, result: Callable[[], SeriesResult | None],
                 parent: QWidget | None = None, graph_cache: GraphCache | None = None) -> None:
        super().__init__(parent, graph_cache)
        self.holdings, self.result = holdings, result
        self.waiting.setText("The graph is drawn once the run's checkpoints are found.")
        row = QHBoxLayout()
        self.step_label = QLabel("Colours at")
        self.step_box = QComboBox()
        self.step_box.setObjectName("graphStep")
        self.step_box.setToolTip("The checkpoint whose figures colour the graph (the update ratio: its change "
                                 "from the checkpoint before)")
        self.step_box.currentIndexChanged.connect(lambda _i: self._give())
        row.addWidget(self.step_label)
        row.addWidget(self.step_box)
        row.addStretch(1)
        self.box.insertLayout(0, row)
        self.graph_of = ""  # the path of the checkpoint whose graph is drawn
        self.offered = False  # the run's figures were given to the view (the first one shown)

    def _make(self) -> GraphPage | None:
        result = self.result()
        if result is None or not result.checkpoints:
            return None
        ref = result.checkpoints[-1]
        self.graph_of = ref.path
        return GraphPage(None, None, held_graph_job(self.holdings, ref.path, self.graph_cache), name=ref.file_name)

    def step(self) -> int:
        """The chosen checkpoint's index in the run (-1: none yet)."""
        value = self.step_box.currentData()
        return value if isinstance(value, int) else -1

    def set_step(self, t: int) -> None:
        """Colour by the figures at checkpoint `t`."""
        index = self.step_box.findData(t)
        if index >= 0:
            self.step_box.setCurrentIndex(index)

    def refresh(self) -> None:
        """The checkpoints read so far are the steps offered; the last one is followed while it is chosen."""
        result = self.result()
        if result is None:
            return
        chosen, count = self.step(), self.step_box.count()
        follow = chosen < 0 or self.step_box.currentIndex() == count - 1
        if count != result.done:
            self.step_box.blockSignals(True)
            try:
                self.step_box.clear()
                for t in range(result.done):
                    self.step_box.addItem(printable(result.label(t)), t)
                target = result.done - 1 if follow else chosen
                self.step_box.setCurrentIndex(max(0, self.step_box.findData(target)))
            finally:
                self.step_box.blockSignals(False)
        self._give()

    def _give(self) -> None:
        result, t = self.result(), self.step()
        if self.page is None or result is None or t < 0:
            return
        known = step_figures(result.tensors, t)
        first = not self.offered
        self.offered = True
        for figure in RUN_FIGURES:
            self.page.set_given_figures(figure, known, show=first and figure is RUN_FIGURES[0])

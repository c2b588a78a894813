"""The comparison tab: summary, a sortable filterable table, relative change per tensor, overlaid histograms.

Ways in (the window's `open_diff` and its table `gui/app/main_window.py`): ``ckptview --diff A B``, Tools > Compare
With… (the current tab against a file) and Tools > Compare Two Open Tabs…. The view holds both files
through the window's workspace (:mod:`ckptview.core.session.workspace`): a file open in a tab and unchanged
is not opened again, and closing that tab leaves the comparison's hold. A tensor's statistics come from its
checkpoint's Analysis, shared with the tab. All reading and arithmetic runs in workers
(``ckptview.core.compare.diff``).
"""

from __future__ import annotations

import html
import math
import os
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QSplitter,
    QStackedWidget,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.checkpoint import Checkpoint, TensorInfo
from ckptview.core.compare.diff import DiffProgress, diff_chunks, plan_diff
from ckptview.core.compare.gguf_view import side_views
from ckptview.core.figures.analysis import Analysis
from ckptview.core.figures.histogram import iter_exact_histogram, iter_tensor_histogram
from ckptview.core.gc_policy import keep_out_of_collections
from ckptview.core.graph import GraphCache
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.session.workspace import Lease, Workspace
from ckptview.core.sweep.pairs import compare_placed
from ckptview.core.sweep.runner import LOCAL, Placement
from ckptview.core.text import printable, shown
from ckptview.core.units import MISSING, figure, percent, plural
from ckptview.gui.base.elide import ElidedLabel
from ckptview.gui.base.job_header import job_header
from ckptview.gui.base.log_axis import log_tick_axis
from ckptview.gui.base.palette import color
from ckptview.gui.base.plots import legend_html, plot_widget
from ckptview.gui.base.tables import keep_rows_visible
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.base.wrap import name_html
from ckptview.gui.compare.values import ValueChanges
from ckptview.gui.graph import CompareGraph

if TYPE_CHECKING:  # imported where a plot or values are first needed, not at start-up
    import numpy as np

    from ckptview.core.compare.diff import DiffResult, TensorDiff
    from ckptview.core.figures.analysis import Analysis
    from ckptview.core.figures.histogram import Histogram

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
STATUSES = ("identical", "changed", "dtype_mismatch", "shape_mismatch", "only_a", "only_b", "error", "pending")
# What a person reads for each status (the ids stay in `diff --json` and the code).
STATUS_WORDS = {"identical": "identical", "changed": "changed", "dtype_mismatch": "dtype differs",
                "shape_mismatch": "shape differs", "only_a": "only in A", "only_b": "only in B",
                "error": "unreadable", "pending": "not compared yet"}


def status_color(status: str) -> QColor:
    """The background of a status (a row's cell, the summary's count) in the palette in use."""
    return color(f"status_{status}" if status in STATUSES else "base")
# Column key, header.
COLUMNS = (
    ("order", "#"), ("name", "Name"), ("status", "Status"), ("rel_l2", "Rel. change"),
    ("max_abs_diff", "Max |B−A|"), ("mean_abs_diff", "Mean |B−A|"), ("cosine", "Cosine"),
    ("frac_changed", "Changed"), ("shape_a", "Shape A"), ("shape_b", "Shape B"), ("dtype_a", "Dtype A"),
    ("dtype_b", "Dtype B"), ("section", "Section"),
)
COLUMN = {key: i for i, (key, _) in enumerate(COLUMNS)}
HIST_BINS = 100


def _shape(s: list[int] | None) -> str:
    return "" if s is None else " × ".join(map(str, s)) or "scalar"


class DiffTableModel(QAbstractTableModel):
    """One row per aligned tensor of a DiffResult; figures fill in as the worker completes rows.

    `rows` stay in the result's (model) order; the table shows the rows the filter keeps in the order
    of the sorted column (`order`: display row -> index in `rows`). Filtering and sorting are done here,
    in Python, in one pass each: a QSortFilterProxyModel calls back into Python for every row it filters
    and at every comparison it sorts, each call waiting for the interpreter lock while the comparison
    runs in its worker (seconds of a frozen window at 100,000 rows).
    """

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.rows: list[TensorDiff] = []
        self.order: list[int] = []  # display row -> index in `rows`
        self.where: dict[int, int] = {}  # index in `rows` -> display row, for the rows shown
        self.text = ""
        self.status = ""
        self.sort_column, self.sort_order = 0, Qt.SortOrder.AscendingOrder

    def set_result(self, result: DiffResult) -> None:
        """Show the rows of ``result`` (statuses known from metadata, figures pending)."""
        self.beginResetModel()
        self.rows = list(result.tensors)
        self._arrange()
        self.endResetModel()

    def rows_updated(self, first: int, last: int, visible: tuple[int, int] | None = None) -> None:
        """The worker finished rows ``first`` to ``last`` (model order); only the display rows in
        `visible` (first, last) are repainted when it is given."""
        if first > last or not self.order:
            return
        shown = [self.where[i] for i in (first, last) if i in self.where]
        if len(shown) == 2 and shown[1] - shown[0] == last - first:  # in model order: just those rows
            top, bottom = shown
        else:
            top, bottom = 0, len(self.order) - 1
        if visible is not None:
            top, bottom = max(top, visible[0]), min(bottom, visible[1])
        if top <= bottom:
            self.dataChanged.emit(self.index(top, 0), self.index(bottom, len(COLUMNS) - 1))

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Show the rows sorted by `column` (stable: ties keep model order; not comparable below every figure)."""
        if column < 0:
            return
        self.sort_column, self.sort_order = column, order
        self.rearrange()

    def set_filter(self, text: str | None = None, status: str | None = None) -> None:
        """Keep the rows whose name holds `text` and whose status is `status` ("" all, "differences",
        "section:weights" / "section:other", or one status)."""
        if text is not None:
            self.text = text.strip().lower()
        if status is not None:
            self.status = status
        self.rearrange()

    def rearrange(self) -> None:
        """Filter and sort again (figures arrived, or the filter or sort changed), keeping the selection."""
        self.layoutAboutToBeChanged.emit()
        persistent = self.persistentIndexList()
        held = [(self.order[p.row()], p.column()) for p in persistent]
        self._arrange()
        self.changePersistentIndexList(
            persistent, [self.index(self.where[i], c) if i in self.where else QModelIndex() for i, c in held])
        self.layoutChanged.emit()

    def _arrange(self) -> None:
        kept = [i for i, row in enumerate(self.rows) if self._accepts(row)]
        key = COLUMNS[self.sort_column][0]
        descending = self.sort_order == Qt.SortOrder.DescendingOrder
        if key != "order":  # a stable sort, also reversed: ties keep model order
            sort_key, rows = self._sort_key, self.rows
            kept.sort(key=lambda i: sort_key(rows[i], key, i), reverse=descending)
        elif descending:
            kept.reverse()
        self.order = kept
        self.where = {i: display for display, i in enumerate(kept)}

    def _accepts(self, row: TensorDiff) -> bool:
        status = self.status
        if status == "differences" and row.status == "identical":
            return False
        if status.startswith("section:"):
            if row.section != status.removeprefix("section:"):
                return False
        elif status not in ("", "differences") and row.status != status:
            return False
        return not self.text or self.text in row.name.lower() or self.text in (row.label or "").lower()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.order)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section][1]
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        i = self.order[index.row()]
        row = self.rows[i]
        key = COLUMNS[index.column()][0]
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(row, key, i)
        if role == SORT_ROLE:
            return self._sort_key(row, key, i)
        if role == Qt.ItemDataRole.BackgroundRole and key == "status":
            return QBrush(status_color(row.status))
        if role == Qt.ItemDataRole.ForegroundRole and key == "status":
            return QBrush(color("text"))
        if role == Qt.ItemDataRole.ToolTipRole:
            parts = [f"A: {row.name_a or MISSING}", f"B: {row.name_b or MISSING}"]
            if row.tied_to:
                parts.append(f"tied copy: compared with B's twin {row.tied_to}")
            if row.section == "other":
                parts.append("outside the model weights: not in the headline")
            if row.error:
                parts.append(row.error)
            if row.nonfinite_changed:
                parts.append(f"{row.nonfinite_changed} positions differ in NaN/Inf (left out of the figures)")
            return "\n".join(parts)
        if role == Qt.ItemDataRole.TextAlignmentRole and key not in ("name", "status", "dtype_a", "dtype_b"):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    @staticmethod
    def _sort_key(row: TensorDiff, key: str, index: int) -> Any:
        if key == "order":
            return index
        if key in ("status", "dtype_a", "dtype_b", "section"):
            return str(getattr(row, key) or "")
        if key == "name":
            return row.label or row.name
        if key in ("shape_a", "shape_b"):
            shape = getattr(row, key)
            return float(math.prod(shape)) if shape is not None else -1.0
        value = getattr(row, key)
        # Not comparable sorts below every figure, whatever the direction of a descending sort.
        return float(value) if value is not None and not math.isnan(value) else -math.inf

    @staticmethod
    def _display(row: TensorDiff, key: str, index: int) -> str:
        if key == "order":
            return str(index + 1)
        if key == "status":
            return STATUS_WORDS.get(row.status, row.status)
        if key in ("dtype_a", "dtype_b"):
            return str(getattr(row, key) or "")
        if key == "name":  # optimizer state by parameter: "exp_avg of encoder.0.weight"
            return row.label or row.name
        if key == "section":
            return "model weights" if row.section == "weights" else "other"
        if key in ("shape_a", "shape_b"):
            return _shape(getattr(row, key))
        if key == "frac_changed":
            return "" if row.frac_changed is None else percent(row.frac_changed, ".2f")
        return figure(getattr(row, key))


@dataclass(frozen=True)
class DiffPlanned:
    """The comparison's plan (statuses known, figures pending) and its holds on the two checkpoints."""

    result: DiffResult
    leases: tuple[Lease, ...]


def diff_job(path_a: str, path_b: str, strip_a: str | None, strip_b: str | None,
             mapping: Sequence[tuple[str, str]], workspace: Workspace, placement: Placement = LOCAL,
             token: CancelToken | None = None) -> Generator[Any, None, DiffResult]:
    """Take both files from the window's workspace (opened only when not open there already, or changed),
    yield the plan (with the leases), then the comparison's progress; the values are compared where
    `placement` says (Tools > Compute On…: this machine, or a Dask cluster whose workers open both files)."""
    a = workspace.acquire(path_a)
    handed = False
    try:
        b = workspace.acquire(path_b)
        try:
            result = plan_diff(a.checkpoint, b.checkpoint, strip_a, strip_b, mapping,
                               side_views(a.checkpoint, b.checkpoint))
            # Both trees live as long as the tab: out of the collector's view, as an opened tab's tree is
            # (the window thaws and collects them when the tab closes: `trees`).
            keep_out_of_collections()
            handed = True
            yield DiffPlanned(result, (a, b))
        finally:
            if not handed:
                b.release()
    finally:
        if not handed:
            a.release()
    return (yield from _coalesced(compare_placed(result, path_a, path_b, workspace.remote, placement, strip_a,
                                                 strip_b, mapping, token)))


_clock = time.monotonic  # the tests fake it
PROGRESS_INTERVAL = 0.1  # seconds between two progress reports a comparison hands to the window


def _coalesced(steps: Generator[Any, None, DiffResult]) -> Generator[Any, None, DiffResult]:
    """The comparison's progress at most every PROGRESS_INTERVAL (and its last): a diff of 100,000 small
    tensors finishes rows far faster than a window can show them, and each report is a queued signal.
    A report's `index` stands for every row up to it (rows finish in order)."""
    last, held = -PROGRESS_INTERVAL, None
    try:
        while True:
            try:
                item = next(steps)
            except StopIteration as stop:
                if held is not None:
                    yield held
                return stop.value
            now = _clock()
            if now - last >= PROGRESS_INTERVAL:
                last, held = now, None
                yield item
            else:
                held = item
    finally:
        steps.close()


def histogram_job(ia: TensorInfo | None, ib: TensorInfo | None,
                  analyses: tuple[Analysis | None, Analysis | None] = (None, None),
                  token: CancelToken | None = None) -> Generator[Progress, None, dict[str, Histogram | None]]:
    """Histograms of A and B over one common range, and of B − A when the shapes agree.

    The range comes from each side's statistics, asked of its checkpoint's Analysis (`analyses`, A's and
    B's): a tensor whose statistics a tab already has is not read for them again."""
    summaries = {}
    for side, info, analysis in (("a", ia, analyses[0]), ("b", ib, analyses[1])):
        if info is not None:
            summaries[side] = yield from (analysis or Analysis()).summary(info, token)
    lows = [s.stats.min for s in summaries.values() if s.stats.min is not None]
    highs = [s.stats.max for s in summaries.values() if s.stats.max is not None]
    value_range = (float(min(lows)), float(max(highs))) if lows else None
    out: dict[str, Histogram | None] = {"a": None, "b": None, "diff": None}
    for side, info in (("a", ia), ("b", ib)):
        if info is not None:
            out[side] = yield from iter_tensor_histogram(info, HIST_BINS, value_range=value_range,
                                                         summary=summaries[side], token=token)
    if ia is not None and ib is not None and tuple(ia.shape) == tuple(ib.shape):
        out["diff"] = yield from iter_exact_histogram(lambda: diff_chunks(ia, ib), HIST_BINS,
                                                      total=ia.numel, token=token)
    return out


class _Resources:
    """What a view must release when Qt deletes it (a plain object: the widget may already be gone)."""

    def __init__(self) -> None:
        self.leases: tuple[Lease, ...] = ()

    def hold(self, leases: tuple[Lease, ...]) -> None:
        """Hold `leases` from now on (a comparison started again lets go of the previous ones)."""
        old, self.leases = self.leases, leases
        for lease in old:
            lease.release()

    def release(self, *_args: Any) -> None:
        self.hold(())


class CompareTab(QWidget):
    """A comparison of two checkpoint files, computed in a worker with progress and cancel."""

    planned = Signal(object)  # DiffResult with statuses, figures pending
    finished = Signal(object)  # the completed DiffResult
    failed = Signal(str)
    histograms_ready = Signal(object)  # {"a": Histogram|None, "b": ..., "diff": ...}

    def __init__(self, path_a: str, path_b: str, strip_a: str | None = None, strip_b: str | None = None,
                 mapping: Sequence[tuple[str, str]] = (), parent: QWidget | None = None,
                 workspace: Workspace | None = None, graph_cache: GraphCache | None = None,
                 placement: Placement = LOCAL) -> None:
        super().__init__(parent)
        # The window's (a file open in a tab is not opened again); a view outside a window has its own.
        self.workspace = workspace if workspace is not None else Workspace()
        self.placement = placement  # where the values are compared (the window's Tools > Compute On…)
        self.graph_cache = graph_cache  # where the Graph view's traced graphs are kept: the window's
        self.path_a, self.path_b = os.path.abspath(path_a), os.path.abspath(path_b)
        self.strip_a, self.strip_b, self.mapping = strip_a, strip_b, list(mapping)
        self.result: DiffResult | None = None
        self.histograms: dict[str, Histogram | None] = {}
        self._res = _Resources()
        self.destroyed.connect(self._res.release)
        self.job = JobSlot(self)
        self.job.yielded.connect(self._on_yielded)
        self.job.returned.connect(self._on_returned)
        self.job.errored.connect(self._on_errored)
        self.hist_job = JobSlot(self)
        self.hist_job.returned.connect(self._on_histograms)
        self.hist_job.errored.connect(self._on_hist_error)
        self._hist_row: TensorDiff | None = None
        self._comparing = False
        self._from_graph = False  # the graph is selecting a row: do not send it back
        self._build()
        self._plot_timer = QTimer(self, singleShot=True, interval=250)
        self._plot_timer.timeout.connect(self.update_plot)
        # The summary counts every row: redrawn at most this often while rows come in, not per row.
        self._summary_timer = QTimer(self, singleShot=True, interval=100)
        self._summary_timer.timeout.connect(lambda: self.update_summary())
        self._shown_upto = -1  # rows up to this one have their figures on screen

    # --- building --------------------------------------------------------------------------------
    def _build(self) -> None:
        import pyqtgraph as pg
        # The two files, one line each, cut in the middle when long (whole in the tooltip): a long path
        # must not make the window wider than the screen.
        self.header = QWidget()
        paths = QVBoxLayout(self.header)
        paths.setContentsMargins(0, 0, 0, 0)
        paths.setSpacing(0)
        self.path_labels = [ElidedLabel(f"{side}  {printable(path)}") for side, path in (("A", self.path_a),
                                                                                          ("B", self.path_b))]
        for label in self.path_labels:
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            paths.addWidget(label)
        self.summary_label = QLabel("opening…")
        self.summary_label.setObjectName("diffSummary")
        self.summary_label.setWordWrap(True)  # counts, the overall change, buffers: wrapped, never wider
        top, self.progress, self.cancel_button = job_header(self.summary_label, self.cancel)
        self.values = ValueChanges()  # epoch, step, lr, loss, ... that differ: above the tensors

        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter names…")
        self.filter_edit.setClearButtonEnabled(True)
        self.status_combo = QComboBox()
        self.status_combo.addItem("All tensors", "")
        self.status_combo.addItem("Differences only", "differences")
        self.status_combo.addItem("Model weights", "section:weights")
        self.status_combo.addItem("Other entries (optimizer state, inputs, counters)", "section:other")
        for status in ("changed", "dtype_mismatch", "shape_mismatch", "only_a", "only_b", "error", "identical"):
            self.status_combo.addItem(STATUS_WORDS[status], status)
        self.graph_button = QToolButton()
        self.graph_button.setText("Graph")
        self.graph_button.setObjectName("graphButton")
        self.graph_button.setCheckable(True)
        self.graph_button.setToolTip("Show A's graph coloured by the relative change of each part, instead of the plots")
        self.graph_button.toggled.connect(self.show_graph)
        filters = QHBoxLayout()
        filters.addWidget(self.filter_edit, 1)
        filters.addWidget(self.status_combo)
        filters.addWidget(self.graph_button)

        self.model = DiffTableModel(self)
        self.proxy = self.model  # the rows as shown (filtered and sorted by the model itself)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(COLUMN["order"], Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        keep_rows_visible(self.table, 8)  # the table is the comparison; the plots take what is left
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setDefaultSectionSize(96)
        header.setMinimumSectionSize(36)
        self.table.setColumnWidth(0, 44)  # "#": a few digits
        self.table.setColumnWidth(COLUMN["name"], 260)  # names first: "exp_avg_sq of encoder.0.weight"
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # both ends of a long name stay
        self.table.selectionModel().currentRowChanged.connect(self._on_current)
        self.filter_edit.textChanged.connect(lambda text: self.model.set_filter(text=text))
        self.status_combo.currentIndexChanged.connect(
            lambda _i: self.model.set_filter(status=self.status_combo.currentData()))

        self.rel_plot = plot_widget("tensor (model order)", "relative change ‖B−A‖/‖A‖", "relative-change",
                                    bottom_axis=log_tick_axis("bottom", whole_numbers=True))  # tensors are 0, 1, 2
        # Points, not a line: neighbouring tensors are unrelated, a line between them would mean nothing.
        self.rel_curve = self.rel_plot.plot([], [], pen=None, symbol="o", symbolSize=6, symbolPen=None,
                                            symbolBrush=color("plot_accent"))
        self.rel_curve.sigPointsClicked.connect(self._on_points_clicked)
        self.rel_marker = pg.InfiniteLine(angle=90, pen=pg.mkPen(color("plot_marker")))
        self.rel_marker.hide()
        self.rel_plot.addItem(self.rel_marker)
        self.log_y = QCheckBox("log scale")
        self.log_y.toggled.connect(self.update_plot)
        rel_box = QWidget()
        rel_layout = QVBoxLayout(rel_box)
        rel_layout.setContentsMargins(0, 0, 0, 0)
        rel_layout.addWidget(self.rel_plot, 1)
        rel_layout.addWidget(self.log_y)

        self.hist_label = QLabel("Select a row to compare the values of A and B.")
        self.hist_label.setWordWrap(True)
        self.hist_plot = plot_widget("value", "count", "histograms-a-b")
        self.diff_plot = plot_widget("B − A", "count", "histogram-b-minus-a")
        for plot in (self.hist_plot, self.diff_plot):
            plot.hide()  # no empty axes before a row is chosen
        hist_box = QWidget()
        hist_layout = QVBoxLayout(hist_box)
        hist_layout.setContentsMargins(0, 0, 0, 0)
        hist_layout.addWidget(self.hist_label)
        hist_layout.addWidget(self.hist_plot, 1)
        hist_layout.addWidget(self.diff_plot, 1)

        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(rel_box)
        bottom.addWidget(hist_box)
        self.graph = CompareGraph(self._graph_source, lambda: self.result,  # read when first shown
                                  graph_cache=self.graph_cache)
        self.graph.keys_selected.connect(self.select_names)
        self.bottom_stack = QStackedWidget()  # the plots, or the graph
        self.bottom_stack.addWidget(bottom)
        self.bottom_stack.addWidget(self.graph)
        self.plots = bottom
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(self.bottom_stack)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)

        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addLayout(top)
        layout.addWidget(self.values)
        layout.addLayout(filters)
        layout.addWidget(self.splitter, 1)

    # --- the comparison job ----------------------------------------------------------------------
    def start(self) -> None:
        """Open both files and compare them in a worker."""
        self.job.cancel()
        self.graph.set_finished(False)
        self._comparing = True
        self.cancel_button.setEnabled(True)
        self.progress.show()
        self.job.start(diff_job, self.path_a, self.path_b, self.strip_a, self.strip_b, self.mapping,
                       self.workspace, self.placement)

    def cancel(self) -> None:
        """Stop the running comparison; rows already compared keep their figures."""
        if self._comparing:
            self.job.cancel()
            self._done()
            self.update_summary(suffix=" — cancelled")

    @property
    def busy(self) -> bool:
        """True while the comparison runs."""
        return self._comparing

    def _on_yielded(self, item: Any) -> None:
        if isinstance(item, DiffPlanned):
            result = item.result
            self._res.hold(item.leases)
            self.result = result
            self.model.set_result(result)
            self.values.set_values(result.values)
            self._shown_upto = -1
            # Redrawing the plot costs per point: with 100,000 rows, every 2.5 s rather than 4 times a second.
            self._plot_timer.setInterval(max(250, min(2500, len(result.tensors) // 40)))
            self.update_summary()
            self.update_plot()
            if self.bottom_stack.currentWidget() is self.graph:
                self.graph.build()  # A is open now
            self.planned.emit(result)
            return
        if isinstance(item, DiffProgress):
            # Each new percentage repaints the bar at once, and with it whatever else is waiting to be
            # painted; the table is only told about the rows it shows.
            if int(100 * item.fraction) != self.progress.value() // 10:
                self.progress.setValue(int(1000 * item.fraction))
            if item.index >= 0:  # every row up to it is done (reports are coalesced in the worker)
                self.model.rows_updated(self._shown_upto + 1, item.index, self._visible_rows())
                self._shown_upto = item.index
                if not self._summary_timer.isActive():
                    self._summary_timer.start()
                if not self._plot_timer.isActive():
                    self._plot_timer.start()

    def release(self) -> None:
        """Stop the comparison and let go of both files (the window is closing the tab: `Tab`)."""
        self.job.cancel()
        self.hist_job.cancel()
        self.graph.stop()  # its reading (a trace's worker), layout and colours
        self._res.release()

    def trees(self) -> list[Any]:
        """The two checkpoints this view holds, for `gc_guard.collect_when_deleted` (which leaves one that a
        tab still shows)."""
        return [lease.checkpoint for lease in self._res.leases]

    def analyses(self) -> tuple[Analysis | None, Analysis | None]:
        """A's and B's Analysis (None before the plan)."""
        leases = self._res.leases
        return (leases[0].analysis, leases[1].analysis) if len(leases) == 2 else (None, None)

    def _visible_rows(self) -> tuple[int, int]:
        """(first, last) display rows the table shows now."""
        top = self.table.rowAt(0)
        bottom = self.table.rowAt(self.table.viewport().height() - 1)
        return (max(top, 0), bottom if bottom >= 0 else self.model.rowCount() - 1)

    def _on_returned(self, result: DiffResult) -> None:
        self.result = result
        self._summary_timer.stop()
        self.model.rows_updated(self._shown_upto + 1, len(self.model.rows) - 1)
        self._shown_upto = len(self.model.rows) - 1
        self._done()
        self.update_summary()
        self.update_plot()
        self.graph.set_finished(True)
        self.finished.emit(result)

    def _on_errored(self, exc: BaseException) -> None:
        self._done()
        text = str(exc) or type(exc).__name__
        self.summary_label.setText(f"<span style='color:{color('error').name()}'>cannot compare: {text}</span>")
        self.failed.emit(text)

    def _done(self) -> None:
        self._comparing = False
        self.progress.hide()
        self.cancel_button.setEnabled(False)
        self.model.rearrange()  # figures arrived: sort and filter again ("differences" needs the statuses)

    # --- summary and plot ------------------------------------------------------------------------
    def update_summary(self, suffix: str = "") -> None:
        """Counts per status and the overall relative change."""
        if self.result is None:
            return
        al = self.result.alignment
        counts = self.result.summary()
        text_color = color("text").name()
        parts = [f"<span style='background:{status_color(s).name()};color:{text_color}'>&nbsp;{n} "
                 f"{STATUS_WORDS.get(s, s)}&nbsp;</span>"
                 for s, n in sorted(counts.items(), key=lambda kv: _status_rank(kv[0]))]
        overall = self.result.overall_rel_l2()
        text = f"{plural(len(self.result.weights), 'model weight')}: " + " ".join(parts)
        if overall is not None:
            text += (f" &nbsp; overall relative change <b>{figure(overall)}</b> "
                     f"(over the {plural(len(self.result.parameters), 'parameter tensor')})")
        buffers = self.result.buffers
        if buffers:
            differ = sum(1 for t in buffers if t.status != "identical")
            text += (f" &nbsp; {plural(len(buffers), 'buffer')} (running statistics, counters), {differ} differ: "
                     "not in the headline")
        other = self.result.other
        if other:
            differ = sum(1 for t in other if t.status != "identical")
            text += (f" &nbsp; + {len(other)} other entries (optimizer state, inputs, counters), "
                     f"{differ} differ: not in the headline")
        cost = self.result.quantization_cost()
        if cost is not None and cost["rel_error"] is not None:  # a base against its quantized version
            schemes = "; ".join(cost["schemes"][:3]) + ("; …" if len(cost["schemes"]) > 3 else "")
            worst = cost["worst"][0]["name"] if cost["worst"] else ""
            text += (f"<br>What quantization cost ({html.escape(shown(schemes))}): relative error "
                     f"<b>{figure(cost['rel_error'])}</b>, SQNR <b>{figure(cost['sqnr_db'])} dB</b> over "
                     f"{cost['compared']} quantized weights; worst {html.escape(shown(worst))} "
                     f"(the chart and the graph show each weight's relative error)")
        strips = []
        if al.strip_a or al.strip_b:
            strips.append(f"stripped A: <code>{al.strip_a or '(nothing)'}</code>, B: <code>{al.strip_b or '(nothing)'}</code>")
        if al.not_compared_a or al.not_compared_b:
            strips.append(f"not compared (outside the model weights): A {len(al.not_compared_a)}, "
                          f"B {len(al.not_compared_b)}")
        if strips:
            text += "<br>" + "; ".join(strips)
        self.summary_label.setText(text + suffix)

    def rel_series(self) -> tuple[np.ndarray, np.ndarray]:
        """(row index, rel_l2) of every row with a finite relative change, in model order."""
        import numpy as np
        rows = self.model.rows
        # The headline's rows only: a counter going 5 -> 55 (relative change 10) would squash every weight.
        plotted = set(map(id, self.result.parameters)) if self.result is not None else set()
        xs = [i for i, r in enumerate(rows)
              if id(r) in plotted and r.rel_l2 is not None and math.isfinite(r.rel_l2)]
        return np.array(xs, dtype=float), np.array([rows[i].rel_l2 for i in xs], dtype=float)

    def update_plot(self) -> None:
        """Redraw relative change per tensor."""
        x, y = self.rel_series()
        log = self.log_y.isChecked()
        if log:
            keep = y > 0
            x, y = x[keep], y[keep]
        self.rel_plot.setLogMode(x=False, y=log)
        self.rel_curve.setData(x, y, data=x.astype(int))

    def _on_points_clicked(self, _curve: Any, points: Any, *_args: Any) -> None:
        if len(points):
            self.select_row(int(points[0].data()))

    # --- the graph ---------------------------------------------------------------------------------
    def _graph_source(self) -> tuple[Checkpoint, Analysis, Checkpoint] | None:
        leases = self._res.leases
        return (leases[0].checkpoint, leases[0].analysis, leases[1].checkpoint) if len(leases) == 2 else None

    def show_graph(self, on: bool = True) -> CompareGraph:
        """Show A's graph in place of the plots (on), or the plots again; returns the graph's host."""
        if self.graph_button.isChecked() != on:
            self.graph_button.setChecked(on)  # comes back here through `toggled`
            return self.graph
        self.bottom_stack.setCurrentWidget(self.graph if on else self.plots)
        keep_rows_visible(self.table, 3 if on else 8)  # beside the graph, the table keeps a few rows
        height = sum(self.splitter.sizes()) or self.height()
        share = 30 if on else 60
        self.splitter.setSizes([height * share // 100, height - height * share // 100])
        if on:
            self.graph.build()
            row = self.current_row()
            if row is not None and row.name_a is not None:
                self.graph.show_keys([row.name_a])
        return self.graph

    def select_names(self, names: list[str]) -> bool:
        """Select the row of A's tensor named first in `names` that the table has (a box of the graph)."""
        where = {row.name_a: i for i, row in enumerate(self.model.rows) if row.name_a is not None}
        found = next((where[n] for n in names if n in where), None)
        if found is None:
            return False
        self._from_graph = True
        try:
            if self.model.where.get(found) is None:  # filtered out: show every row
                self.filter_edit.clear()
                self.status_combo.setCurrentIndex(0)
            self.select_row(found)
        finally:
            self._from_graph = False
        return True

    # --- selection and histograms ----------------------------------------------------------------
    def select_row(self, source_row: int) -> None:
        """Select the row of source index ``source_row`` (model order)."""
        shown = self.model.where.get(source_row)
        index = self.model.index(shown, 0) if shown is not None else QModelIndex()
        if index.isValid():
            self.table.setCurrentIndex(index)
            self.table.scrollTo(index)

    def current_row(self) -> TensorDiff | None:
        """The selected row's TensorDiff, if any."""
        index = self.table.currentIndex()
        return self.model.rows[self.model.order[index.row()]] if index.isValid() else None

    def _on_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if not current.isValid():
            return
        i = self.model.order[current.row()]
        row = self.model.rows[i]
        self.rel_marker.setValue(i)
        self.rel_marker.show()
        self.hist_label.setText(f"{name_html(row.name)}: computing histograms…")
        self.histograms = {}
        self._hist_row = row
        if not self._from_graph and row.name_a is not None:
            self.graph.show_keys([row.name_a])
        # A newer selection drops this one.
        self.hist_job.start(histogram_job, row.info_a, row.info_b, self.analyses())

    def _on_histograms(self, hists: dict[str, Histogram | None]) -> None:
        import pyqtgraph as pg
        row = self._hist_row
        assert row is not None
        self.histograms = hists
        self.hist_plot.clear()
        self.diff_plot.clear()
        legend = []
        for side, key in (("a", "plot_marker"), ("b", "plot_accent")):
            h = hists.get(side)
            if h is not None:
                pen = color(key)
                self.hist_plot.plot(h.edges, h.counts, stepMode="center", fillLevel=0, pen=pg.mkPen(pen),
                                    brush=pg.mkBrush(pen.red(), pen.green(), pen.blue(), 70))
                legend.append((pen, f"{side.upper()}: {row.name}"))
        d = hists.get("diff")
        if d is not None:
            neutral = color("plot_neutral")
            self.diff_plot.plot(d.edges, d.counts, stepMode="center", fillLevel=0, pen=pg.mkPen(neutral),
                                brush=pg.mkBrush(neutral.red(), neutral.green(), neutral.blue(), 110))
        self.hist_plot.setVisible(bool(legend))
        self.diff_plot.setVisible(d is not None)
        note = "B − A below" if d is not None else "no B − A: the shapes differ or one side is missing"
        self.hist_label.setText(legend_html(legend) + f"<br>over one range; {html.escape(note)}")
        self.histograms_ready.emit(hists)

    def _on_hist_error(self, exc: BaseException) -> None:
        if self._hist_row is not None:
            self.hist_plot.hide()
            self.diff_plot.hide()
            self.hist_label.setText(f"{name_html(self._hist_row.name)}: {html.escape(f'cannot read values: {exc}')}")

    def overlay_counts(self) -> dict[str, np.ndarray | None]:
        """The histogram counts on show (tests read the plots through this)."""
        return {k: (None if h is None else h.counts) for k, h in self.histograms.items()}


def _status_rank(status: str) -> int:
    order = ("changed", "dtype_mismatch", "shape_mismatch", "only_a", "only_b", "error", "pending", "identical")
    return order.index(status) if status in order else len(order)


# --- ways in ---------------------------------------------------------------------------------------
def open_diff(window: Any, path_a: str, path_b: str) -> CompareTab:
    """Open a comparison tab in ``window`` and start it (the ``--diff`` handler)."""
    view = CompareTab(path_a, path_b, workspace=window.workspace, graph_cache=window.graph_cache,
                      placement=window.placement())
    title = f"{os.path.basename(path_a)} ↔ {os.path.basename(path_b)}"
    window.add_tab(view, title, [f"A: {view.path_a}", f"B: {view.path_b}"])
    view.start()
    return view


def compare_with(window: Any, other: str | None = None) -> CompareTab | None:
    """Tools > Compare With…: the current checkpoint tab (A) against a file picked by the user (B)."""
    tab = window.current_tab()
    if tab is None:
        window.statusBar().showMessage("Open a checkpoint first: Compare With… compares the current tab.", 8000)
        return None
    if other is None:
        other, _ = QFileDialog.getOpenFileName(window, f"Compare {printable(os.path.basename(tab.path))} with…",
                                               os.path.dirname(tab.path))
        if not other:
            return None
    return open_diff(window, tab.path, other)


def compare_open_tabs(window: Any) -> CompareTab | None:
    """Tools > Compare Two Open Tabs…: the two tabs when there are two, else pick them in a dialog."""
    tabs = window.checkpoint_tabs()
    if len(tabs) < 2:
        window.statusBar().showMessage("Open two checkpoints to compare them.", 8000)
        return None
    if len(tabs) == 2:
        return open_diff(window, tabs[0].path, tabs[1].path)
    dialog = TabPairDialog([t.path for t in tabs], window)
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return None
    a, b = dialog.paths()
    return open_diff(window, a, b)


class TabPairDialog(QDialog):
    """Pick A and B among the open checkpoint tabs."""

    def __init__(self, paths: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Compare two open checkpoints")
        self.combo_a, self.combo_b = QComboBox(), QComboBox()
        for combo in (self.combo_a, self.combo_b):
            # As wide as 40 characters, not as the longest name (which made the dialog wider than the
            # screen); a name cut there is whole in the list and in the item's tooltip, with its folder.
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(40)
            for path in paths:
                combo.addItem(printable(os.path.basename(path)), path)
                combo.setItemData(combo.count() - 1, printable(path), Qt.ItemDataRole.ToolTipRole)
        self.combo_b.setCurrentIndex(1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("A", self.combo_a)
        form.addRow("B", self.combo_b)
        form.addRow(buttons)

    def paths(self) -> tuple[str, str]:
        """The chosen (A, B)."""
        return self.combo_a.currentData(), self.combo_b.currentData()

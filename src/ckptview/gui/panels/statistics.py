"""The "Statistics" side panel: exact figures of the selected tensors or modules, and their histogram."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.checkpoint import MAX_MODULE_DEPTH, TensorInfo
from ckptview.core.figures.analysis import Analysis, StatsReady, TargetFailed
from ckptview.core.figures.stats import JSON_KEYS
from ckptview.core.inspect.grouping import Selected
from ckptview.core.inspect.modules import split
from ckptview.core.jobs import Progress
from ckptview.core.read.values.repeats import repeats
from ckptview.core.text import shown
from ckptview.core.units import MISSING, number, plural
from ckptview.gui.base.job_bar import JobBar
from ckptview.gui.base.tables import cell_text, keep_rows_visible, set_header_tip
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.checkpoint.host import CheckpointContext
from ckptview.gui.panels.histogram import HistogramView

MAX_COLUMNS = 8  # more selected rows than this: the first ones are shown
MAX_COUNTERS = 6  # counters named on their own line; more are counted
LABELS = {
    "numel": "elements", "mean": "mean", "std": "std (n−1)", "min": "min", "max": "max",
    "abs_max": "abs max", "l2": "L2 norm", "zeros": "zeros", "nan": "NaN", "posinf": "+Inf",
    "neginf": "−Inf",
}

Target = tuple[str, list[TensorInfo]]


def counter_text(name: str, info: TensorInfo, figure: str | None) -> str:
    """One counter on the counters' line: its value when it has one element, else its max."""
    shown = "…" if figure is None else figure
    return f"{name} = {shown}" if info.numel == 1 else f"{name} max {shown}"


def _split(entries: Sequence[Selected]) -> tuple[list[Target], list[tuple[str, TensorInfo]]]:
    out: list[Target] = []
    counters: list[tuple[str, TensorInfo]] = []
    for node in entries[:MAX_COLUMNS]:
        if node.kind == "tensor" and node.tensor is not None:
            out.append((node.name or "(root)", [node.tensor]))
        elif node.children or node.kind == "module":  # a container, or a module-group row
            figures, counts = split(node.walk())
            if figures:
                out.append((f"{node.name or '(root)'} ({plural(len(figures), 'tensor')})", figures))
            counters += counts
    return out[:MAX_COLUMNS], counters


def distinct_labels(labels: list[str]) -> list[str]:
    """Column titles that tell the columns apart: each label's shortest dotted tail that no other label
    ends with (`hidden.weight`, `output.weight`, never `weight` twice); a single label whole."""
    if len(labels) < 2:
        return list(labels)
    out = []
    for label in labels:
        parts = label.split(".")
        others = [other for other in labels if other is not label]
        title = label
        for n in range(1, min(len(parts), MAX_MODULE_DEPTH) + 1):  # a 100,000-dot name: its tail, or whole
            tail = ".".join(parts[-n:])
            if not any(o == tail or o.endswith("." + tail) for o in others):
                title = tail
                break
        out.append(title)
    return out


def format_figure(key: str, value: object, numel: int) -> str:
    """A figure as the panel shows it: thousands separators, 6 significant digits, `MISSING` when absent."""
    if value is not None and key in ("zeros", "nan", "posinf", "neginf") and numel:
        return f"{value:,} ({100 * value / numel:.3g}%)"  # type: ignore[operator]
    return number(value, ".6g")


def repeats_note(targets: Sequence[Target]) -> str:
    """What the figures (and the histogram) of tensors that repeat their storage are of, in one line."""
    found = [(label, info, r) for label, infos in targets for info in infos if (r := repeats(info)) is not None]
    if not found:
        return ""
    label, info, first = found[0]
    how = "each stored value counted as often as it repeats (exact)" if first.exact else "each stored value once"
    more = f" ({len(found) - 1} more tensor(s) repeat their storage)" if len(found) > 1 else ""
    return shown(f"{label}: figures of its {first.stored:,} stored elements, {how}: it {first.describe(info.dtype)}"
                 f"{more}")


class StatsPanel(QWidget):
    """Figures table (one column per selected row) above the histogram of the selected tensors."""

    statsReady = Signal()  # every figure of the current selection is shown
    status: QLabel  # made below the job slot whose handlers write to it

    def __init__(self, context: CheckpointContext | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.analysis = context.analysis if context is not None else Analysis()
        self.targets: list[Target] = []
        self.note = ""  # what the figures are of, when a selected tensor repeats its storage
        self.slot = JobSlot(self)
        self.slot.yielded.connect(self._on_yielded)
        self.slot.returned.connect(self._on_returned)
        self.slot.errored.connect(lambda exc: self.status.setText(f"error: {exc}"))
        self.slot.aborted.connect(self._on_aborted)
        self.job_bar = JobBar(self.slot)  # progress and Cancel: a module's aggregate reads every tensor in it
        self.job_bar.retry.connect(lambda: self.set_selection(self._entries))
        self._entries: Sequence[Selected] = []
        self.table = QTableWidget(len(JSON_KEYS), 0)
        self.table.setVerticalHeaderLabels([LABELS[k] for k in JSON_KEYS])
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        # Columns share the width (one per selected tensor); full names live in the header tooltips.
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.horizontalHeader().setTextElideMode(Qt.TextElideMode.ElideLeft)
        # Stretched columns never scroll sideways: no room kept for a scroll bar (a 640 px screen needs it).
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        keep_rows_visible(self.table, len(JSON_KEYS))  # every figure, +Inf and −Inf included, always in view
        # The whole table to the clipboard (Ctrl+C, or the context menu): tab-separated, with its headers.
        copy = QShortcut(QKeySequence.StandardKey.Copy, self.table)
        copy.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        copy.activated.connect(self.copy_table)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(
            lambda pos: self.table_menu().exec(self.table.viewport().mapToGlobal(pos)))
        self.status = QLabel("Select a tensor or a module to see its statistics.")
        # A module's counters on their own line: their values are no weight's (a step counter at 1,000).
        self.counters = QLabel()
        self.counters.setWordWrap(True)
        self.counters.setToolTip("integer tensors and step counters below the selection: not in the figures")
        self.counters.hide()
        self._counters: list[tuple[str, TensorInfo]] = []  # the ones named (the first MAX_COUNTERS)
        self._counters_left = 0  # and how many more there are
        self._counter_values: dict[int, str] = {}
        self.histogram = HistogramView(analysis=self.analysis)
        splitter = QSplitter(Qt.Orientation.Vertical)
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addWidget(self.table)
        top_layout.addWidget(self.counters)
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.job_bar)
        top_layout.addLayout(status_row)
        splitter.addWidget(top)
        splitter.addWidget(self.histogram)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        splitter.setStretchFactor(0, 0)  # the figures keep their height; the histogram takes what is left
        splitter.setStretchFactor(1, 1)
        splitter.setChildrenCollapsible(False)

    def set_selection(self, entries: Sequence[Selected]) -> None:
        """Show the figures of the selected tensors/modules; cancels the job of the previous selection."""
        self._entries = list(entries)
        self.targets, counters = _split(entries)
        self._counters, self._counters_left = counters[:MAX_COUNTERS], max(0, len(counters) - MAX_COUNTERS)
        self._counter_values = {}
        self.counters.clear()
        self.counters.setVisible(bool(counters))
        self._show_counters()
        self.table.setColumnCount(len(self.targets))
        self.table.setHorizontalHeaderLabels(distinct_labels([label for label, _ in self.targets]))
        for col, (label, _) in enumerate(self.targets):
            set_header_tip(self.table, col, label)
        for col in range(len(self.targets)):
            for row in range(len(JSON_KEYS)):
                self.table.setItem(row, col, QTableWidgetItem("…"))
        singles = [(label, infos[0]) for label, infos in self.targets if len(infos) == 1]
        self.histogram.set_tensors(singles)
        self.note = repeats_note(self.targets)
        if self.targets or self._counters:
            self.status.setText("computing…")
            jobs = [infos for _, infos in self.targets] + [[info] for _, info in self._counters]
            self.slot.start(self.analysis.stats_job, jobs)
        else:
            self.slot.cancel()
            self.status.setText("Select a tensor or a module to see its statistics.")

    def table_text(self) -> str:
        """The table as tab-separated lines: a header line ('figure' and each column's whole label), then
        one line per figure, as shown."""
        lines = ["\t".join(["figure"] + [label for label, _ in self.targets])]
        for row, key in enumerate(JSON_KEYS):
            lines.append("\t".join([LABELS[key]] + [cell_text(self.table, row, col)
                                                     for col in range(self.table.columnCount())]))
        return "\n".join(lines)

    def copy_table(self) -> None:
        """Put the whole table on the clipboard."""
        QGuiApplication.clipboard().setText(self.table_text())

    def table_menu(self) -> QMenu:
        """The table's context menu."""
        menu = QMenu(self)
        action = menu.addAction("Copy table", self.copy_table)
        action.setShortcut(QKeySequence.StandardKey.Copy)
        action.setEnabled(bool(self.targets))
        return menu

    def figures(self, column: int = 0) -> dict[str, str]:
        """The texts shown in one column, by JSON key (tests read the panel through this)."""
        return {key: cell_text(self.table, row, column) for row, key in enumerate(JSON_KEYS)}

    def _show_counters(self) -> None:
        """The counters' line: each named counter with its value as far as computed, then how many more."""
        if not self._counters:
            return
        named = [counter_text(name, info, self._counter_values.get(i))
                 for i, (name, info) in enumerate(self._counters)]
        more = f" and {self._counters_left:,} more" if self._counters_left else ""
        self.counters.setText("counters apart: " + ", ".join(named) + more)

    def _on_returned(self, _results: object) -> None:
        self.status.setText(self.note)
        self.statsReady.emit()

    def _on_aborted(self) -> None:
        self.status.setText("Cancelled: the figures shown '…' were not computed (Compute computes them).")

    def _on_yielded(self, value: object) -> None:
        if isinstance(value, Progress):
            self.status.setText(f"computing… {value.fraction:.0%}")
            return
        index = value.index if isinstance(value, (TargetFailed, StatsReady)) else -1
        if index >= len(self.targets):  # a counter: its value on the counters' line
            figure = value.stats.max if isinstance(value, StatsReady) else None
            self._counter_values[index - len(self.targets)] = format_figure("max", figure, 1)
            self._show_counters()
            return
        if isinstance(value, TargetFailed):
            cells = [QTableWidgetItem(MISSING) for _ in JSON_KEYS]
            for row, cell in enumerate(cells):
                self.table.setItem(row, value.index, cell)
            cells[0].setToolTip(value.message)
            self.status.setText(value.message)
            return
        if not isinstance(value, StatsReady):
            return
        col, stats = value.index, value.stats
        for row, key in enumerate(JSON_KEYS):
            item = QTableWidgetItem(format_figure(key, getattr(stats, key), stats.numel))
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(row, col, item)

"""The "Optimizer" side panel: param groups, per-parameter state against parameter names, state histograms.

Finding and mapping optimizers is metadata only (done when the panel is built). Step counts, norms and
effective step sizes read values: they are computed in a worker the first time the panel is shown, and
the tensor summaries are shared with the Statistics panel's cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.figures.analysis import Analysis
from ckptview.core.inspect.grouping import Selected
from ckptview.core.inspect.hf_order import ParamOrders
from ckptview.core.inspect.optimizer import OptimizerState, ParamState, find_optimizers
from ckptview.core.inspect.optimizer_figures import ParamFigures, iter_figures
from ckptview.core.jobs import Progress
from ckptview.core.units import MISSING, number, plural, shape_text
from ckptview.gui.base.tables import (
    cell_text,
    compact,
    header_text,
    keep_rows_visible,
    rows_height,
    set_header_tip,
)
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.checkpoint.host import CheckpointContext
from ckptview.gui.panels.histogram import HistogramView

if TYPE_CHECKING:  # imported where first needed, not at start-up (numpy)
    from ckptview.core.inspect.optimizer_figures import ParamFigures

GROUP_KEYS_FIRST = ("lr", "betas", "eps", "weight_decay", "momentum", "dampening", "nesterov", "alpha")
EFF_MEDIAN, EFF_MAX = "eff. step median", "eff. step max"
NAME_WIDTH = 150  # pixels of the parameter-name column at most
SHOWN_TITLES = {EFF_MEDIAN: "eff. step", EFF_MAX: "eff. max"}  # row_texts() keeps the full titles


def fmt(value: Any) -> str:
    """A figure in a table cell: ints with separators, floats to 4 significant digits, `MISSING` when absent."""
    if isinstance(value, list):
        return "(" + ", ".join(fmt(v) for v in value) + ")"
    if isinstance(value, dict) and set(value) == {"shape", "dtype"}:
        return f"tensor {value['dtype']} {value['shape']}"
    return number(value)


def _item(text: str, right: bool = False, tip: str | None = None) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    if right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    if tip:
        item.setToolTip(tip)
    return item


class OptimizerPanel(QWidget):
    """Param groups and per-parameter state of the optimizers in a checkpoint."""

    figuresReady = Signal()  # every figure of the shown optimizer is in the table
    status: QLabel  # made below the job slot whose error handler writes to it

    def __init__(self, context: CheckpointContext | None = None, checkpoint: Checkpoint | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.analysis = context.analysis if context is not None else Analysis()
        ckpt = checkpoint if checkpoint is not None else context.checkpoint if context is not None else None
        self.checkpoint = ckpt
        self.optimizers: list[OptimizerState] = find_optimizers(ckpt, self._orders()) if ckpt is not None else []
        self.current: OptimizerState | None = None
        self.figures: dict[int, ParamFigures] = {}
        self.columns: list[str] = []
        self._figures_for: OptimizerState | None = None
        self.slot = JobSlot(self)
        self.slot.yielded.connect(self._on_yielded)
        self.slot.returned.connect(self._on_done)
        self.slot.errored.connect(lambda exc: self._set_status(f"error: {exc}"))

        self.chooser = QComboBox()
        for opt in self.optimizers:
            self.chooser.addItem(f"{opt.label} ({opt.kind}, {len(opt.params)} params)")
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.groups_table = QTableWidget(0, 0)
        self.params_table = QTableWidget(0, 0)
        for table in (self.groups_table, self.params_table):
            table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
            table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
            table.verticalHeader().setVisible(False)
        compact(self.groups_table)
        keep_rows_visible(self.params_table, 6)  # the per-parameter table is what people come for
        self.params_table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # names keep module and leaf
        self.params_table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.params_table.setSortingEnabled(False)  # rows stay in param_groups order: the order means something
        self.state_choice = QComboBox()
        self.state_choice.setToolTip("which state tensor of the selected parameter the histogram shows")
        self.status = QLabel()
        self.histogram = HistogramView(analysis=self.analysis)

        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addWidget(self.chooser)
        top_layout.addWidget(self.summary)
        self.groups_table.setToolTip("param groups: one row per group (the 'group' column of the table below)")
        top_layout.addWidget(self.groups_table)
        top_layout.addWidget(self.status)
        self.status.hide()  # shown while figures are computed or when some failed: a line costs 20 px
        # Which state the histogram shows sits in the histogram's own controls row (no line of its own).
        self.histogram.controls.insertWidget(0, QLabel("histogram of"))
        self.histogram.controls.insertWidget(1, self.state_choice)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(top)
        splitter.addWidget(self.params_table)  # alone: the splitter honours its maximum height
        splitter.addWidget(self.histogram)
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)  # the table grows to its rows (see _fit_param_columns)
        splitter.setStretchFactor(2, 2)
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        if not self.optimizers:
            note = QLabel("No optimizer state in this checkpoint (no {'state': …, 'param_groups': […]} dict).")
            note.setWordWrap(True)
            layout.addWidget(note)
            layout.addStretch(1)
            splitter.hide()
        layout.addWidget(splitter)

        self.chooser.setVisible(len(self.optimizers) > 1)
        self.chooser.currentIndexChanged.connect(self.show_optimizer)
        self.params_table.itemSelectionChanged.connect(self._show_histogram)
        self.params_table.cellDoubleClicked.connect(self._reveal_in_tree)
        self.state_choice.currentIndexChanged.connect(self._show_histogram)
        self.destroyed.connect(self.slot.cancel)
        if self.optimizers:
            self.show_optimizer(0)

    def _orders(self) -> ParamOrders | None:
        return self.context.param_orders if self.context is not None else None

    def parameter_order_arrived(self) -> None:
        """A library's parameter order arrived (`FollowsParameterOrder`): name the parameters again."""
        if self.checkpoint is None or not self.optimizers:
            return
        index = max(0, self.chooser.currentIndex())
        self.optimizers = find_optimizers(self.checkpoint, self._orders())
        self.current = None
        self.show_optimizer(min(index, len(self.optimizers) - 1))

    # -- showing an optimizer ------------------------------------------------------------------------
    def show_optimizer(self, index: int) -> None:
        """Fill the tables for optimizer ``index``; its figures start when the panel is visible."""
        if not 0 <= index < len(self.optimizers):
            return
        if self.chooser.currentIndex() != index:
            self.chooser.setCurrentIndex(index)  # re-enters through the signal
            return
        opt = self.optimizers[index]
        self.current = opt
        self.figures = {}
        self.slot.cancel()
        self._figures_for = None
        self.summary.setText(
            f"<b>{opt.kind}</b> at <code>{opt.label}</code> · mapping <b>{opt.mapping}</b>"
            + (f" to <code>{opt.model.name or '(root)'}</code>" if opt.model is not None else "")
            + f"<br>{opt.note}")
        self._fill_groups(opt)
        self._fill_params(opt)
        keys = sorted({k for p in opt.params for k, _ in p.state_tensors()}, key=self._state_order)
        self.state_choice.blockSignals(True)
        self.state_choice.clear()
        self.state_choice.addItems(keys)
        self.state_choice.blockSignals(False)
        self.histogram.set_tensors([])
        if self.isVisible():
            self.start_figures()

    @staticmethod
    def _state_order(key: str) -> tuple[int, str]:
        known = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "sum")
        return (known.index(key) if key in known else len(known), key)

    def _fill_groups(self, opt: OptimizerState) -> None:
        keys = [k for k in GROUP_KEYS_FIRST if any(k in g for g in opt.groups)]
        keys += sorted({k for g in opt.groups for k in g} - set(keys) - {"num_params"})
        keys.append("num_params")
        table = self.groups_table
        table.clear()
        table.setRowCount(len(opt.groups))
        table.setColumnCount(len(keys) + 1)
        table.setHorizontalHeaderLabels(["group"] + ["params" if k == "num_params" else k for k in keys])
        for r, group in enumerate(opt.groups):
            table.setItem(r, 0, _item(str(r), right=True))
            for c, key in enumerate(keys, start=1):
                table.setItem(r, c, _item(fmt(group.get(key)), right=isinstance(group.get(key), (int, float))))
        table.resizeColumnsToContents()
        # As tall as its rows (a few groups at most): the space goes to the parameter table.
        # As tall as its rows, three at most (more groups scroll): the space goes to the parameter table.
        table.setFixedHeight(rows_height(table, max(1, min(len(opt.groups), 3))))

    def _fill_params(self, opt: OptimizerState) -> None:
        tensor_keys = sorted({k for p in opt.params for k, _ in p.state_tensors()}, key=self._state_order)
        adam = any(p.entry("exp_avg_sq") is not None for p in opt.params)
        # The figures people come for first, beside the name (in view in a 1024 px window's side panel);
        # where the parameter sits (shape, id, group) last.
        self.columns = (["name"] + ([EFF_MEDIAN, EFF_MAX] if adam else []) + ["step"]
                        + [f"‖{k}‖" for k in tensor_keys] + ["shape", "id", "group"])
        table = self.params_table
        table.clear()
        table.setRowCount(len(opt.params))
        table.setColumnCount(len(self.columns))
        # Short titles (the long ones in the tooltips): the figures people come for stay in view at 1024 px.
        table.setHorizontalHeaderLabels([SHOWN_TITLES.get(c, c) for c in self.columns])
        for c, title in enumerate(self.columns):
            if title.startswith("eff."):
                set_header_tip(
                    table, c, f"{title}: lr / (sqrt(v̂) + eps), v̂ = exp_avg_sq / (1 − beta2^step): median and "
                    "max over the elements (median from a systematic sample above 2M elements)")
        for r, p in enumerate(opt.params):
            tip = p.param.name if p.param is not None else None
            if p.guessed and tip is not None:
                tip += "\nguessed: the model file stores names sorted; another tensor has this shape"
            where = {"name": _item(p.display_name or MISSING, tip=tip), "id": _item(str(p.id), right=True),
                     "group": _item(MISSING if p.group is None else str(p.group), right=True),
                     "shape": _item(self._shape(p))}
            for c, title in enumerate(self.columns):
                pending = ("no state" if title == "step" else "") if p.node is None else "…"
                table.setItem(r, c, where.get(title) or _item(pending, right=True))
        self._fit_param_columns()

    def _fit_param_columns(self) -> None:
        """Columns as wide as their contents, the name at most NAME_WIDTH (cut in the middle, whole in its
        tooltip): on a 1024 px screen the figures to its right stay in view."""
        table = self.params_table
        table.resizeColumnsToContents()
        if table.columnWidth(0) > NAME_WIDTH:
            table.setColumnWidth(0, NAME_WIDTH)
        # No taller than its rows: a few parameters leave the height to the histogram.
        table.setMaximumHeight(max(table.minimumHeight(), rows_height(table, table.rowCount())))

    @staticmethod
    def _shape(p: ParamState) -> str:
        if p.param is not None and p.param.tensor is not None:
            return shape_text(p.param.tensor.shape)
        hint = p.shape_hint()
        return shape_text(hint) if hint is not None else MISSING

    def _set_status(self, text: str) -> None:
        """The status line under the table, shown only while it says something."""
        self.status.setText(text)
        self.status.setVisible(bool(text))

    # -- figures (worker) ----------------------------------------------------------------------------
    def start_figures(self) -> None:
        """Compute steps, norms and effective steps of the shown optimizer off the GUI thread."""
        opt = self.current
        if opt is None or self._figures_for is opt:
            return
        self._figures_for = opt
        self._set_status("computing figures…")
        self.slot.start(partial(iter_figures, opt, summary=self.analysis.summary))

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        """Start the figures the first time the panel is actually seen (a 20 GB file pays only then)."""
        super().showEvent(event)
        self.start_figures()

    def _on_yielded(self, value: object) -> None:
        if isinstance(value, Progress):
            self._set_status(f"computing figures… {value.fraction:.0%}")
        elif isinstance(value, ParamFigures):
            self.figures[value.index] = value
            self._fill_figures(value)

    def _fill_figures(self, fig: ParamFigures) -> None:
        table = self.params_table
        row = fig.index
        table.setItem(row, self.columns.index("step"), _item(
            "no state" if self.current and self.current.params[row].node is None else fmt(fig.step), right=True))
        for c, title in enumerate(self.columns):
            if title.startswith("‖"):
                key = title[1:-1]
                text = fmt(fig.norms.get(key)) if key in fig.norms else ""
            elif title == EFF_MEDIAN:
                text = fmt(fig.eff_median) + (" (sampled)" if fig.eff_sampled else "")
            elif title == EFF_MAX:
                text = fmt(fig.eff_max)
            else:
                continue
            table.setItem(row, c, _item(text, right=True, tip=fig.error))

    def _on_done(self, _: object) -> None:
        errors = [f for f in self.figures.values() if f.error]
        self._set_status(f"{plural(len(errors), 'parameter')} could not be read: {errors[0].error}" if errors else "")
        self._fit_param_columns()
        self.figuresReady.emit()

    # -- table reading (tests and copy) --------------------------------------------------------------
    def row_texts(self, row: int) -> dict[str, str]:
        """The texts shown in one parameter row, by column title."""
        return {title: cell_text(self.params_table, row, c) for c, title in enumerate(self.columns)}

    def group_texts(self, row: int) -> dict[str, str]:
        """The texts shown in one param group row, by column title."""
        t = self.groups_table
        return {header_text(t, c): cell_text(t, row, c) for c in range(t.columnCount())}

    # -- histogram and tree --------------------------------------------------------------------------
    def selected_param(self) -> ParamState | None:
        """The parameter of the selected row."""
        rows = self.params_table.selectionModel().selectedRows()
        if self.current is None or not rows:
            return None
        return self.current.params[rows[0].row()]

    def _show_histogram(self) -> None:
        p = self.selected_param()
        key = self.state_choice.currentText()
        node = p.entry(key) if p is not None and key else None
        if p is None or node is None or node.tensor is None:
            self.histogram.set_tensors([])
            return
        label = f"{p.display_name or p.id} {key}"
        self.histogram.set_tensors([(label, node.tensor)])

    def _reveal_in_tree(self, row: int, _column: int) -> None:
        """Double-click: select the state entry (or the parameter) in the checkpoint tree."""
        if self.current is None or self.context is None:
            return
        p = self.current.params[row]
        key = self.state_choice.currentText()
        target = p.entry(key) if key else None
        target = target or p.node or p.param
        if target is not None:
            self.context.select_name(target.name)

    def set_selection(self, entries: Sequence[Selected]) -> None:
        """A tree selection inside an optimizer's state (or of a mapped parameter) selects its row."""
        for node in entries[:32]:  # a select-all must not scan every pair
            chain = set()
            n: Selected | None = node
            while n is not None:
                chain.add(id(n))
                n = n.parent
            for i, opt in enumerate(self.optimizers):
                for r, p in enumerate(opt.params):
                    if (p.node is not None and id(p.node) in chain) or (p.param is not None and node is p.param):
                        if self.current is not opt:
                            self.show_optimizer(i)
                        self.params_table.selectRow(r)
                        return

"""The "Spectrum" side panel: each selected weight's ESD on log-log axes with its fitted power-law tail,
its singular values and figures, above a sortable table of every weight of the selection (alpha, stable
rank, spectral norm, flags). Spectra are computed in a worker and cached in the checkpoint's Analysis."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.figures.analysis import Analysis, SpectrumReady, TargetFailed
from ckptview.core.figures.spectral import matrix_of
from ckptview.core.figures.spectral_fit import power_law_pdf
from ckptview.core.inspect.grouping import Selected
from ckptview.core.jobs import Progress
from ckptview.core.read.values.repeats import repeats
from ckptview.core.text import printable
from ckptview.core.units import MISSING, figure, human_bytes, plural
from ckptview.gui.base.job_bar import JobBar
from ckptview.gui.base.log_axis import log_tick_axis
from ckptview.gui.base.palette import color
from ckptview.gui.base.plots import (
    follow_background,
    make_exportable,
    palette_colors,
    say_drawn,
    say_nothing,
    style_plot,
)
from ckptview.gui.base.tables import cell_text
from ckptview.gui.base.wording import window_text
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.checkpoint.host import CheckpointContext

if TYPE_CHECKING:
    from ckptview.core.figures.spectral import Spectrum

COMPUTING = "computing…"
COLUMNS = ("weight", "matrix", "alpha", "stable rank", "spectral norm", "flags")
MAX_WEIGHTS = 2000  # rows of the table at most (a whole LLM: every Linear of it)
FLAG_TIPS = {
    "alpha_below_2": "alpha < 2: heavy tail, possibly over-fit",
    "alpha_above_6": "alpha > 6: light tail, possibly under-trained",
    "rank_collapse": "numerical rank below the smaller dimension",
    "correlation_trap": "elements large enough to leave the shuffled matrix's bulk (correlation traps)",
}


def weights_of(entries: Sequence[Selected]) -> list[tuple[str, TensorInfo]]:
    """(name, tensor) of every weight matrix in the selection, in tree order, each once."""
    seen: set[int] = set()
    out: list[tuple[str, TensorInfo]] = []
    for entry in entries:
        nodes = [entry] if entry.kind == "tensor" else list(entry.walk())
        for node in nodes:
            info = getattr(node, "tensor", None)
            if node.kind == "tensor" and info is not None and id(info) not in seen and matrix_of(info):
                seen.add(id(info))
                out.append((node.name or "(root)", info))
    return out[:MAX_WEIGHTS]

GRAM = "W<sup>T</sup>W"  # the Gram matrix whose eigenvalues the ESD is, in one form on the axis and legend


class _Number(QTableWidgetItem):
    """A cell that sorts by its number (missing figures last)."""

    def __init__(self, text: str, value: float | None) -> None:
        super().__init__(text)
        self.value = value
        self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __lt__(self, other: QTableWidgetItem) -> bool:
        mine, theirs = self.value, getattr(other, "value", None)
        if mine is None or theirs is None:
            return mine is not None and theirs is None
        return mine < theirs


def figures_text(name: str, s: Spectrum) -> str:
    """The figures of one spectrum, as the panel shows them under the plots."""
    rows, cols = s.shape
    lines = [f"{printable(name)}: {rows:,} x {cols:,}, {s.method}"]
    if s.method == "randomized":
        lines[0] += (f" (top {s.singular_values.size} of {min(rows, cols):,} singular values; each eigenvalue "
                     f"may be low by at most {s.eigenvalue_error:.3g})")
    fit = s.fit
    lines.append(f"alpha {figure(s.alpha, '.3f')}, xmin {figure(fit.xmin if fit else None)}, "
                 f"KS distance {figure(fit.ks_distance if fit else None, '.3f')}, "
                 f"tail {fit.tail_size if fit else 0} eigenvalues")
    rank = MISSING if s.rank is None else f"{s.rank:,} of {min(rows, cols):,}"
    lines.append(f"spectral norm {s.spectral_norm:.6g}, Frobenius norm {s.frobenius_norm:.6g}, stable rank "
                 f"{figure(s.stable_rank)}, numerical rank {rank}")
    lines.append(f"lambda max {s.lambda_max:.6g}, log10 lambda max {figure(s.log_spectral_norm)}, "
                 f"alpha weighted {figure(s.alpha_weighted)}, correlation traps {s.traps}")
    if s.flags:
        lines.append("flags: " + "; ".join(FLAG_TIPS.get(f, f) for f in s.flags))
    return "\n".join(lines)


def esd_curve(s: Spectrum, bins: int = 60) -> tuple[Any, Any, Any, Any]:
    """(bin centres, density) of the ESD on log-spaced bins, and (x, density) of the fitted tail."""
    import numpy as np

    evals = s.eigenvalues
    evals = evals[evals > 0]
    if evals.size < 2 or evals[0] == evals[-1]:
        return np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0)
    edges = np.geomspace(evals[0], evals[-1], bins + 1)
    counts, _ = np.histogram(evals, edges)
    density = counts / (evals.size * np.diff(edges))
    centres = np.sqrt(edges[:-1] * edges[1:])
    keep = counts > 0
    fx = fy = np.zeros(0)
    if s.fit is not None and s.fit.alpha > 1:
        fx = np.geomspace(s.fit.xmin, evals[-1], 50)
        fy = power_law_pdf(s.fit.alpha, s.fit.xmin, fx) * s.fit.tail_size / evals.size
    return centres[keep], density[keep], fx, fy


class SpectrumPanel(QWidget):
    """ESD and singular values of the weight picked in the table; the table lists every selected weight."""

    ready = Signal()  # the shown weight's spectrum is drawn
    tableReady = Signal()  # every row of the table has its figures (or its error)
    status: QLabel

    def __init__(self, context: CheckpointContext | None = None, parent: QWidget | None = None) -> None:
        import pyqtgraph as pg

        super().__init__(parent)
        self.analysis = context.analysis if context is not None else Analysis()
        self.weights: list[tuple[str, TensorInfo]] = []
        self.spectra: dict[int, Spectrum] = {}
        self.errors: dict[int, str] = {}
        self.current = -1  # index into self.weights of the weight drawn
        self._pending: list[int] = []  # indices of the weights the running job computes, in its order
        self._deferred: list[tuple[str, TensorInfo]] | None = None  # a selection made while hidden
        self.slot = JobSlot(self)
        self.slot.yielded.connect(self._on_yielded)
        self.slot.returned.connect(self._on_returned)
        self.slot.errored.connect(lambda exc: self.status.setText(f"error: {window_text(exc)}"))
        self.slot.aborted.connect(self._on_aborted)
        self.job_bar = JobBar(self.slot)  # progress that moves, and Cancel (a large matrix takes minutes)
        self.job_bar.retry.connect(self._compute_rest)
        self.graphics = pg.GraphicsLayoutWidget()
        follow_background(self.graphics)
        make_exportable(self.graphics, "spectrum")
        self.esd_plot = self.graphics.addPlot(axisItems={"left": log_tick_axis("left"),
                                                         "bottom": log_tick_axis("bottom")})
        style_plot(self.esd_plot, f"eigenvalue of {GRAM}", "density", widget=self)
        self.esd_plot.setLogMode(x=True, y=True)
        self.sv_plot = self.graphics.addPlot(axisItems={"left": log_tick_axis("left"),
                                                        "bottom": log_tick_axis("bottom")})
        style_plot(self.sv_plot, "index", "singular value", widget=self)
        self.sv_plot.setLogMode(x=False, y=True)
        self.esd_legend = QLabel("")  # every line of the ESD plot, named beside it (never over the data)
        self.esd_legend.setObjectName("esdLegend")
        self.esd_legend.setTextFormat(Qt.TextFormat.RichText)
        self.esd_legend.setWordWrap(True)
        self.esd_legend.hide()
        self.figures = QLabel("")
        self.figures.setWordWrap(True)
        self.figures.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        # Tree order until the user clicks a header (enabling sorting would sort by column 0 at once).
        self.table.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.table.setSortingEnabled(True)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideLeft)  # the layer's own name is at the end
        self.table.setColumnWidth(0, 220)
        self.table.itemSelectionChanged.connect(self._on_row_picked)
        self.status = QLabel("Select a weight or a module to see its spectrum.")
        self.status.setWordWrap(True)
        # Weights that repeat their storage (stride 0, overlapping strides) are refused unless asked for:
        # the box says how much their spectra would read, first (`values.repeats`).
        self.expand_box = QCheckBox()
        self.expand_box.setObjectName("expandRepeats")
        self.expand_box.setVisible(False)
        self.expand_box.toggled.connect(lambda _on: self.set_weights(self.weights))
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addWidget(self.graphics, 1)
        top_layout.addWidget(self.esd_legend)
        top_layout.addWidget(self.figures)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(top)
        splitter.addWidget(self.table)
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.expand_box)
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.job_bar)
        layout.addLayout(status_row)
        self._clear_plots()

    # -- selection ----------------------------------------------------------------------------------
    def set_selection(self, entries: Sequence[Selected]) -> None:
        """List every weight of the selection and compute their spectra (cached ones at once).

        A spectrum reads a whole matrix and factors it: while the panel sits hidden behind another side
        tab nothing is computed; the latest selection is taken up when the panel is shown."""
        weights = weights_of(entries)
        if self.parent() is not None and not self.isVisible():
            self._deferred = weights
            self.slot.cancel()
            return
        self._deferred = None
        self.set_weights(weights)

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if self._deferred is not None:
            weights, self._deferred = self._deferred, None
            self.set_weights(weights)

    def set_weights(self, weights: list[tuple[str, TensorInfo]]) -> None:
        """Show these (name, tensor) weights; the first one is drawn."""
        self.slot.cancel()
        self.weights = weights
        self.spectra, self.errors = {}, {}
        self.current = 0 if weights else -1
        self.table.setSortingEnabled(False)
        self.table.blockSignals(True)
        self.table.setRowCount(len(weights))
        for row, (name, info) in enumerate(weights):
            self._fill_row(row, row, name, info, None)
        self.table.blockSignals(False)
        self.table.setSortingEnabled(True)
        self._pending = []
        self._offer_expansion(weights)
        if not weights:
            self._clear_plots()
            self.status.setText("Select a weight or a module to see its spectrum (2-D weights and conv kernels).")
            return
        self._clear_plots(COMPUTING)  # a weight is selected: its plots wait for it, they never ask for one
        expand = self.expand_box.isChecked()
        pending = [i for i, (_, info) in enumerate(weights) if self.analysis.cached_spectrum(info, expand) is None]
        for i, (_, info) in enumerate(weights):
            cached = self.analysis.cached_spectrum(info, expand)
            if cached is not None:
                self._accept(i, cached)
        if pending:
            self._compute(pending)
        else:
            self.status.setText(self._summary())
            self.tableReady.emit()

    def _compute(self, indices: list[int]) -> None:
        """Compute the spectra of weights `indices`, in that order (a new job: the one running is dropped)."""
        self.status.setText("computing…")
        job = functools.partial(self.analysis.spectral_job, expand=self.expand_box.isChecked())
        self._pending = list(indices)
        self.slot.start(job, [self.weights[i][1] for i in indices])

    def _compute_rest(self) -> None:
        """Compute every weight not computed yet (Compute, after a Cancel), the one shown first."""
        rest = [i for i in range(len(self.weights)) if i not in self.spectra and i not in self.errors]
        if rest:
            first = [self.current] if self.current in rest else []
            self._compute(first + [i for i in rest if i != self.current])
            if self.current in rest:
                self._clear_plots(COMPUTING)

    def cancel(self) -> None:
        """Stop computing (the Cancel button): what is computed stays; a weight picked again is computed then."""
        self.job_bar.cancel()

    def _offer_expansion(self, weights: list[tuple[str, TensorInfo]]) -> None:
        """The box appears when a weight repeats its storage, with what expanding them would read."""
        found = [r for _, info in weights if (r := repeats(info)) is not None]
        self.expand_box.setVisible(bool(found))
        if found:
            elements = sum(r.elements for r in found)
            nbytes = sum(info.nbytes for _, info in weights if repeats(info) is not None)
            self.expand_box.setText(f"Compute {len(found)} weight(s) that repeat their storage on every element: "
                                    f"{plural(elements, 'element')}, {human_bytes(nbytes)}")

    def show_weight(self, index: int) -> None:
        """Draw weight `index` of the table's list (at once when its spectrum is known)."""
        self.current = index
        if index in self.spectra:
            self._draw(index)
        elif index in self.errors:
            self._clear_plots("Could not read this weight.")
            self.figures.setText(self.errors[index])
        else:
            self._clear_plots(COMPUTING)
            self.figures.setText(COMPUTING)
            if not self.slot.running:  # cancelled before it was computed: picking it computes it (first)
                self._compute_rest()

    # -- table --------------------------------------------------------------------------------------
    def _fill_row(self, row: int, index: int, name: str, info: TensorInfo, s: Spectrum | None) -> None:
        rows, cols = matrix_of(info) or (0, 0)
        label = QTableWidgetItem(printable(name))
        label.setData(Qt.ItemDataRole.UserRole, index)
        label.setToolTip(printable(name))
        cells: list[QTableWidgetItem] = [label, _Number(f"{rows} x {cols}", float(rows * cols))]
        if s is None:
            error = self.errors.get(index)
            cells += [_Number(MISSING if error else "…", None) for _ in range(3)]
            flag = QTableWidgetItem(error or "")
            if error:
                flag.setToolTip(error)
            cells.append(flag)
        else:
            cells += [_Number(figure(s.alpha, ".3f"), s.alpha), _Number(figure(s.stable_rank), s.stable_rank),
                      _Number(f"{s.spectral_norm:.4g}", s.spectral_norm)]
            flag = QTableWidgetItem(("⚠ " + ", ".join(s.flags)) if s.flags else "")
            flag.setToolTip("\n".join(FLAG_TIPS.get(f, f) for f in s.flags))
            cells.append(flag)
            if s.flags:
                for cell in cells:
                    cell.setBackground(QBrush(color("flagged_cell")))
        for col, cell in enumerate(cells):
            self.table.setItem(row, col, cell)

    def _row_of(self, index: int) -> int:
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and item.data(Qt.ItemDataRole.UserRole) == index:
                return row
        return -1

    def _accept(self, index: int, s: Spectrum) -> None:
        self.spectra[index] = s
        row = self._row_of(index)
        if row >= 0:
            sorting = self.table.isSortingEnabled()
            self.table.setSortingEnabled(False)  # the row must not move while its cells are replaced
            name, info = self.weights[index]
            self._fill_row(row, index, name, info, s)
            self.table.setSortingEnabled(sorting)
        if index == self.current:
            self._draw(index)

    def _on_row_picked(self) -> None:
        items = self.table.selectedItems()
        if not items:
            return
        first = self.table.item(items[0].row(), 0)
        index = first.data(Qt.ItemDataRole.UserRole) if first is not None else None
        if isinstance(index, int):
            self.show_weight(index)

    def flagged_rows(self) -> list[str]:
        """Names of the rows marked as flagged, in the table's current order (tests read the panel here)."""
        out = []
        for row in range(self.table.rowCount()):
            flags, name = self.table.item(row, 5), self.table.item(row, 0)
            if flags is not None and name is not None and flags.text().startswith("⚠"):
                out.append(name.text())
        return out

    def column_texts(self, column: int) -> list[str]:
        """The texts of one column, top to bottom."""
        return [cell_text(self.table, row, column) for row in range(self.table.rowCount())]

    # -- job events ---------------------------------------------------------------------------------
    def _on_yielded(self, value: object) -> None:
        if isinstance(value, Progress):
            done = len([i for i in self._pending if i in self.spectra or i in self.errors])
            parts = ([f"weight {done + 1} of {len(self._pending)}"] if len(self._pending) > 1 else []) + \
                ([value.message] if value.message else [])
            self.status.setText(f"computing spectra… {value.fraction:.0%}"
                                + (f" ({', '.join(parts)})" if parts else ""))
        elif isinstance(value, SpectrumReady):
            self._accept(self._pending[value.index], value.spectrum)
        elif isinstance(value, TargetFailed):
            index = self._pending[value.index]
            self.errors[index] = window_text(value.message)
            row = self._row_of(index)
            if row >= 0:
                name, info = self.weights[index]
                sorting = self.table.isSortingEnabled()
                self.table.setSortingEnabled(False)
                self._fill_row(row, index, name, info, None)
                self.table.setSortingEnabled(sorting)
            if index == self.current:
                self.show_weight(index)

    def _on_returned(self, _results: object) -> None:
        self.status.setText(self._summary())
        self.tableReady.emit()

    def _on_aborted(self) -> None:
        left = len([i for i in self._pending if i not in self.spectra and i not in self.errors])
        self.status.setText(f"Cancelled: {self._summary()}; {left} not computed (Compute, or pick one).")
        if self.current >= 0 and self.current not in self.spectra and self.current not in self.errors:
            self._clear_plots("Cancelled: press Compute, or pick the weight again.")
            self.figures.setText("")
        self.table.blockSignals(True)
        self.table.clearSelection()  # so that picking the same row again is a pick (and computes it)
        self.table.blockSignals(False)

    def _summary(self) -> str:
        flagged = sum(1 for s in self.spectra.values() if s.flags)
        failed = f", {len(self.errors)} unreadable" if self.errors else ""
        return f"{len(self.spectra)} weight{'s' if len(self.spectra) != 1 else ''}, {flagged} flagged{failed}"

    # -- plots --------------------------------------------------------------------------------------
    def _clear_plots(self, why: str = "") -> None:
        """Empty both plots; each says `why` (what it waits for) in its middle."""
        self.esd_plot.clear()
        self.sv_plot.clear()
        self.figures.setText("")
        self.esd_legend.hide()
        for plot in (self.esd_plot, self.sv_plot):
            say_nothing(plot, why or "Select a weight or a module.")

    def _draw(self, index: int) -> None:
        import numpy as np
        import pyqtgraph as pg

        s = self.spectra[index]
        name = self.weights[index][0]
        self._clear_plots()
        for plot in (self.esd_plot, self.sv_plot):
            say_drawn(plot)
        fg = palette_colors(self)[1]
        x, y, fx, fy = esd_curve(s)
        legend: list[tuple[str, str]] = []
        if x.size:
            self.esd_plot.plot(x, y, pen=pg.mkPen(fg), symbol="o", symbolSize=4, symbolBrush=fg, name="ESD")
            legend.append((fg.name(), f"ESD (points): density of the eigenvalues of {GRAM}"))
        if fx.size and s.fit is not None:
            fit_color, xmin_color = color("plot_mark").name(), color("plot_accent").name()
            self.esd_plot.plot(fx, fy, pen=pg.mkPen(fit_color, width=2, style=Qt.PenStyle.DashLine),
                               name="power-law fit")
            self.esd_plot.addItem(pg.InfiniteLine(np.log10(s.fit.xmin), angle=90,
                                                  pen=pg.mkPen(xmin_color, style=Qt.PenStyle.DotLine)))
            legend.append((fit_color, f"power-law fit of the tail (dashed), alpha {s.fit.alpha:.2f}"))
            legend.append((xmin_color, f"xmin {s.fit.xmin:.3g} (dotted): where the fitted tail begins"))
        # Each line's colour on a square (a graphical object: 3:1 against the background), the words in the
        # text colour (4.5:1): a line's colour need not be readable as text.
        self.esd_legend.setText(" &nbsp; ".join(f"<span style='color:{hue}'>&#9632;</span>&nbsp;{text}"
                                                for hue, text in legend))
        self.esd_legend.setVisible(bool(legend))
        sv = s.singular_values[s.singular_values > 0]
        if sv.size:
            self.sv_plot.plot(np.arange(1, sv.size + 1), sv, pen=pg.mkPen(fg))
        self.figures.setText(figures_text(name, s))
        self.ready.emit()

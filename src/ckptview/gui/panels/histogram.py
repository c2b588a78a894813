"""Histogram of one or several tensors (pyqtgraph), drawn from the checkpoint's analysis layer.

A sampled preview is drawn first; the exact streamed histogram replaces it when the worker finishes.
Every computation runs on the thread pool through a JobSlot: a new request cancels the old one and a
stale result is dropped, so a slow tensor never overwrites a newer selection.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.figures.analysis import Analysis, PreviewReady
from ckptview.core.figures.histogram import DEFAULT_BINS
from ckptview.core.jobs import Progress
from ckptview.core.read.quant.source import codes_view
from ckptview.gui.base.log_axis import log_tick_axis
from ckptview.gui.base.plots import (
    compact_when_short,
    export_plot,
    follow_background,
    legend_html,
    make_exportable,
    series_color,
    style_plot,
    titles_if_tall,
)
from ckptview.gui.base.workers import JobSlot

if TYPE_CHECKING:  # imported where a plot or values are first needed, not at start-up
    import numpy as np
    import pyqtgraph as pg

    from ckptview.core.figures.histogram import Histogram


PLOT_MIN_HEIGHT = 90  # a histogram shorter than this reads as a line
STACKED_MIN_HEIGHT = 64  # pixels of each plot stacked on its own count axis: two labels of counts
VALUE_AXIS_HEIGHT = 44  # pixels of the value axis under the last stacked plot: its numbers and its title
SEPARATE_RATIO = 10  # peak counts this many times apart: each histogram gets its own count axis


def separate_axes(hists: list[Histogram]) -> bool:
    """True when histograms drawn together would make one a flat line: their peaks differ tenfold or more."""
    peaks = [int(h.counts.max()) if h.counts.size else 0 for h in hists]
    return len(hists) > 1 and max(peaks) >= SEPARATE_RATIO * max(1, min(peaks))


class HistogramView(QWidget):
    """Step histogram of the selected tensors with bin count, log y, log |x|, hover and PNG export."""

    exactReady = Signal()  # the exact histograms of the current request are drawn
    previewReady = Signal()
    status: QLabel  # made below the job slot whose error handler writes to it

    def __init__(self, analysis: Analysis, parent: QWidget | None = None) -> None:
        import pyqtgraph as pg

        super().__init__(parent)
        self.analysis = analysis  # the checkpoint's: figures computed once, shared with the other panels
        self.items: list[tuple[str, TensorInfo]] = []
        self.histograms: list[Histogram | None] = []  # None: that tensor's preview is not in yet
        self._codes_bins: int | None = None  # the codes' histogram is drawn, in this many bins
        self.slot = JobSlot(self)
        self.slot.yielded.connect(self._on_yielded)
        self.slot.returned.connect(self._on_exact)
        self.slot.errored.connect(lambda exc: self.status.setText(f"error: {html.escape(str(exc))}"))
        self.slot.busy.connect(self._on_busy)

        self.bins = QSpinBox(minimum=1, maximum=10_000, value=DEFAULT_BINS)
        self.bins.setPrefix("bins ")
        self.log_y = QCheckBox("log y")
        self.log_x = QCheckBox("log |x|")
        # A quantized weight: its stored codes instead of its values (a 4-bit weight has its 16 levels).
        self.codes = QCheckBox("codes")
        self.codes.setToolTip("Histogram of the quantized weight's stored codes, one bar per level, instead of "
                              "its dequantized values")
        self.codes.setVisible(False)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Save the histogram as a PNG image or an SVG drawing (also in the plot's "
                                      "right-click menu)")
        self.cancel_button = QPushButton("Cancel")
        self.progress = QProgressBar(maximum=1000, textVisible=False)
        self.progress.setMaximumWidth(120)
        # The hover readout sits in the controls row: a line of its own cost the plot 20 px on short screens.
        self.hover = QLabel(" ")
        self.hover.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        controls = self.controls = QHBoxLayout()  # panels put their own choices in front (Optimizer)
        for w in (self.bins, self.log_y, self.log_x, self.codes, self.progress, self.cancel_button,
                  self.export_button):
            controls.addWidget(w)
        controls.addWidget(self.hover, 1)

        # One plot, or one per histogram when their counts differ by orders of magnitude (65,536 and 1,280
        # values on one count axis made the small one a flat line); `plot.plotItem` is the first.
        self.plot = pg.GraphicsLayoutWidget()
        follow_background(self.plot)
        self.export_action = make_exportable(self.plot, "histogram")
        compact_when_short(self.plot)  # a short plot gives its axis titles' lines to the data
        self._items: list[pg.PlotItem] = []
        self._set_plot_count(1)
        self.curves: list[pg.PlotDataItem] = []
        self.status = QLabel()  # the legend (one coloured line per series): preview/exact, NaN/Inf counts
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.RichText)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(controls)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.status)

        self.bins.editingFinished.connect(self._restart)
        self.log_x.toggled.connect(self._restart)
        self.codes.toggled.connect(self._restart)
        self.log_y.toggled.connect(self._apply_log_y)
        self.cancel_button.clicked.connect(self.slot.cancel)
        self.export_button.clicked.connect(self._ask_export)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse)
        self._on_busy(False)

    def _set_plot_count(self, count: int) -> None:
        """Exactly `count` plots stacked (the first one kept), x axes linked: values line up."""
        while len(self._items) > count:
            self.plot.removeItem(self._items.pop())
        while len(self._items) < count:
            item = self.plot.addPlot(row=len(self._items), col=0, axisItems={"left": log_tick_axis("left")})
            style_plot(item, left="count", widget=self)
            if self._items:
                item.setXLink(self._items[0])
            self._items.append(item)
        self.plot.plotItem = self._items[0]
        for i, item in enumerate(self._items):  # the value axis is named once, under the last plot
            item.setLabel("bottom", self._x_label() if i == len(self._items) - 1 else None)
            item.getAxis("bottom").setStyle(showValues=i == len(self._items) - 1)
        # Stacked plots keep two count labels each and no "count" title (the titles of two 40 px plots ran
        # into each other, "countcount"; the legend says each has its own axis); the view grows to hold them.
        # The last plot holds the value axis too (its numbers and title) below its counts.
        for i, item in enumerate(self._items):
            item.setLabel("left", "count" if count == 1 else None)
            below = VALUE_AXIS_HEIGHT if i == count - 1 else 0
            item.setMinimumHeight(STACKED_MIN_HEIGHT + below if count > 1 else 0)
        self.plot.setMinimumHeight(PLOT_MIN_HEIGHT if count == 1 else count * STACKED_MIN_HEIGHT + VALUE_AXIS_HEIGHT + 20)
        titles_if_tall(self.plot)

    def _x_label(self) -> str:
        if self.codes.isChecked() and not self.codes.isHidden():
            return "stored code"
        return "log10 |x|" if self.log_x.isChecked() else "value"

    def plot_items(self) -> list[pg.PlotItem]:
        """The plots shown: one, or one per histogram whose counts differ by orders of magnitude."""
        return list(self._items)

    # -- requests ------------------------------------------------------------------------------------
    def set_tensors(self, items: list[tuple[str, TensorInfo]]) -> None:
        """Show the histograms of ``items`` (name, info); several are overlaid with a legend."""
        self.items = list(items)
        self.codes.setVisible(any(info.quant is not None for _, info in self.items))
        self._restart()

    def _restart(self) -> None:
        self.slot.cancel()
        self.histograms = []
        self._draw([])
        if not self.items:
            self.status.setText("Select a tensor to see its histogram.")
            return
        self.status.setText("computing…")
        infos = [info for _, info in self.items]
        bins = self.bins.value()
        self._codes_bins = None
        if self.codes.isChecked() and not self.codes.isHidden():  # the codes: one bin per level of an integer code
            views = [codes_view(info) for info in infos]
            infos = [view if view is not None else info for view, info in zip(views, infos, strict=True)]
            levels = [1 << int(q.bits) for _, i in self.items if (q := i.quant) is not None and q.scheme != "fp8"
                      and q.bits is not None and q.bits <= 8]
            bins = max(levels) if levels else bins
            self._codes_bins = bins
        self._set_plot_count(1)
        self.slot.start(self.analysis.histogram_job, infos, bins, self.log_x.isChecked())

    # -- results -------------------------------------------------------------------------------------
    def _on_yielded(self, value: object) -> None:
        if isinstance(value, Progress):
            self.progress.setValue(int(value.fraction * 1000))
        elif isinstance(value, PreviewReady):
            i, hist = value.index, value.histogram
            shown = list(self.histograms) + [None] * (len(self.items) - len(self.histograms))
            shown[i] = hist
            self.histograms = shown
            ready = [h for h in shown if h is not None]
            if len(ready) == len(shown):
                self._draw(ready)
                self.previewReady.emit()

    def _on_exact(self, hists: object) -> None:
        assert isinstance(hists, list)
        self.histograms = hists
        self._draw(hists)
        self.exactReady.emit()

    def _on_busy(self, busy: bool) -> None:
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        if not busy:
            self.progress.setValue(0)

    # -- drawing -------------------------------------------------------------------------------------
    def _draw(self, hists: list[Histogram]) -> None:
        import pyqtgraph as pg
        for item in self._items:
            for curve in self.curves:
                if curve in item.listDataItems():
                    item.removeItem(curve)
        self.curves = []
        many = len(hists) > 1
        apart = separate_axes(hists)
        self._set_plot_count(len(hists) if apart else 1)
        legend = []
        for i, (hist, (name, _)) in enumerate(zip(hists, self.items, strict=False)):
            color = series_color(i, len(hists))
            brush = pg.mkBrush(color.red(), color.green(), color.blue(), 60 if many else 120)
            item = self._items[i if apart else 0]
            curve = item.plot(
                hist.edges, hist.counts, stepMode="center", fillLevel=0 if not self.log_y.isChecked() else None,
                brush=brush, pen=pg.mkPen(color),
            )
            self.curves.append(curve)
            kind = "exact" if hist.exact else f"preview from {hist.looked_at:,} sampled values"
            if self._codes_bins:
                kind = f"its stored codes in {self._codes_bins} bins ({kind})"
            extra = f", zeros {hist.zeros:,} (not on a log axis)" if hist.log_x else ""
            legend.append((color, f"{name}: {kind}; NaN {hist.nan:,}, +Inf {hist.posinf:,}, "
                                  f"−Inf {hist.neginf:,}{extra}"))
        for item in self._items:
            item.enableAutoRange()
        self.plot.setVisible(bool(hists))  # no empty 0..1 axes while nothing is drawn
        if hists:
            note = " (each on its own count axis: their counts differ by orders of magnitude)" if apart else ""
            self.status.setText(legend_html(legend) + note)
        self._apply_log_y()

    def _apply_log_y(self) -> None:
        log_y = self.log_y.isChecked()
        for curve in self.curves:
            curve.setFillLevel(None if log_y else 0)
        for item in self._items:
            item.setLogMode(x=False, y=log_y)

    def plotted_counts(self) -> list[np.ndarray]:
        """The counts currently drawn, one array per curve (tests read the plot through this)."""
        import numpy as np
        return [np.asarray(curve.yData) for curve in self.curves]

    def hover_text(self, x: float) -> str:
        """'[lo, hi): count' of the bin under ``x`` for every drawn histogram ('' when outside)."""
        import numpy as np
        parts = []
        for hist, (name, _) in zip(self.histograms, self.items, strict=False):
            if hist is None or not hist.edges[0] <= x <= hist.edges[-1]:
                continue
            i = min(int(np.searchsorted(hist.edges, x, side="right")) - 1, hist.counts.size - 1)
            lo, hi = hist.edges[i], hist.edges[i + 1]
            label = f"{name}: " if len(self.items) > 1 else ""
            parts.append(f"{label}[{lo:.6g}, {hi:.6g}) count {int(hist.counts[i]):,}")
        return "; ".join(parts)

    def _on_mouse(self, pos: object) -> None:
        for item in self._items:
            if item.sceneBoundingRect().contains(pos):
                self.hover.setText(self.hover_text(item.vb.mapSceneToView(pos).x()) or " ")
                return

    def export_png(self, path: str) -> None:
        """Write the plot as a PNG image (an SVG drawing for a .svg name)."""
        export_plot(self.plot, path)

    def _ask_export(self) -> None:
        self.export_action.trigger()

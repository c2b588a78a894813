"""The plots of the run tab: lines over steps, the update-ratio heat-map, and a tensor's histograms over steps."""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from ckptview.core.analyze.histogram import Histogram, iter_tensor_histogram
from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.open import open_checkpoint
from ckptview.gui.plots import palette_colors, style_plot

HIST_BINS = 64
# log10 of the update ratio shown by the heat-map: below the floor (0 included) is "did not move".
HEAT_FLOOR = -8.0
_PENS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def as_array(values: Sequence[float | int | None]) -> np.ndarray:
    """Figures as float64 with NaN where absent (pyqtgraph leaves gaps there)."""
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def _style(owner: QWidget, graphics: pg.GraphicsLayoutWidget, *plots: pg.PlotItem) -> None:
    """The window's palette and plain-number axes, as every plot of the app (gui/plots.py)."""
    graphics.setBackground(palette_colors(owner)[0])
    for plot in plots:
        style_plot(plot, widget=owner)


class LinePlots(QWidget):
    """Norm and update ratio over the run, one line per selected tensor or module; a log-scale switch."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.log_box = QCheckBox("Log scale")
        self.log_box.setChecked(True)
        self.log_box.toggled.connect(self._apply_log)
        self.graphics = pg.GraphicsLayoutWidget()
        self.norm_plot = self.graphics.addPlot(row=0, col=0, title="L2 norm")
        self.ratio_plot = self.graphics.addPlot(row=1, col=0, title="update ratio ||w_t - w_(t-1)|| / ||w_(t-1)||")
        self.ratio_plot.setXLink(self.norm_plot)
        _style(self, self.graphics, self.norm_plot, self.ratio_plot)
        self.legend = self.norm_plot.addLegend(offset=(-10, 10))
        self.series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        top = QHBoxLayout()
        top.addWidget(self.log_box)
        top.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.graphics, 1)
        self._apply_log(True, redraw=False)

    def set_lines(self, x: Sequence[float], lines: dict[str, tuple[Sequence[float | None], Sequence[float | None]]], x_label: str) -> None:
        """``lines``: label -> (norms, update ratios), one value per checkpoint (None where absent)."""
        xs = np.asarray(x, dtype=np.float64)
        self.series = {label: (xs, as_array(n), as_array(r)) for label, (n, r) in lines.items()}
        self.norm_plot.setLabel("bottom", x_label)
        self.ratio_plot.setLabel("bottom", x_label)
        self._redraw()

    def _apply_log(self, on: bool, redraw: bool = True) -> None:
        for plot in (self.norm_plot, self.ratio_plot):
            plot.setLogMode(y=on)
        if redraw:
            self._redraw()

    def _redraw(self) -> None:
        self.norm_plot.clear()
        self.ratio_plot.clear()
        self.legend.clear()
        log = self.log_box.isChecked()
        for i, (label, (xs, norms, ratios)) in enumerate(self.series.items()):
            pen = pg.mkPen(_PENS[i % len(_PENS)], width=2)
            for plot, ys, name in ((self.norm_plot, norms, label), (self.ratio_plot, ratios, None)):
                shown = np.where(ys > 0, ys, np.nan) if log else ys  # log10(0) has no place on the axis
                plot.plot(xs, shown, pen=pen, symbol="o", symbolSize=5, symbolBrush=_PENS[i % len(_PENS)],
                          connect="finite", name=name)

    def line(self, label: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, norms, update ratios) of the line called ``label``, as plotted (NaN where absent)."""
        return self.series[label]


class UpdateHeatMap(QWidget):
    """log10 of the update ratio, tensors (rows) x checkpoints (columns): what stopped learning is dark."""

    row_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.graphics = pg.GraphicsLayoutWidget()
        self.plot = self.graphics.addPlot(title="log10 update ratio (tensors x checkpoints)")
        self.plot.invertY(True)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        _style(self, self.graphics, self.plot)
        self.bar = pg.ColorBarItem(values=(HEAT_FLOOR, 0), colorMap=pg.colormap.get("viridis"), interactive=False)
        self.bar.setImageItem(self.image, insert_in=self.plot)
        self.matrix = np.zeros((0, 0))
        self.note = QLabel("Rows are tensors in model order; black: no change (or below 1e-8); empty: absent.")
        self.note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.graphics, 1)
        layout.addWidget(self.note)
        self.plot.scene().sigMouseClicked.connect(self._on_click)

    def set_ratios(self, rows: list[list[float | None]]) -> None:
        """One row of update ratios per tensor, one column per checkpoint."""
        ratios = np.array([as_array(r) for r in rows], dtype=np.float64).reshape(len(rows), -1)
        with np.errstate(divide="ignore", invalid="ignore"):
            logged = np.where(ratios > 0, np.log10(np.where(ratios > 0, ratios, 1.0)), HEAT_FLOOR)
        self.matrix = np.where(np.isnan(ratios), np.nan, np.maximum(logged, HEAT_FLOOR))
        if self.matrix.size == 0:
            self.image.clear()
            return
        finite = self.matrix[np.isfinite(self.matrix)]
        hi = max(float(finite.max()), HEAT_FLOOR + 1) if finite.size else 0.0
        shown = np.where(np.isnan(self.matrix), HEAT_FLOOR, self.matrix)
        self.image.setImage(shown, levels=(HEAT_FLOOR, hi))
        self.bar.setLevels((HEAT_FLOOR, hi))

    def _on_click(self, event: object) -> None:
        if self.matrix.size == 0:
            return
        pos = self.image.mapFromScene(event.scenePos())  # type: ignore[attr-defined]
        row = int(math.floor(pos.y()))
        if 0 <= row < self.matrix.shape[0] and 0 <= pos.x() < self.matrix.shape[1]:
            self.row_clicked.emit(row)


def histograms_job(paths: list[str], name: str, value_range: tuple[float, float], bins: int,
                   token: CancelToken) -> Generator[Progress, None, list[Histogram | None]]:
    """Exact histograms of tensor ``name`` in each checkpoint over one common range (None where absent)."""
    out: list[Histogram | None] = []
    for i, path in enumerate(paths):
        token.check()
        try:
            ckpt = open_checkpoint(path)
        except (CheckpointError, OSError):  # a gap in the picture; the run's findings say why
            out.append(None)
            continue
        try:
            try:
                info = ckpt.tensor(name)
            except KeyError:
                out.append(None)
                continue
            try:
                hist: Histogram | None = yield from iter_tensor_histogram(info, bins, value_range=value_range,
                                                                          token=token)
            except CheckpointError:
                hist = None  # unreadable here: the run's findings say why
            out.append(hist)
        finally:
            ckpt.close()
        yield Progress(i + 1, len(paths), "histograms")
    return out


class HistogramsOverSteps(QWidget):
    """A tensor's value histogram at every checkpoint, as a 2-D image: steps across, values up."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.graphics = pg.GraphicsLayoutWidget()
        self.plot = self.graphics.addPlot(title="values over the run (log counts)")
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        _style(self, self.graphics, self.plot)
        self.bar = pg.ColorBarItem(values=(0, 1), colorMap=pg.colormap.get("inferno"), interactive=False)
        self.bar.setImageItem(self.image, insert_in=self.plot)
        self.status = QLabel("Select a tensor to see its values over the run.")
        self.status.setWordWrap(True)
        self.counts = np.zeros((0, 0), dtype=np.int64)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.graphics, 1)
        layout.addWidget(self.status)

    def clear(self, message: str) -> None:
        """Empty the picture and say why."""
        self.counts = np.zeros((0, 0), dtype=np.int64)
        self.image.clear()
        self.status.setText(message)

    def set_histograms(self, name: str, hists: list[Histogram | None], value_range: tuple[float, float]) -> None:
        """Show one column per checkpoint (bins from ``value_range``)."""
        bins = next((h.counts.size for h in hists if h is not None), HIST_BINS)
        self.counts = np.zeros((bins, len(hists)), dtype=np.int64)
        for t, h in enumerate(hists):
            if h is not None:
                self.counts[:, t] = h.counts
        shown = np.log1p(self.counts.astype(np.float64))
        top = float(shown.max()) if shown.size else 1.0
        self.image.setImage(shown, levels=(0, top or 1.0))
        self.bar.setLevels((0, top or 1.0))
        lo, hi = value_range
        self.image.setRect(-0.5, lo, len(hists), (hi - lo) or 1.0)
        self.plot.setLabel("bottom", "checkpoint (run order)")
        self.plot.setLabel("left", "value")
        nonfinite = sum(h.nan + h.posinf + h.neginf for h in hists if h is not None)
        extra = f"; {nonfinite} NaN/Inf values not drawn" if nonfinite else ""
        self.status.setText(f"{name}: {bins} bins over [{lo:.4g}, {hi:.4g}] per checkpoint{extra}")

"""The plots of the series tab: lines over steps, the update-ratio heat-map, and a tensor's histograms over steps."""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QCheckBox, QGraphicsRectItem, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from ckptview.core.errors import CheckpointError
from ckptview.core.figures.histogram import Histogram, iter_tensor_histogram
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.series.cells import KIND_NAMES, VALUE, Cells
from ckptview.core.series.timeline import open_checkpoint, series_tensor
from ckptview.core.session.workspace import Holdings
from ckptview.gui.base.log_axis import AxisMixinBase, LogTicks, axis_item, log_tick_axis, tick_font_metrics
from ckptview.gui.base.palette import Theme, contrast, on_palette_change, theme
from ckptview.gui.base.plots import (
    follow_background,
    make_exportable,
    say_drawn,
    say_nothing,
    style_color_bar,
    style_plot,
)
from ckptview.gui.base.wrap import LINE_CHARS, breakable, name_html

if TYPE_CHECKING:
    import numpy as np
    import pyqtgraph as pg

HIST_BINS = 64
# log10 of the update ratio shown by the heat-map: below the floor (0 included) is "did not move".
HEAT_FLOOR = -8.0


def as_array(values: Sequence[float | int | None]) -> np.ndarray:
    """Figures as float64 with NaN where absent (pyqtgraph leaves gaps there)."""
    import numpy as np

    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def whole_steps(plot: pg.PlotItem, xs: np.ndarray) -> None:
    """Tick `plot`'s x axis (a `log_tick_axis`) at whole numbers only when every x is one (steps, epochs,
    run order): steps 1, 2, 3 never read 1.5 and 2.5 between them."""
    import numpy as np

    axis = plot.getAxis("bottom")
    if isinstance(axis, LogTicks):
        finite = xs[np.isfinite(xs)]
        axis.whole_numbers = bool(finite.size) and bool(np.all(finite == np.round(finite)))
        axis.picture = None  # its ticks are drawn again
        axis.update()


def style_plots(owner: QWidget, graphics: pg.GraphicsLayoutWidget, *plots: pg.PlotItem) -> None:
    """The window's palette and plain-number axes, as every plot of the app (gui/base/plots.py)."""
    follow_background(graphics)
    for plot in plots:
        style_plot(plot, widget=owner)


class LabelAxis(AxisMixinBase):
    """An axis mixin (`axis_item(LabelAxis, ...)` makes the axis) naming rows or columns of an image (cell
    ``i`` spans [i, i+1)): as many labels as fit without overlapping, long ones elided at the start."""

    def __init__(self, orientation: str, max_width: int = 180) -> None:
        super().__init__(orientation)
        self.labels: list[str] = []
        self.max_width = max_width

    def set_labels(self, labels: list[str]) -> None:
        """The name of each row (left axis) or column (bottom axis)."""
        self.labels = list(labels)
        self.picture = None
        self.update()

    def _shown(self, label: str) -> str:
        # The end of a name tells tensors apart ("…conv1.weight.exp_avg"): elide its start.
        return tick_font_metrics(self).elidedText(label, Qt.TextElideMode.ElideLeft, self.max_width)

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:  # noqa: N802,N803
        n = len(self.labels)
        if not n or size <= 0:
            return []
        fm = tick_font_metrics(self)
        if self.orientation in ("left", "right"):
            need = fm.height() + 2
        else:
            need = max(fm.horizontalAdvance(self._shown(x)) for x in self.labels) + 12
        lo, hi = sorted((minVal, maxVal))
        per_cell = size / max(hi - lo, 1e-9)
        stride = max(1, math.ceil(need / per_cell))
        first = max(0, math.ceil(lo - 0.5))
        values = [i + 0.5 for i in range(first - first % stride, n, stride) if lo <= i + 0.5 <= hi]
        return [(float(stride), values)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        out = []
        for v in values:
            i = int(math.floor(v))
            out.append(self._shown(self.labels[i]) if 0 <= i < len(self.labels) else "")
        return out


def inline_legend(entries: Sequence[tuple[str, ...]]) -> str:
    """A legend as one wrapped line of rich text: per (colour, name[, glyph]) entry a coloured square (or the
    glyph) and the name (escaped, cut and breakable: `name_html`); a colour that would vanish on the window (the plot's own background) is an
    outlined square, as it looks on the plot."""
    window = theme().color("window")

    def swatch(color: str, glyph: str) -> str:
        if contrast(QColor(color), window) < 3.0:
            return "&#9633;"
        return f"<span style='color:{color}'>{glyph}</span>"

    return " &nbsp; ".join(f"{swatch(color, glyph)}&nbsp;{name_html(text)}"
                           for color, text, glyph in ((*e, "&#9632;")[:3] for e in entries))


class LinePlots(QWidget):
    """Norm and update ratio over the run, one line per selected tensor or module; a log-scale switch.

    The legend is a label above the plots (it never covers a line); ``mark`` draws a labelled vertical line at
    one step in both plots (a finding's checkpoint)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        import pyqtgraph as pg

        super().__init__(parent)
        self.log_box = QCheckBox("Log scale")
        self.log_box.setChecked(True)
        self.log_box.toggled.connect(self._apply_log)
        self.graphics = pg.GraphicsLayoutWidget()
        self.norm_plot = self.graphics.addPlot(row=0, col=0, title="L2 norm",
                                               axisItems={"left": log_tick_axis("left"), "bottom": log_tick_axis("bottom")})
        self.ratio_plot = self.graphics.addPlot(row=1, col=0, title="update ratio ||w_t - w_(t-1)|| / ||w_(t-1)||",
                                                axisItems={"left": log_tick_axis("left"), "bottom": log_tick_axis("bottom")})
        self.ratio_plot.setXLink(self.norm_plot)
        for plot in (self.norm_plot, self.ratio_plot):
            plot.getAxis("left").setWidth(56)  # both plots' data areas line up
        style_plots(self, self.graphics, self.norm_plot, self.ratio_plot)
        make_exportable(self.graphics, "norms-and-update-ratios")
        self.legend = QLabel()
        self.legend.setObjectName("seriesLinesLegend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        self.series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.nonfinite: dict[str, np.ndarray] = {}
        self.crosses: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # label -> (x, y) of its NaN/Inf marks
        self._cross_items: list[pg.ScatterPlotItem] = []
        self.markers: list[pg.InfiniteLine] = []
        self._mark: tuple[float, str] | None = None
        top = QHBoxLayout()
        top.addWidget(self.log_box)
        top.addWidget(self.legend, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.graphics, 1)
        self._apply_log(True, redraw=False)

    def set_lines(self, x: Sequence[float], lines: dict[str, tuple[Sequence[float | int | None], ...]],
                  x_label: str) -> None:
        """``lines``: label -> (norms, update ratios[, NaN/Inf value counts]), one value per checkpoint (None
        where absent). Checkpoints where a line holds NaN/Inf get a red cross on its norm (or, where that
        has no place on the axis, on its last norm drawn)."""
        import numpy as np

        xs = np.asarray(x, dtype=np.float64)
        self.series = {label: (xs, as_array(v[0]), as_array(v[1])) for label, v in lines.items()}
        self.nonfinite = {label: as_array(v[2]) for label, v in lines.items() if len(v) > 2}
        for plot in (self.norm_plot, self.ratio_plot):
            plot.setLabel("bottom", x_label)
            whole_steps(plot, xs)
        self._redraw()

    def mark(self, x: float | None, text: str = "") -> None:
        """Draw a labelled vertical line at ``x`` in both plots (None: remove it)."""
        self._mark = None if x is None else (float(x), text)
        self._draw_mark()

    def _apply_log(self, on: bool, redraw: bool = True) -> None:
        for plot in (self.norm_plot, self.ratio_plot):
            plot.setLogMode(y=on)
        if redraw:
            self._redraw()

    def _redraw(self) -> None:
        import numpy as np
        import pyqtgraph as pg

        self.norm_plot.clear()
        self.ratio_plot.clear()
        for item in self._cross_items:
            self.norm_plot.vb.removeItem(item)
        self._cross_items = []
        self.markers = []
        self.crosses = {}
        log = self.log_box.isChecked()
        entries: list[tuple[str, ...]] = []
        current = theme()
        mark = current.hex("plot_mark")
        drawn = {id(self.norm_plot): False, id(self.ratio_plot): False}
        for i, (label, (xs, norms, ratios)) in enumerate(self.series.items()):
            color = current.series_color(i).name()
            pen = pg.mkPen(color, width=2)
            for plot, ys in ((self.norm_plot, norms), (self.ratio_plot, ratios)):
                shown = np.where(ys > 0, ys, np.nan) if log else ys  # log10(0) has no place on the axis
                if np.isnan(shown).all():
                    continue  # nothing to draw yet (pyqtgraph warns on an all-NaN curve)
                plot.plot(xs, shown, pen=pen, symbol="o", symbolSize=5, symbolBrush=color, connect="finite")
                drawn[id(plot)] = True
            entries.append((color, label))
            self._cross(label, xs, np.where(norms > 0, norms, np.nan) if log else norms)
        for plot, index, what in ((self.norm_plot, 1, "norm"), (self.ratio_plot, 2, "update ratio")):
            if drawn[id(plot)]:
                say_drawn(plot)
            else:
                say_nothing(plot, self._why_empty(index, what))
        if self.crosses:
            entries.append((mark, "holds NaN/Inf", "&#10005;"))
        self.legend.setText(inline_legend(entries) if entries else "Select tensors or modules to draw them.")
        self._draw_mark()

    def _why_empty(self, index: int, what: str) -> str:
        """Why a plot draws nothing: no selection, no figure yet, or figures a log axis cannot place."""
        import numpy as np

        if not self.series:
            return "Select tensors or modules to draw them."
        values = np.concatenate([s[index] for s in self.series.values()])
        finite = values[np.isfinite(values)]
        if not finite.size:
            return (f"No {what} yet: it needs two checkpoints that hold the tensor." if index == 2
                    else f"No {what} yet.")
        if (finite == 0).all():
            words = ("the values did not change from one checkpoint to the next" if index == 2
                     else "every value is zero")
            return f"{what.capitalize()} 0 at every step ({words}): nothing to draw on a log axis."
        return f"No positive {what} to draw on a log axis."

    def _cross(self, label: str, xs: np.ndarray, shown: np.ndarray) -> None:
        import numpy as np
        import pyqtgraph as pg

        counts = self.nonfinite.get(label)
        if counts is None:
            return
        points = []
        last = math.nan
        for x, y, bad in zip(xs, shown, counts, strict=True):
            if np.isfinite(y):
                last = float(y)
            if bad > 0:
                at = float(y) if np.isfinite(y) else last
                if math.isfinite(at):
                    points.append((float(x), at))
        if points:
            px, py = np.array([p[0] for p in points]), np.array([p[1] for p in points])
            self.crosses[label] = (px, py)
            # On the view box itself, not a data item of the plot: in view coordinates (log10 in log mode).
            shown_y = np.log10(py) if self.log_box.isChecked() else py
            mark = theme().hex("plot_mark")
            item = pg.ScatterPlotItem(px, shown_y, symbol="x", size=13, brush=mark, pen=pg.mkPen(mark, width=2))
            self.norm_plot.vb.addItem(item, ignoreBounds=True)
            self._cross_items.append(item)

    def _draw_mark(self) -> None:
        import pyqtgraph as pg

        for plot, marker in zip((self.norm_plot, self.ratio_plot), self.markers, strict=False):
            plot.removeItem(marker)
        self.markers = []
        if self._mark is None:
            return
        x, text = self._mark
        mark = theme().hex("plot_mark")
        for plot, label in ((self.norm_plot, text), (self.ratio_plot, None)):
            line = pg.InfiniteLine(pos=x, angle=90, movable=False, pen=pg.mkPen(mark, width=2,
                                                                                 style=Qt.PenStyle.DashLine),
                                   label=label, labelOpts={"position": 0.92, "color": mark,
                                                           "anchors": [(0, 0), (0, 0)]})
            plot.addItem(line, ignoreBounds=True)
            self.markers.append(line)

    def line(self, label: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, norms, update ratios) of the line called ``label``, as plotted (NaN where absent)."""
        return self.series[label]


# Colours of the heat-map cells that are not a value on the colour bar (see core/series/cells.py):
# each distinct from the others and from every colour of the bar (viridis: dark purple to yellow), in
# each palette ("absent" is the plot's own background; "unchanged" is black on light, near-white on dark).
HEAT_KINDS = ("absent", "first", "unchanged", "nan", "inf", "unreadable", "no_ratio", "pending")


def heat_colors(current: Theme | None = None) -> dict[str, str]:
    """The heat-map's colour of each cell state in `current` (default: the palette in use)."""
    current = current or theme()
    return {kind: current.hex(f"heat_{kind}") for kind in HEAT_KINDS}


HEAT_LABELS = {"absent": "absent (not in this checkpoint)", "first": "nothing to compare (first, new or reshaped)",
               "unchanged": "unchanged (no value differs)", "nan": "holds NaN", "inf": "holds \u00b1Inf",
               "unreadable": "unreadable", "no_ratio": "no ratio (previous norm 0 or nothing finite)",
               "pending": "not read yet"}


class UpdateHeatMap(QWidget):
    """log10 of the update ratio, tensors (rows) x checkpoints (columns), with every state that is not a ratio
    (absent, nothing to compare, unchanged, NaN, Inf, unreadable) in its own colour, named in the legend."""

    row_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        import numpy as np
        import pyqtgraph as pg

        super().__init__(parent)
        self.graphics = pg.GraphicsLayoutWidget()
        self.rows_axis = axis_item(LabelAxis, "left")
        self.columns_axis = axis_item(LabelAxis, "bottom", max_width=90)
        self.plot = self.graphics.addPlot(row=0, col=0, title="log10 update ratio (tensors x checkpoints)",
                                          axisItems={"left": self.rows_axis, "bottom": self.columns_axis})
        self.plot.invertY(True)
        self.plot.setMouseEnabled(x=False, y=True)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        style_plots(self, self.graphics, self.plot)
        make_exportable(self.graphics, "update-heatmap")
        self.colormap = pg.colormap.get("viridis")
        self.colors = heat_colors()
        self.top = 0.0
        self.bar = pg.ColorBarItem(values=(HEAT_FLOOR, 0), colorMap=self.colormap, interactive=False,
                                   label="log10 update ratio")
        style_color_bar(self.bar, self)
        self.graphics.addItem(self.bar, row=0, col=1)
        # A child of the image (its coordinates are cells; Qt owns it with the image): a black outline inside
        # a white one, visible on every cell colour.
        self.marker = QGraphicsRectItem(0, 0, 1, 1, self.image)
        inner = QGraphicsRectItem(0, 0, 1, 1, self.marker)
        for item, color, width in ((self.marker, "#ffffff", 6), (inner, "#000000", 2)):
            pen = pg.mkPen(color, width=width)
            pen.setCosmetic(True)
            item.setPen(pen)
        self.marker.setZValue(10)
        self.marker.hide()
        self._marker_inner = inner
        self.marked: tuple[int, int] | None = None
        self.matrix = np.zeros((0, 0))
        self.kinds = np.zeros((0, 0), dtype=np.int8)
        self.rgba = np.zeros((0, 0, 4), dtype=np.uint8)
        self.note = QLabel("Rows: tensors in model order; columns: checkpoints.")
        self.note.setWordWrap(True)
        self.legend = QLabel()
        self.legend.setObjectName("seriesHeatLegend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.graphics, 1)
        layout.addWidget(self.legend)
        layout.addWidget(self.note)
        self.plot.scene().sigMouseClicked.connect(self._on_click)
        self._cells: tuple[Cells, list[str], list[str], str] | None = None
        on_palette_change(self, self._recolor)

    def _recolor(self, current: Theme) -> None:
        self.colors = heat_colors(current)
        if self._cells is not None:
            self.set_cells(*self._cells)

    def set_cells(self, cells: Cells, rows: list[str], columns: list[str], axis_label: str) -> None:
        """Show ``cells`` (core/series/cells.py), rows named ``rows``, columns ``columns``."""
        import numpy as np

        self._cells = (cells, rows, columns, axis_label)
        self.matrix, self.kinds = cells.levels, cells.kinds
        self.rows_axis.set_labels(rows)
        self.columns_axis.set_labels(columns)
        self.plot.setLabel("bottom", axis_label)
        finite = self.matrix[np.isfinite(self.matrix)]
        self.top = max(float(finite.max()), HEAT_FLOOR + 1) if finite.size else 0.0
        self.bar.setLevels((HEAT_FLOOR, self.top))
        self.rgba = self._paint()
        if self.rgba.size == 0:
            self.image.clear()
        else:
            self.image.setImage(self.rgba, levels=None, autoLevels=False)
        used = [KIND_NAMES[k] for k in sorted(set(np.unique(self.kinds).tolist()) - {VALUE})]
        entries = [(self.colors[k], HEAT_LABELS[k]) for k in used]
        self._legend = [(HEAT_LABELS[k], self.colors[k]) for k in used]
        self.legend.setText(inline_legend(entries + [("#21918c", "colour bar: log10 update ratio "
                                                                 f"(bottom: {10 ** HEAT_FLOOR:g} or less)")]))
        parts = ["Rows: tensors in model order; columns: checkpoints by " + axis_label]
        if cells.nan_cells:
            parts.append(f"NaN in {cells.nan_cells} cells")
        if cells.inf_cells:
            parts.append(f"\u00b1Inf in {cells.inf_cells} cells")
        self.note.setText("; ".join(parts) + ". Click a row to select its tensor.")
        if self.marked is not None:
            self.mark(*self.marked)

    def legend_entries(self) -> list[tuple[str, str]]:
        """(label, colour) of every legend entry other than the colour bar."""
        return list(getattr(self, "_legend", []))

    def _paint(self) -> np.ndarray:
        import numpy as np

        rows, cols = self.kinds.shape
        rgba = np.zeros((rows, cols, 4), dtype=np.uint8)
        if not rows or not cols:
            return rgba
        span = (self.top - HEAT_FLOOR) or 1.0
        scaled = np.clip((np.nan_to_num(self.matrix, nan=HEAT_FLOOR) - HEAT_FLOOR) / span, 0.0, 1.0)
        rgba[...] = self.colormap.map(scaled.reshape(-1), mode="byte").reshape(rows, cols, 4)
        for kind, name in enumerate(KIND_NAMES):
            if kind == VALUE:
                continue
            c = QColor(self.colors[name])
            rgba[self.kinds == kind] = (c.red(), c.green(), c.blue(), 255)
        return rgba

    def mark(self, row: int | None, column: int | None = None) -> None:
        """Outline cell (``row``, ``column``) (a finding's tensor and checkpoint); None: no outline."""
        if row is None or column is None or not (0 <= row < self.kinds.shape[0] and 0 <= column < self.kinds.shape[1]):
            self.marked = None if row is None else self.marked
            self.marker.hide()
            return
        self.marked = (row, column)
        self.marker.setRect(column, row, 1, 1)
        self._marker_inner.setRect(column, row, 1, 1)
        self.marker.show()

    def _on_click(self, event: object) -> None:
        if self.matrix.size == 0:
            return
        pos = self.image.mapFromScene(event.scenePos())  # type: ignore[attr-defined]
        row = int(math.floor(pos.y()))
        if 0 <= row < self.matrix.shape[0] and 0 <= pos.x() < self.matrix.shape[1]:
            self.row_clicked.emit(row)


def histograms_job(paths: list[str], name: str, value_range: tuple[float, float], bins: int,
                   holdings: Holdings | None = None,
                   token: CancelToken | None = None) -> Generator[Progress, None, list[Histogram | None]]:
    """Exact histograms of tensor ``name`` in each checkpoint over one common range (None where absent).

    Checkpoints come from `holdings`, the run's own opens (a file changed since is opened again); without,
    each is opened for this job and closed."""
    out: list[Histogram | None] = []
    for i, path in enumerate(paths):
        if token is not None:
            token.check()
        try:
            ckpt = holdings.checkpoint(path) if holdings is not None else open_checkpoint(path)
        except (CheckpointError, OSError):  # a gap in the picture; the run's findings say why
            out.append(None)
            continue
        try:
            info = series_tensor(ckpt, name)  # optimizer state is named by its parameter in a run
            if info is None:
                out.append(None)
                continue
            try:
                hist: Histogram | None = yield from iter_tensor_histogram(info, bins, value_range=value_range,
                                                                          token=token)
            except CheckpointError:
                hist = None  # unreadable here: the run's findings say why
            out.append(hist)
        finally:
            if holdings is None:
                ckpt.close()
        yield Progress(i + 1, len(paths), "histograms")
    return out


class HistogramsOverSteps(QWidget):
    """A tensor's value histogram at every checkpoint, as a 2-D image: steps across, values up."""

    def __init__(self, parent: QWidget | None = None) -> None:
        import numpy as np
        import pyqtgraph as pg

        super().__init__(parent)
        self.graphics = pg.GraphicsLayoutWidget()
        self.plot = self.graphics.addPlot(title="values over the run (log counts)",  # a column per checkpoint
                                          axisItems={"bottom": log_tick_axis("bottom", whole_numbers=True)})
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        style_plots(self, self.graphics, self.plot)
        make_exportable(self.graphics, "values-over-the-run")
        self.bar = pg.ColorBarItem(values=(0, 1), colorMap=pg.colormap.get("inferno"), interactive=False)
        style_color_bar(self.bar, self)
        self.bar.setImageItem(self.image, insert_in=self.plot)
        self.status = QLabel("Select a tensor to see its values over the run.")
        self.status.setWordWrap(True)
        self.counts = np.zeros((0, 0), dtype=np.int64)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.graphics, 1)
        layout.addWidget(self.status)
        self.clear("Select a tensor to see its values over the run.")

    def clear(self, message: str) -> None:
        """Empty the picture and say why (in the plot too: no empty -0.5..0.5 axes)."""
        import numpy as np

        self.counts = np.zeros((0, 0), dtype=np.int64)
        self.image.clear()
        self.bar.hide()
        self.status.setText(breakable(message, LINE_CHARS))
        say_nothing(self.plot, message)

    def set_histograms(self, name: str, hists: list[Histogram | None], value_range: tuple[float, float]) -> None:
        """Show one column per checkpoint (bins from ``value_range``)."""
        import numpy as np

        bins = next((h.counts.size for h in hists if h is not None), HIST_BINS)
        say_drawn(self.plot)
        self.bar.show()
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
        self.status.setText(f"{breakable(name)}: {bins} bins over [{lo:.4g}, {hi:.4g}] per checkpoint{extra}")

"""The series tab's Scalars view: what the run logged (loss, learning rate, eval metrics) over the same axis
as the weight figures, its checkpoints marked on the dense curves; a click chooses a step and the checkpoint
nearest it. What is drawn comes from the tab's `SeriesViewState` (core/series/view_state.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QMenu, QToolButton, QVBoxLayout, QWidget

from ckptview.core.series.view_state import METRICS, RATES, SeriesViewState
from ckptview.core.text import printable
from ckptview.core.units import plural
from ckptview.gui.base.log_axis import log_tick_axis
from ckptview.gui.base.palette import theme
from ckptview.gui.base.plots import make_exportable, say_drawn, say_nothing
from ckptview.gui.base.wrap import LINE_CHARS, breakable
from ckptview.gui.series.plots import as_array, inline_legend, style_plots, whole_steps

if TYPE_CHECKING:
    import pyqtgraph as pg

NOTHING = ("This run logged no scalar that can be drawn on its axis: no loss or learning rate in its "
           "checkpoints, and no trainer_state.json, TensorBoard event file or hparams.yaml beside them.")


class ScalarPlots(QWidget):
    """Two plots over the run's axis: losses and metrics, and learning rates (their own scale). A menu
    chooses the curves; a click on a plot chooses the checkpoint nearest that step."""

    checkpoint_chosen = Signal(int)  # the run index of the checkpoint a click chose
    marked = Signal(float, str)  # (x, words): the other views mark the same step

    def __init__(self, view: SeriesViewState, parent: QWidget | None = None) -> None:
        import pyqtgraph as pg

        super().__init__(parent)
        self.view = view
        self.curves_button = QToolButton()
        self.curves_button.setText("Curves")
        self.curves_button.setObjectName("seriesScalarCurves")
        self.curves_button.setToolTip("Choose the logged scalars to draw")
        self.curves_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu = QMenu(self.curves_button)
        self.curves_button.setMenu(self.menu)
        self.log_box = QCheckBox("Log scale")
        self.log_box.toggled.connect(self.refresh)
        self.legend = QLabel()
        self.legend.setObjectName("seriesScalarsLegend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        self.info = QLabel("Click a plot to choose a step: the checkpoint nearest it is marked in every view.")
        self.info.setObjectName("seriesScalarsInfo")
        self.info.setWordWrap(True)
        self.info.setTextFormat(Qt.TextFormat.PlainText)
        self.graphics = pg.GraphicsLayoutWidget()
        self.metric_plot = self.graphics.addPlot(row=0, col=0, title="loss and metrics",
                                                 axisItems={"left": log_tick_axis("left"),
                                                            "bottom": log_tick_axis("bottom")})
        self.rate_plot = self.graphics.addPlot(row=1, col=0, title="learning rate",
                                               axisItems={"left": log_tick_axis("left"),
                                                          "bottom": log_tick_axis("bottom")})
        self.rate_plot.setXLink(self.metric_plot)
        for plot in (self.metric_plot, self.rate_plot):
            plot.getAxis("left").setWidth(56)
        style_plots(self, self.graphics, self.metric_plot, self.rate_plot)
        make_exportable(self.graphics, "logged-scalars")
        self.graphics.scene().sigMouseClicked.connect(self._on_click)
        self.markers: list[pg.InfiniteLine] = []
        self._mark: tuple[float, str] | None = None
        top = QHBoxLayout()
        top.addWidget(self.curves_button)
        top.addWidget(self.log_box)
        top.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.legend)  # a row of its own: wrapped over as many lines as its names need
        layout.addWidget(self.graphics, 1)
        layout.addWidget(self.info)

    def refresh(self) -> None:
        """Draw the chosen curves of the view's run again (and the menu of every curve)."""
        import numpy as np
        import pyqtgraph as pg

        self._fill_menu()
        log = self.log_box.isChecked()
        entries: list[tuple[str, ...]] = []
        drawn = {METRICS: False, RATES: False}
        r = self.view.result
        checkpoint_x = r.x_values() if r is not None else []
        plots = {METRICS: self.metric_plot, RATES: self.rate_plot}
        for plot in plots.values():
            plot.clear()
            plot.setLogMode(y=log)
            plot.setLabel("bottom", self.view.axis_label())
        current = theme()
        for i, line in enumerate(self.view.drawn()):
            xs, ys = line.points()
            x, y = np.asarray(xs, dtype=np.float64), as_array(ys)
            shown = np.where(y > 0, y, np.nan) if log else y
            if not np.isfinite(shown).any():
                continue  # pyqtgraph warns on an all-NaN curve
            color = current.series_color(i).name()
            plot = plots[line.plot]
            few = len(xs) <= 64
            plot.plot(x, shown, pen=pg.mkPen(color, width=2), connect="finite",
                      **({"symbol": "o", "symbolSize": 4, "symbolBrush": color, "symbolPen": None} if few else {}))
            mx, my = line.marks(checkpoint_x)
            marks = as_array(my)
            marks = np.where(marks > 0, marks, np.nan) if log else marks
            if mx and np.isfinite(marks).any():  # the checkpoints, marked on the curve
                plot.plot(np.asarray(mx, dtype=np.float64), marks, pen=None, symbol="d", symbolSize=10,
                          symbolBrush=color, symbolPen=pg.mkPen(current.hex("plot_foreground"), width=1))
            whole_steps(plot, x)
            drawn[line.plot] = True
            entries.append((color, printable(line.key)))
        for key, plot in plots.items():
            if drawn[key]:
                say_drawn(plot)
            else:
                say_nothing(plot, self._why_empty(key))
        if entries:
            entries.append((current.hex("plot_foreground"), "a checkpoint", "&#9670;"))
        self.legend.setText(inline_legend(entries) if entries else "")
        self._draw_mark()

    def _why_empty(self, key: str) -> str:
        lines = self.view.lines()
        if not lines:
            return NOTHING if key == METRICS else "No learning rate logged."
        if not any(line.plot == key for line in lines):
            return "No learning rate logged." if key == RATES else "No loss or metric logged."
        return "Choose curves to draw (Curves)." if not self.view.drawn() else "None of the chosen curves is drawn here."

    def _fill_menu(self) -> None:
        self.menu.clear()
        for line in self.view.lines():
            placed = any(x is not None for x in line.placement.x)
            action = QAction(printable(f"{line.key}: {plural(len(line.curve), 'point')}"), self.menu)
            action.setCheckable(True)
            action.setChecked(line.key in self.view.chosen)
            action.setEnabled(placed)
            if not placed:
                action.setToolTip("Not on the run's axis: logged at steps, the run ordered otherwise")
            action.toggled.connect(lambda on, key=line.key: self._choose(key, on))
            self.menu.addAction(action)
        self.curves_button.setEnabled(bool(self.menu.actions()))

    def _choose(self, key: str, on: bool) -> None:
        self.view.choose_curve(key, on)
        self.refresh()

    def _on_click(self, event: Any) -> None:
        for plot in (self.metric_plot, self.rate_plot):
            if plot.sceneBoundingRect().contains(event.scenePos()):
                x = plot.vb.mapSceneToView(event.scenePos()).x()
                self.choose_step(float(x))
                return

    def choose_step(self, x: float) -> int | None:
        """Choose the checkpoint nearest `x`: mark it here, say what it holds, and tell the other views."""
        t = self.view.choose_step(x)
        if t is None or self.view.result is None:
            return None
        at = self.view.result.x_values()[t]
        words = printable(self.view.result.label(t))
        self.info.setText(breakable(printable(self.view.checkpoint_text(t)), LINE_CHARS))
        self.mark(at, words)
        self.marked.emit(at, words)
        self.checkpoint_chosen.emit(t)
        return t

    def mark(self, x: float | None, text: str = "") -> None:
        """A labelled vertical line at `x` in both plots (None: none)."""
        self._mark = None if x is None else (float(x), text)
        self._draw_mark()

    def _draw_mark(self) -> None:
        import pyqtgraph as pg

        for plot, marker in zip((self.metric_plot, self.rate_plot), self.markers, strict=False):
            plot.removeItem(marker)
        self.markers = []
        if self._mark is None:
            return
        x, text = self._mark
        mark = theme().hex("plot_mark")
        for plot, label in ((self.metric_plot, text), (self.rate_plot, None)):
            line = pg.InfiniteLine(pos=x, angle=90, movable=False,
                                   pen=pg.mkPen(mark, width=2, style=Qt.PenStyle.DashLine), label=label,
                                   labelOpts={"position": 0.92, "color": mark, "anchors": [(0, 0), (0, 0)]})
            plot.addItem(line, ignoreBounds=True)
            self.markers.append(line)

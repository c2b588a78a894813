"""The series tab's Spectra view: each selected weight's power-law alpha and stable rank over the steps.

Drawn as the Lines view draws norms (:class:`ckptview.gui.series.plots.LinePlots`: one colour per tensor,
the legend above the plots); the alpha plot shades WeightWatcher's well-trained range [2, 6]. The figures
are computed by :func:`ckptview.core.series.spectra.iter_spectra` in a worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from ckptview.core.figures.spectral import ALPHA_HIGH, ALPHA_LOW
from ckptview.gui.base.log_axis import log_tick_axis
from ckptview.gui.base.palette import theme
from ckptview.gui.base.plots import make_exportable, say_drawn, say_nothing
from ckptview.gui.base.wrap import LINE_CHARS, breakable
from ckptview.gui.series.plots import as_array, inline_legend, style_plots, whole_steps

if TYPE_CHECKING:
    import numpy as np

RANGE_BRUSH = (44, 160, 44, 28)  # the well-trained band of the alpha plot


class SpectralLines(QWidget):
    """alpha and stable rank over the run, one line per weight."""

    def __init__(self, parent: QWidget | None = None) -> None:
        import pyqtgraph as pg

        super().__init__(parent)
        self.graphics = pg.GraphicsLayoutWidget()
        self.alpha_plot = self.graphics.addPlot(row=0, col=0, title="alpha (power-law exponent of the ESD tail)",
                                                axisItems={"bottom": log_tick_axis("bottom")})
        self.rank_plot = self.graphics.addPlot(row=1, col=0, title="stable rank ||W||_F^2 / ||W||_2^2",
                                               axisItems={"bottom": log_tick_axis("bottom")})
        self.rank_plot.setXLink(self.alpha_plot)
        for plot in (self.alpha_plot, self.rank_plot):
            plot.getAxis("left").setWidth(56)
        style_plots(self, self.graphics, self.alpha_plot, self.rank_plot)
        make_exportable(self.graphics, "spectra-over-the-run")
        self.legend = QLabel("Select weights (2-D tensors) or modules to draw their spectra.")
        self.legend.setObjectName("seriesSpectraLegend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        self.series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.legend)
        layout.addWidget(self.graphics, 1)

    def set_message(self, text: str) -> None:
        """A line above the plots (what is being computed, or why nothing is drawn)."""
        self.legend.setTextFormat(Qt.TextFormat.PlainText)
        self.legend.setText(breakable(text, LINE_CHARS))

    def set_lines(self, x: Sequence[float], lines: Mapping[str, tuple[Sequence[float | None], Sequence[float | None]]],
                  x_label: str) -> None:
        """``lines``: label -> (alpha, stable rank), one value per checkpoint (None where not analysed)."""
        import numpy as np
        import pyqtgraph as pg

        xs = np.asarray(x, dtype=np.float64)
        self.series = {label: (xs, as_array(a), as_array(r)) for label, (a, r) in lines.items()}
        for plot in (self.alpha_plot, self.rank_plot):
            plot.clear()
            plot.setLabel("bottom", x_label)
            whole_steps(plot, xs)
        band = pg.LinearRegionItem((ALPHA_LOW, ALPHA_HIGH), orientation="horizontal", movable=False,
                                   brush=pg.mkBrush(*RANGE_BRUSH), pen=pg.mkPen(None))
        self.alpha_plot.addItem(band, ignoreBounds=True)
        entries: list[tuple[str, ...]] = []
        drawn = {id(self.alpha_plot): False, id(self.rank_plot): False}
        for i, (label, (line_x, alpha, rank)) in enumerate(self.series.items()):
            color = theme().series_color(i).name()
            pen = pg.mkPen(color, width=2)
            for plot, ys in ((self.alpha_plot, alpha), (self.rank_plot, rank)):
                if np.isnan(ys).all():
                    continue  # pyqtgraph warns on an all-NaN curve
                plot.plot(line_x, ys, pen=pen, symbol="o", symbolSize=5, symbolBrush=color, connect="finite")
                drawn[id(plot)] = True
            entries.append((color, label))
        for plot, what in ((self.alpha_plot, "alpha"), (self.rank_plot, "stable rank")):
            if drawn[id(plot)]:
                say_drawn(plot)
            else:
                say_nothing(plot, f"No {what} yet: select weights (2-D tensors) or modules." if not self.series
                            else f"No {what} fitted yet for the selected weights.")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        if entries:
            self.legend.setText(inline_legend(entries) + f" &nbsp; (shaded: alpha in [{ALPHA_LOW:g}, {ALPHA_HIGH:g}])")
        else:
            self.legend.setText("Select weights (2-D tensors) or modules to draw their spectra.")

    def line(self, label: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, alpha, stable rank) of the line called ``label``, as plotted (NaN where not analysed)."""
        return self.series[label]

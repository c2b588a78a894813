"""How every plot of the window looks: colours from the Qt palette (light or dark), plain-number axes.

pyqtgraph draws black backgrounds and scales axes with SI prefixes ("value (x0.001)") by default; a
checkpoint browser wants the window's own colours and the numbers as they are, with the unit in the label.
Legends are HTML text beside the plot (``legend_html``), so they never cover data.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QWidget

if TYPE_CHECKING:  # imported where a plot or values are first needed, not at start-up
    import pyqtgraph as pg


# Non-finite values have colours of their own in every heat-map and in the values table: none of them is
# in the diverging blue-white-red map (CET-D1), so a NaN never reads as 0.0 nor an infinity as a large value.
NONFINITE_COLORS = {"NaN": "#e000e0", "+Inf": "#f0c000", "-Inf": "#00a050"}  # magenta, gold, green
NONFINITE_WORDS = {"NaN": "magenta", "+Inf": "gold", "-Inf": "green"}


def nonfinite_caption(nan: int, posinf: int, neginf: int) -> str:
    """'1 NaN (magenta), 2 -Inf (green)': the non-finite counts and their colours ('' when all finite)."""
    parts = [f"{count:,} {name} ({NONFINITE_WORDS[name]})"
             for name, count in (("NaN", nan), ("+Inf", posinf), ("-Inf", neginf)) if count]
    return ", ".join(parts)


def palette_colors(widget: QWidget | None = None) -> tuple[QColor, QColor]:
    """(background, foreground) of plots: the palette's base and text colours."""
    palette = widget.palette() if widget is not None else QApplication.palette()
    return palette.color(QPalette.ColorRole.Base), palette.color(QPalette.ColorRole.Text)


def style_plot(plot: pg.PlotWidget | pg.PlotItem, bottom: str = "", left: str = "",
               widget: QWidget | None = None) -> pg.PlotItem:
    """Palette colours, plain-number axes without SI scaling, and axis titles; returns the PlotItem."""
    import pyqtgraph as pg
    item = plot.getPlotItem() if isinstance(plot, pg.PlotWidget) else plot
    background, foreground = palette_colors(widget or (plot if isinstance(plot, QWidget) else None))
    if isinstance(plot, pg.PlotWidget):
        plot.setBackground(background)
    pen = pg.mkPen(foreground)
    for name in ("left", "bottom", "right", "top"):
        axis = item.getAxis(name)
        axis.enableAutoSIPrefix(False)
        axis.setPen(pen)
        axis.setTextPen(pen)
    if bottom:
        item.setLabel("bottom", bottom)
    if left:
        item.setLabel("left", left)
    return item


def plot_widget(bottom: str = "", left: str = "") -> pg.PlotWidget:
    """A PlotWidget styled by :func:`style_plot`."""
    import pyqtgraph as pg
    widget = pg.PlotWidget()
    style_plot(widget, bottom, left)
    return widget


def series_color(index: int, count: int) -> QColor:
    """The colour of series ``index`` of ``count`` (the same in the plot and in its legend)."""
    import pyqtgraph as pg
    color: QColor = pg.intColor(index, hues=max(3, count))  # pyqtgraph is untyped
    return color


def legend_html(entries: Iterable[tuple[QColor, str]]) -> str:
    """A legend as rich text: a coloured square and the (escaped) name per series."""
    from html import escape

    return "<br>".join(f"<span style='color:{color.name()}'>&#9632;</span> {escape(text)}"
                       for color, text in entries)

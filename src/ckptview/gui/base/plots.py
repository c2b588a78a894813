"""How every plot of the window looks: colours of the window's palette (light or dark), plain-number axes.

pyqtgraph draws black backgrounds and scales axes with SI prefixes ("value (x0.001)") by default; a
checkpoint browser wants the window's own colours and the numbers as they are, with the unit in the label.
The colours come from the theme in use (gui/base/palette.py) and follow it when the palette changes.
Legends are HTML text beside the plot (``legend_html``), so they never cover data.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QColor, QTextOption
from PySide6.QtWidgets import QFileDialog, QGraphicsTextItem, QGraphicsView, QWidget

from ckptview.gui.base.palette import Theme, on_palette_change, theme
from ckptview.gui.base.wrap import name_html

if TYPE_CHECKING:  # imported where a plot or values are first needed, not at start-up
    import pyqtgraph as pg

log = logging.getLogger(__name__)


# Non-finite values have colours of their own in every heat-map and in the values table: none of them is
# in the diverging blue-white-red map (CET-D1), so a NaN never reads as 0.0 nor an infinity as a large value.
# Each palette has its own shade of them, readable as text on its background (magenta, gold, green).
NONFINITE_KEYS = {"NaN": "nan", "+Inf": "posinf", "-Inf": "neginf"}
NONFINITE_WORDS = {"NaN": "magenta", "+Inf": "gold", "-Inf": "green"}


def nonfinite_colors() -> dict[str, str]:
    """{"NaN": "#rrggbb", "+Inf": ..., "-Inf": ...} of the palette in use."""
    current = theme()
    return {name: current.hex(key) for name, key in NONFINITE_KEYS.items()}


def nonfinite_caption(nan: int, posinf: int, neginf: int) -> str:
    """'1 NaN (magenta), 2 -Inf (green)': the non-finite counts and their colours ('' when all finite)."""
    parts = [f"{count:,} {name} ({NONFINITE_WORDS[name]})"
             for name, count in (("NaN", nan), ("+Inf", posinf), ("-Inf", neginf)) if count]
    return ", ".join(parts)


def palette_colors(widget: QWidget | None = None) -> tuple[QColor, QColor]:
    """(background, foreground) of plots in the palette in use."""
    current = theme()
    return current.color("plot_background"), current.color("plot_foreground")


def follow_background(view: pg.GraphicsView) -> None:
    """Paint a plot's view (a PlotWidget, a GraphicsLayoutWidget) in the plot background, now and after
    every palette change."""
    on_palette_change(view, lambda t: view.setBackground(t.color("plot_background")))


def style_plot(plot: pg.PlotWidget | pg.PlotItem, bottom: str = "", left: str = "",
               widget: QWidget | None = None) -> pg.PlotItem:
    """Palette colours, plain-number axes without SI scaling, and axis titles; returns the PlotItem.

    The colours follow the palette while `widget` (or the PlotWidget itself) lives."""
    import pyqtgraph as pg
    item = plot.getPlotItem() if isinstance(plot, pg.PlotWidget) else plot
    for name in ("left", "bottom", "right", "top"):
        item.getAxis(name).enableAutoSIPrefix(False)
    if bottom:
        item.setLabel("bottom", bottom)
    if left:
        item.setLabel("left", left)
    owner = widget if widget is not None else plot if isinstance(plot, QWidget) else None
    if isinstance(plot, pg.PlotWidget):
        follow_background(plot)
    if owner is not None:
        on_palette_change(owner, lambda t: _color_plot(item, t))
    else:
        _color_plot(item, theme())
    return item


def _color_plot(item: pg.PlotItem, current: Theme) -> None:
    """Axes, their titles and the plot's title in the theme's foreground."""
    foreground = current.color("plot_foreground")
    for name in ("left", "bottom", "right", "top"):
        _color_axis(item.getAxis(name), foreground)
    title = item.titleLabel
    if title is not None and title.text:
        title.setText(title.text, color=foreground.name())


def _color_axis(axis: pg.AxisItem, foreground: QColor) -> None:
    import pyqtgraph as pg

    pen = pg.mkPen(foreground)
    axis.setPen(pen)
    axis.setTextPen(pen)
    axis.labelStyle["color"] = foreground.name()
    if axis.labelText or axis.labelUnits:
        axis.label.setHtml(axis.labelString())


def style_color_bar(bar: pg.ColorBarItem, owner: QWidget) -> None:
    """A colour bar's axes (its numbers and title) in the plot foreground, following the palette."""
    on_palette_change(owner, lambda t: _color_plot(bar, t))


def plot_widget(bottom: str = "", left: str = "", name: str = "plot", bottom_axis: Any = None) -> pg.PlotWidget:
    """A PlotWidget styled by :func:`style_plot`, its axis titles left out while it is short, exported by
    its context menu as `name`.png/.svg; `bottom_axis`: an AxisItem of its own (whole numbers, ...)."""
    import pyqtgraph as pg
    widget = pg.PlotWidget(axisItems={"bottom": bottom_axis} if bottom_axis is not None else None)
    style_plot(widget, bottom, left)
    compact_when_short(widget)
    make_exportable(widget, name)
    return widget


SHORT_PLOT = 170  # pixels below which a plot's axis titles give their lines to the data


class _ShortPlotFilter(QObject):
    """Hides a plot view's axis titles while it is shorter than SHORT_PLOT (the numbers stay): on a
    640 px screen the titles took 40 of a histogram's 90 px; the legend below it says what is plotted."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Resize and isinstance(watched, QWidget):
            titles_if_tall(watched)
        return False


def titles_if_tall(view: QWidget) -> None:
    """Show the axis titles of `view`'s plots (a PlotWidget's one, a GraphicsLayoutWidget's stack) only
    while it is at least SHORT_PLOT tall; again after its plots change."""
    import pyqtgraph as pg

    if isinstance(view, pg.PlotWidget):
        items = [view.getPlotItem()]
    elif isinstance(view, pg.GraphicsLayoutWidget):
        items = [i for i in view.ci.items if isinstance(i, pg.PlotItem)]
    else:
        return
    tall = view.height() >= SHORT_PLOT
    for item in items:
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            if (axis.labelText or axis.labelUnits) and axis.label.isVisible() != tall:
                axis.showLabel(tall)


def compact_when_short(widget: pg.PlotWidget | pg.GraphicsLayoutWidget) -> None:
    """Leave out `widget`'s axis titles while it is short (see _ShortPlotFilter)."""
    widget.installEventFilter(_ShortPlotFilter(widget))


def series_color(index: int, count: int = 0) -> QColor:
    """The colour of series ``index`` (the same in the plot and in its legend), readable on the plot."""
    return theme().series_color(index)


def legend_html(entries: Iterable[tuple[QColor, str]]) -> str:
    """A legend as rich text: a coloured square and the name (escaped, cut and breakable) per series."""
    return "<br>".join(f"<span style='color:{color.name()}'>&#9632;</span> {name_html(text)}"
                       for color, text in entries)


# An empty plot says why in its middle, on no axis values: an empty view box otherwise shows a range
# pyqtgraph made up (0..1, or 0.01..0.1 on a log axis) as if it were the data's. The note is a child of the
# view box itself (pixel coordinates), so it needs no range and survives `plot.clear()`.
_NOTES: weakref.WeakKeyDictionary[Any, QGraphicsTextItem] = weakref.WeakKeyDictionary()


def say_nothing(plot: pg.PlotItem, message: str) -> None:
    """Show `message` in the middle of the empty `plot`, its axes' values hidden."""
    note = _NOTES.get(plot)
    if note is None:
        note = QGraphicsTextItem(plot.vb)
        note.setZValue(1000)
        _NOTES[plot] = note
        plot.vb.sigResized.connect(lambda _vb, note=note: _centre(note))
    note.setDefaultTextColor(palette_colors()[1])
    note.setPlainText(message)
    note.show()
    _centre(note)
    for side in ("left", "bottom"):
        plot.getAxis(side).setStyle(showValues=False)


def _centre(note: QGraphicsTextItem) -> None:
    box = note.parentItem()
    if box is None:
        return
    rect = box.boundingRect()
    note.setTextWidth(max(60.0, rect.width() - 16))
    doc = note.document()
    doc.setDefaultTextOption(QTextOption(Qt.AlignmentFlag.AlignCenter))
    size = doc.size()
    note.setPos(rect.center().x() - size.width() / 2, rect.center().y() - size.height() / 2)


def say_drawn(plot: pg.PlotItem) -> None:
    """Undo `say_nothing`: the note goes and the axes show their values."""
    note = _NOTES.get(plot)
    if note is not None:
        note.hide()
    for side in ("left", "bottom"):
        plot.getAxis(side).setStyle(showValues=True)


def nothing_text(plot: pg.PlotItem) -> str:
    """What an empty plot says ('' when it draws data)."""
    note = _NOTES.get(plot)
    return note.toPlainText() if note is not None and note.isVisible() else ""


# One way to export every plot (histograms, heat-maps, spectra, the series tab's plots): the plot's context
# menu (right-click) offers "Export plot as PNG or SVG…", in place of pyqtgraph's own export dialog.
EXPORT_TEXT = "Export plot as PNG or SVG…"
EXPORT_NAME = "exportPlot"


def make_exportable(view: QWidget, name: str) -> QAction:
    """Give `view`'s context menu the export action (the file is called `name`.png by default); returns it.
    `view` is a pyqtgraph view (the action joins its scene's menu) or any widget that paints a chart (the
    summary's size bars: the action is its context menu)."""
    action = QAction(EXPORT_TEXT, view)
    action.setObjectName(EXPORT_NAME)
    action.setToolTip(f"Save this plot ({name}) as a PNG image or an SVG drawing")
    action.triggered.connect(lambda _checked=False: ask_export_plot(view, name))
    action.setData(name)
    if isinstance(view, QGraphicsView):
        view.scene().contextMenu = [action]  # type: ignore[attr-defined]  # pyqtgraph's scene
    else:
        view.addAction(action)
        view.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
    return action


def export_plot(view: QWidget, path: str) -> None:
    """Write everything `view` draws to `path`: an SVG drawing for a .svg name, else a PNG image."""
    if not isinstance(view, QGraphicsView):  # a widget that paints itself: Qt draws it into either
        if path.lower().endswith(".svg"):
            _qt_svg(view, path)
        elif not view.grab().save(path, "PNG"):
            raise OSError(f"cannot write {path}")
        return
    from pyqtgraph.exporters import ImageExporter, SVGExporter

    scene = view.scene()
    if not path.lower().endswith(".svg"):
        ImageExporter(scene).export(path)
        return
    try:
        SVGExporter(scene).export(path)
    except Exception:  # noqa: BLE001 - pyqtgraph 0.14 cannot read the paths Qt 6.11 writes: Qt's own drawing
        log.debug("pyqtgraph's SVG export failed; drawing with QSvgGenerator", exc_info=True)
        _qt_svg(view, path)


def _qt_svg(view: QWidget, path: str) -> None:
    """What `view` shows, drawn into an SVG file by Qt's own generator."""
    from PySide6.QtGui import QPainter
    from PySide6.QtSvg import QSvgGenerator

    generator = QSvgGenerator()
    generator.setFileName(path)
    generator.setSize(view.size())
    generator.setViewBox(view.rect())
    generator.setTitle(view.windowTitle() or "ckptview plot")
    if not isinstance(view, QGraphicsView):
        view.render(generator)  # a widget draws itself into the generator (a paint device)
        return
    painter = QPainter(generator)
    try:
        view.render(painter)
    finally:
        painter.end()


def ask_export_plot(view: QWidget, name: str) -> None:
    """Ask where (PNG or SVG), then export."""
    path, chosen = QFileDialog.getSaveFileName(view, "Export plot", f"{name}.png",
                                               "PNG image (*.png);;SVG drawing (*.svg)")
    if not path:
        return
    if not path.lower().endswith((".png", ".svg")):
        path += ".svg" if "svg" in chosen.lower() else ".png"
    export_plot(view, path)


def export_actions(widget: QWidget) -> list[QAction]:
    """The export actions of every plot inside `widget` (tests trigger them)."""
    return widget.findChildren(QAction, EXPORT_NAME)

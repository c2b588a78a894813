"""The drawing of a laid-out graph view: boxes, labels, edges and frames as items Qt paints itself.

Nothing here paints in Python: boxes are `QGraphicsRectItem`s, labels `QGraphicsSimpleTextItem`s, edges a
few hundred `QGraphicsPathItem`s (one path per band of the drawing, so the BSP index culls them), all children
of four layer items. Level of detail hides a whole layer in one call (labels when zoomed out; boxes, edges
and frames below that, replaced by one picture of the whole drawing rendered once). Colours come from the
widget's palette (readable on light and dark themes); NaN/Inf boxes are hatched red whatever the figure.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QImage, QPainter, QPainterPath, QPalette, QPen, QPixmap
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsPathItem,
    QGraphicsPixmapItem,
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
)

from ckptview.core.gc_policy import paused_gc
from ckptview.core.graph.collapse import GROUP, View, group_label
from ckptview.core.graph.layout import GROUP_MARK, MAX_CHARS, Placed
from ckptview.core.graph.overlay import BoxFigure, Scale, colour_rgb

INDEX = 0  # item data: the view item a box or label stands for
FRAME = 1  # item data: the module path of a frame (an expanded module)
BAND = 2000.0  # scene units of height per edge path item
OVERVIEW_PIXELS = 4096  # the long side of the zoomed-out picture
BADGE = 16.0  # the "+" corner of a collapsed module's box: a click there expands it
NAN_COLOR = QColor(214, 39, 40)


def colour_at(t: float) -> QColor:
    """The colour map at `t` in [0, 1] (the core's: viridis; boxes pick their text colour by luminance)."""
    return QColor(*colour_rgb(t))


def text_colour_on(fill: QColor) -> QColor:
    """Black or white, whichever reads on `fill`."""
    luminance = 0.2126 * fill.redF() + 0.7152 * fill.greenF() + 0.0722 * fill.blueF()
    return QColor(0, 0, 0) if luminance > 0.45 else QColor(255, 255, 255)


class GraphScene(QGraphicsScene):
    """One laid-out view of a graph; `boxes[i]`/`labels[i]` draw `view.items[i]`."""

    def __init__(self, palette: QPalette) -> None:
        super().__init__()
        self.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
        self.palette_ = palette
        self.view: View | None = None
        self.placed: Placed | None = None
        self.boxes: list[QGraphicsRectItem] = []
        self.labels: dict[int, QGraphicsSimpleTextItem] = {}  # built for the bands seen at label level
        self._bands: dict[int, list[int]] = {}  # band of the drawing -> the boxes whose top is in it
        self._frame_bands: dict[int, list[tuple[str, float, float]]] = {}
        self._built: set[int] = set()
        self.marked: dict[int, str] = {}  # item -> "selected" | "match"
        self.overview: QGraphicsPixmapItem | None = None
        self.font_ = QFont()
        self.font_.setPixelSize(11)
        self.fills: list[QColor | None] = []

    def _layer(self, z: float) -> QGraphicsRectItem:
        # An empty rect paints nothing: a parent to hide its children at once. It joins the scene when the
        # drawing is built (`draw`): 45,000 items added to a scene one by one each update its index and
        # cost seconds; added with their parent at the end, they cost a fraction of that.
        layer = QGraphicsRectItem()
        layer.setPen(QPen(Qt.PenStyle.NoPen))
        layer.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents)
        layer.setZValue(z)
        return layer

    def draw(self, view: View, placed: Placed) -> None:
        """Replace the drawing with `view` laid out as `placed` (labels come when first seen)."""
        with paused_gc():  # 25,000 wrappers: left on, the collector's passes cost more than the items
            self._draw(view, placed)

    def _draw(self, view: View, placed: Placed) -> None:
        self.clear()
        self.view, self.placed, self.marked, self.overview = view, placed, {}, None
        pal = self.palette_
        text, base, mid = pal.color(QPalette.ColorRole.Text), pal.color(QPalette.ColorRole.Base), pal.color(
            QPalette.ColorRole.Mid)
        self.frame_layer, self.edge_layer = self._layer(0), self._layer(1)
        self.box_layer, self.label_layer = self._layer(2), self._layer(3)
        self._frame_bands = {}
        self._built = set()
        self._title_brush = QBrush(_mix(text, base, 0.3))  # a module's name: quieter than a box's, still read
        frame_pen = QPen(mid, 1, Qt.PenStyle.DashLine)
        frame_pen.setCosmetic(True)
        for (path, _), (x, y, w, h) in zip(view.frames, placed.frames, strict=True):
            if w <= 0:
                continue
            frame = QGraphicsRectItem(x, y, w, h, self.frame_layer)
            frame.setPen(frame_pen)
            frame.setData(FRAME, path)
            frame.setToolTip(f"{path} (double-click to collapse)")
            self._frame_bands.setdefault(int(y // BAND), []).append((path, x, y))
        edge_pen = QPen(_mix(text, base, 0.55), 1)
        edge_pen.setCosmetic(True)
        # Edges from a box every layer reads (rotary cos/sin, the mask) run straight past the layers between:
        # fainter, so that hundreds of them side by side read as one band, not as the program's flow.
        broadcast_pen = QPen(_mix(text, base, 0.85), 1)
        broadcast_pen.setCosmetic(True)
        bands: dict[tuple[bool, int], QPainterPath] = {}
        for e, line in enumerate(placed.edges):
            band = bands.setdefault((e in placed.straight, int(line[0][1] // BAND)), QPainterPath())
            band.moveTo(*line[0])
            for point in line[1:]:
                band.lineTo(*point)
        for (broadcast, _), band_path in bands.items():
            edge = QGraphicsPathItem(band_path, self.edge_layer)
            edge.setPen(broadcast_pen if broadcast else edge_pen)
        box_pen = QPen(mid, 1)
        box_pen.setCosmetic(True)
        group_brush, node_brush = QBrush(_mix(base, mid, 0.35)), QBrush(base)
        self.boxes, self.labels = [], {}
        self.fills = [None] * len(view.items)
        self._bands = {}
        for i, (item, (x, y, w, h)) in enumerate(zip(view.items, placed.boxes, strict=True)):
            box = QGraphicsRectItem(x, y, w, h, self.box_layer)
            box.setPen(box_pen)
            box.setBrush(group_brush if item.kind == GROUP else node_brush)
            box.setData(INDEX, i)
            self.boxes.append(box)
            self._bands.setdefault(int(y // BAND), []).append(i)
        for layer in (self.frame_layer, self.edge_layer, self.box_layer, self.label_layer):
            self.addItem(layer)
        margin = 40.0
        self.setSceneRect(QRectF(-margin, -margin, placed.width + 2 * margin, placed.height + 2 * margin))

    # -- labels, built where they are first seen ---------------------------------------------------------
    def ensure_labels(self, rect: QRectF) -> int:
        """Build the labels of the boxes and frames in the bands `rect` touches; returns how many were built.

        Labels are drawn only when zoomed in, where a view shows a few hundred boxes at most: building
        all 20,000 of them up front was most of the first paint (2 s)."""
        if self.view is None or self.placed is None:
            return 0
        built = 0
        view, boxes = self.view, self.placed.boxes
        text = self.palette_.color(QPalette.ColorRole.Text)
        for band in range(int(rect.top() // BAND) - 1, int(rect.bottom() // BAND) + 1):
            if band in self._built:
                continue
            self._built.add(band)
            for i in self._bands.get(band, ()):
                item = view.items[i]
                x, y, _, h = boxes[i]
                first = item.label
                second = item.detail + GROUP_MARK if item.kind == GROUP else item.detail
                label = QGraphicsSimpleTextItem(f"{first[:MAX_CHARS]}\n{second[:MAX_CHARS]}", self.label_layer)
                label.setFont(self.font_)
                fill = self.fills[i]
                label.setBrush(QBrush(text_colour_on(fill) if fill is not None else text))
                label.setPos(x + 6, y + (h - 28) / 2)
                label.setData(INDEX, i)
                self.labels[i] = label
                built += 1
            for path, x, y in self._frame_bands.get(band, ()):
                title = QGraphicsSimpleTextItem(f"− {group_label(path)}", self.label_layer)
                title.setFont(self.font_)
                title.setBrush(self._title_brush)
                title.setPos(x + 4, y + 2)
                title.setData(FRAME, path)
                built += 1
        return built

    def ensure_all_labels(self) -> None:
        """Every label (an export draws the whole drawing)."""
        self.ensure_labels(self.sceneRect())

    # -- level of detail -----------------------------------------------------------------------------
    def set_detail(self, level: int) -> None:
        """2: everything; 1: no labels; 0: the picture of the whole drawing alone."""
        if not self.boxes and self.view is None:
            return
        if level == 0 and self.overview is None:
            self.overview = self._render_overview()
        for layer in (self.frame_layer, self.edge_layer, self.box_layer):
            layer.setVisible(level >= 1)
        self.label_layer.setVisible(level >= 2)
        if self.overview is not None:
            self.overview.setVisible(level == 0)

    def _render_overview(self) -> QGraphicsPixmapItem:
        rect = self.sceneRect()
        factor = OVERVIEW_PIXELS / max(rect.width(), rect.height())
        factor = min(factor, 1.0)
        image = QImage(max(1, int(rect.width() * factor)), max(1, int(rect.height() * factor)),
                       QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        self.label_layer.setVisible(False)
        painter = QPainter(image)
        self.render(painter, QRectF(image.rect()), rect)
        painter.end()
        item = QGraphicsPixmapItem(QPixmap.fromImage(image))
        item.setPos(rect.topLeft())
        item.setScale(1 / factor)
        item.setZValue(4)
        item.setTransformationMode(Qt.TransformationMode.SmoothTransformation)
        self.addItem(item)
        return item

    def drop_overview(self) -> None:
        """Forget the zoomed-out picture (colours changed): it is rendered again when next needed."""
        if self.overview is not None:
            self.removeItem(self.overview)
            self.overview = None

    # -- colours and marks ---------------------------------------------------------------------------
    def colour(self, figures: Sequence[BoxFigure] | None, scale: Scale | None, nonfinite_figure: bool) -> None:
        """Fill each box by its figure on `scale` (None: the plain look); NaN/Inf boxes hatched red."""
        if self.view is None:
            return
        pal = self.palette_
        base, mid, text = (pal.color(QPalette.ColorRole.Base), pal.color(QPalette.ColorRole.Mid),
                           pal.color(QPalette.ColorRole.Text))
        plain = {GROUP: QBrush(_mix(base, mid, 0.35)), "node": QBrush(base)}
        nan_brush = QBrush(NAN_COLOR, Qt.BrushStyle.Dense3Pattern)
        for i, item in enumerate(self.view.items):
            box, label = self.boxes[i], self.labels.get(i)
            figure = figures[i] if figures is not None else None
            fill: QColor | None = None
            if figure is not None and figure.nonfinite:
                box.setBrush(nan_brush)
                fill = NAN_COLOR
            elif figure is not None and figure.value is not None and scale is not None:
                fill = colour_at(0.0 if nonfinite_figure else scale.position(figure.value))
                box.setBrush(QBrush(fill))
            else:
                box.setBrush(plain[GROUP if item.kind == GROUP else "node"])
            self.fills[i] = fill
            if label is not None:
                label.setBrush(QBrush(text_colour_on(fill) if fill is not None else text))
        self.drop_overview()

    def mark(self, marks: dict[int, str]) -> None:
        """Outline the boxes of `marks` (selected: the highlight colour, thick; match: dashed as well)."""
        pal = self.palette_
        plain = QPen(pal.color(QPalette.ColorRole.Mid), 1)
        plain.setCosmetic(True)
        for i in self.marked:
            if i < len(self.boxes) and i not in marks:
                self.boxes[i].setPen(plain)
                self.boxes[i].setZValue(0)
        for i, how in marks.items():
            pen = QPen(pal.color(QPalette.ColorRole.Highlight), 3,
                       Qt.PenStyle.SolidLine if how == "selected" else Qt.PenStyle.DashLine)
            pen.setCosmetic(True)
            self.boxes[i].setPen(pen)
            self.boxes[i].setZValue(1)
        self.marked = dict(marks)

    def index_at(self, item: QGraphicsItem | None) -> int | None:
        """The view item a box or label stands for."""
        if item is None:
            return None
        value = item.data(INDEX)
        return value if isinstance(value, int) else None

    def frame_at(self, item: QGraphicsItem | None) -> str | None:
        """The module path of a frame (or its title)."""
        if item is None:
            return None
        value = item.data(FRAME)
        return value if isinstance(value, str) else None

    def in_badge(self, index: int, point: QPointF) -> bool:
        """True when `point` is in the "+" corner of collapsed module `index`."""
        if self.view is None or self.view.items[index].kind != GROUP:
            return False
        rect = self.boxes[index].rect()
        return point.x() >= rect.right() - BADGE * 1.5


def _mix(a: QColor, b: QColor, f: float) -> QColor:
    return QColor(round(a.red() + (b.red() - a.red()) * f), round(a.green() + (b.green() - a.green()) * f),
                  round(a.blue() + (b.blue() - a.blue()) * f))

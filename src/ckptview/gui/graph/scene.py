"""The drawing of a laid-out graph view: boxes, labels, edges with their shapes, and frames, as items Qt paints.

Nothing here paints in Python: boxes are `QGraphicsRectItem`s, labels `QGraphicsSimpleTextItem`s, edges a
few hundred `QGraphicsPathItem`s (one path per band of the drawing, so the BSP index culls them), all children
of layer items. Level of detail hides a whole layer in one call, never shrinks text below a readable size:
edge labels show from the zoom where their text is `MIN_TEXT_PX` high, box labels likewise; below that boxes
and edges alone, and zoomed out further one picture of the whole drawing rendered once.

Colours come from the widget's palette and are checked, not hoped for: text is at least 4.5:1 against what it
is drawn on, edges and frames 3:1 against the background, in light and dark (`readable`). Frame titles sit in
a strip above everything inside their frame, and a title that would cross another one moves aside or is left
out (the frame's tooltip names it). An inferred graph (names and shapes only) is drawn dashed. NaN/Inf boxes
are hatched red whatever the figure; a comparison's added, removed and reshaped nodes are outlined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from PySide6.QtCore import QPointF, QRectF, QSizeF, Qt
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontMetricsF,
    QImage,
    QPainter,
    QPainterPath,
    QPalette,
    QPen,
    QPixmap,
)
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
from ckptview.core.graph.dot import shape_text
from ckptview.core.graph.layout import GROUP_MARK, MAX_CHARS, Placed
from ckptview.core.graph.model import ModelGraph
from ckptview.core.graph.overlay import BoxFigure, Scale, colour_rgb
from ckptview.gui.base.palette import contrast, theme

INDEX = 0  # item data: the view item a box or label stands for
FRAME = 1  # item data: the module path of a frame (an expanded module)
BAND = 2000.0  # scene units of height per edge path item
LABEL_SPOTS = (0.5, 0.3, 0.7, 0.15, 0.85)  # where along its first segment an edge's label may sit, in turn
LABEL_ROW = 32.0  # scene units of height per row of the placed edge labels' index (taller than a label)
OVERVIEW_PIXELS = 4096  # the long side of the zoomed-out picture
BADGE = 16.0  # the "+" corner of a collapsed module's box: a click there expands it
NAN_COLOR = QColor(214, 39, 40)
LABEL_PX, EDGE_LABEL_PX = 11, 9  # text sizes in scene units (pixels at 1:1)
MIN_TEXT_PX = 8.0  # text is hidden below this many pixels on screen, never drawn smaller
TEXT_CONTRAST, LINE_CONTRAST = 4.5, 3.0
STATUS_COLOURS = {"added": "good", "removed": "error", "shape": "warning"}  # a comparison's outlines (theme keys)


def colour_at(t: float) -> QColor:
    """The colour map at `t` in [0, 1] (the core's: viridis; boxes pick their text colour by luminance)."""
    return QColor(*colour_rgb(t))


def text_colour_on(fill: QColor) -> QColor:
    """Black or white, whichever reads on `fill`."""
    return QColor(0, 0, 0) if contrast(QColor(0, 0, 0), fill) >= contrast(QColor(255, 255, 255), fill) else \
        QColor(255, 255, 255)


def readable(fore: QColor, back: QColor, least: float, quiet: float = 0.0) -> QColor:
    """`fore` mixed toward `back` by up to `quiet` (a quieter line or caption), no further than keeps `least`
    contrast against `back`; `fore` itself where even it falls short (then black or white)."""
    for step in range(int(quiet * 20), -1, -1):
        mixed = _mix(fore, back, step / 20)
        if contrast(mixed, back) >= least:
            return mixed
    return fore if contrast(fore, back) >= least else text_colour_on(back)


def label_lines(first: str, second: str) -> str:
    """A box's text: its first line, and its second where there is one."""
    return f"{first[:MAX_CHARS]}\n{second[:MAX_CHARS]}" if second else first[:MAX_CHARS]


class GraphScene(QGraphicsScene):
    """One laid-out view of a graph; `boxes[i]`/`labels[i]` draw `view.items[i]`."""

    def __init__(self, palette: QPalette) -> None:
        super().__init__()
        self.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
        self.palette_ = palette
        self.view: View | None = None
        self.placed: Placed | None = None
        self.graph: ModelGraph | None = None  # what the edges' labels name shapes from
        self.dashed = False  # an inferred graph: names and shapes only, drawn dashed
        self.boxes: list[QGraphicsRectItem] = []
        self.labels: dict[int, QGraphicsSimpleTextItem] = {}  # built for the bands seen at label level
        self.edge_labels: list[QGraphicsSimpleTextItem] = []
        self.titles: list[QGraphicsSimpleTextItem] = []
        self._bands: dict[int, list[int]] = {}  # band of the drawing -> the boxes whose top is in it
        self._edge_bands: dict[int, list[int]] = {}
        self._said: set[tuple[int, int, int]] = set()  # (tensor, where it leaves its box): labelled
        self._label_rects: dict[int, list[QRectF]] = {}  # the edge labels placed, by row
        self._frame_bands: dict[int, list[tuple[str, QRectF]]] = {}
        self._title_rects: list[QRectF] = []
        self._built: set[int] = set()
        self.marked: dict[int, str] = {}  # item -> "selected" | "match"
        self.status: dict[int, str] = {}  # item -> "added" | "removed" | "shape" (a comparison's)
        self.overview: QGraphicsPixmapItem | None = None
        self.font_ = QFont()
        self.font_.setPixelSize(LABEL_PX)
        self.edge_font = QFont()
        self.edge_font.setPixelSize(EDGE_LABEL_PX)
        self.fills: list[QColor | None] = []
        self.colours = self._colours()

    def _colours(self) -> dict[str, QColor]:
        """The drawing's colours from the palette, each checked against what it is drawn on."""
        pal = self.palette_
        text, base, mid = (pal.color(QPalette.ColorRole.Text), pal.color(QPalette.ColorRole.Base),
                           pal.color(QPalette.ColorRole.Mid))  # mid: the fill of a closed module
        group = _mix(base, mid, 0.35)
        return {"text": readable(text, group, TEXT_CONTRAST), "base": base, "group": group,
                "title": readable(text, base, TEXT_CONTRAST, 0.3), "edge": readable(text, base, LINE_CONTRAST, 0.5),
                "edge_text": readable(text, base, TEXT_CONTRAST, 0.2), "frame": readable(text, base, LINE_CONTRAST, 0.65),
                "box": readable(text, base, LINE_CONTRAST, 0.6), "highlight": readable(
                    pal.color(QPalette.ColorRole.Highlight), base, LINE_CONTRAST),
                **{status: readable(theme().color(key), base, LINE_CONTRAST) for status, key in STATUS_COLOURS.items()}}

    def _pen(self, colour: QColor, width: float = 1.0, style: Qt.PenStyle = Qt.PenStyle.SolidLine) -> QPen:
        pen = QPen(colour, width, Qt.PenStyle.DashLine if self.dashed and style == Qt.PenStyle.SolidLine else style)
        pen.setCosmetic(True)
        return pen

    def _layer(self, z: float) -> QGraphicsRectItem:
        # An empty rect paints nothing: a parent to hide its children at once. It joins the scene when the
        # drawing is built (`draw`): 45,000 items added to a scene one by one each update its index and
        # cost seconds; added with their parent at the end, they cost a fraction of that.
        layer = QGraphicsRectItem()
        layer.setPen(QPen(Qt.PenStyle.NoPen))
        layer.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents)
        layer.setZValue(z)
        return layer

    def draw(self, view: View, placed: Placed, graph: ModelGraph | None = None, dashed: bool = False) -> None:
        """Replace the drawing with `view` laid out as `placed` (labels come when first seen); `graph`: what the
        edges' shapes are read from; `dashed`: an inferred graph."""
        with paused_gc():  # 25,000 wrappers: left on, the collector's passes cost more than the items
            self.graph, self.dashed = graph, dashed
            self._draw(view, placed)

    def _draw(self, view: View, placed: Placed) -> None:
        self.clear()
        self.colours = self._colours()
        c = self.colours
        self.view, self.placed, self.marked, self.status, self.overview = view, placed, {}, {}, None
        self.frame_layer, self.edge_layer = self._layer(0), self._layer(1)
        self.box_layer, self.label_layer, self.edge_label_layer = self._layer(2), self._layer(3), self._layer(3)
        self._frame_bands, self._edge_bands, self._built, self._said = {}, {}, set(), set()
        self._label_rects = {}
        self.titles, self.edge_labels, self._title_rects = [], [], []
        frame_pen = self._pen(c["frame"], 1, Qt.PenStyle.DashLine)
        for (path, _), (x, y, w, h) in zip(view.frames, placed.frames, strict=True):
            if w <= 0:
                continue
            frame = QGraphicsRectItem(x, y, w, h, self.frame_layer)
            frame.setPen(frame_pen)
            frame.setData(FRAME, path)
            frame.setToolTip(f"{path} (double-click to close)")
            self._frame_bands.setdefault(int(y // BAND), []).append((path, QRectF(x, y, w, h)))
        # Edges from a box every layer reads (rotary cos/sin, the mask) run straight past the layers between:
        # dotted, so that hundreds of them side by side read as one band, not as the program's flow.
        bands: dict[tuple[bool, int], QPainterPath] = {}
        for e, line in enumerate(placed.edges):
            band = bands.setdefault((e in placed.straight, int(line[0][1] // BAND)), QPainterPath())
            band.moveTo(*line[0])
            for point in line[1:]:
                band.lineTo(*point)
            self._edge_bands.setdefault(int(line[0][1] // BAND), []).append(e)
        for (broadcast, _), band_path in bands.items():
            edge = QGraphicsPathItem(band_path, self.edge_layer)
            edge.setPen(self._pen(c["edge"], 1, Qt.PenStyle.DotLine if broadcast else Qt.PenStyle.SolidLine))
        box_pen = self._pen(c["box"])
        group_brush, node_brush = QBrush(c["group"]), QBrush(c["base"])
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
        for layer in (self.frame_layer, self.edge_layer, self.box_layer, self.label_layer, self.edge_label_layer):
            self.addItem(layer)
        margin = 40.0
        self.setSceneRect(QRectF(-margin, -margin, placed.width + 2 * margin, placed.height + 2 * margin))

    # -- labels, built where they are first seen ---------------------------------------------------------
    def ensure_labels(self, rect: QRectF) -> int:
        """Build the labels of the boxes, edges and frames in the bands `rect` touches; returns how many.

        Labels are drawn only when zoomed in, where a view shows a few hundred boxes at most: building
        all 20,000 of them up front was most of the first paint (2 s)."""
        if self.view is None or self.placed is None:
            return 0
        built = 0
        for band in range(int(rect.top() // BAND) - 1, int(rect.bottom() // BAND) + 1):
            if band in self._built:
                continue
            self._built.add(band)
            built += self._box_labels(band) + self._edge_texts(band) + self._frame_titles(band)
        return built

    def _box_labels(self, band: int) -> int:
        assert self.view is not None and self.placed is not None
        view, boxes = self.view, self.placed.boxes
        for i in self._bands.get(band, ()):
            item = view.items[i]
            x, y, _, h = boxes[i]
            second = item.detail + GROUP_MARK if item.kind == GROUP else item.detail
            label = QGraphicsSimpleTextItem(label_lines(item.label, second), self.label_layer)
            label.setFont(self.font_)
            fill = self.fills[i]
            label.setBrush(QBrush(text_colour_on(fill) if fill is not None else self.colours["text"]))
            label.setPos(x + 6, y + (h - label.boundingRect().height()) / 2)
            label.setData(INDEX, i)
            self.labels[i] = label
        return len(self._bands.get(band, ()))

    def _edge_texts(self, band: int) -> int:
        """Each edge's tensor (shape and dtype) beside its first segment; a tensor several boxes read leaves its
        box by one point, so it is said once there, not once per reader on top of each other."""
        if self.graph is None or self.view is None or self.placed is None or not self.view.sources:
            return 0
        metrics = QFontMetricsF(self.edge_font)
        count = 0
        for e in self._edge_bands.get(band, ()):
            if e in self.placed.straight or e >= len(self.view.sources):
                continue
            (x0, y0), (x1, y1) = self.placed.edges[e][0], self.placed.edges[e][1]
            said = (self.view.sources[e], round(x0), round(y0))
            if said in self._said:
                continue
            self._said.add(said)
            text = shape_text(self.graph.nodes[self.view.sources[e]])
            if not text:
                continue
            label = QGraphicsSimpleTextItem(text, self.edge_label_layer)
            label.setFont(self.edge_font)
            label.setBrush(QBrush(self.colours["edge_text"]))
            size = QSizeF(metrics.horizontalAdvance(text), metrics.height())
            label.setPos(self._free_spot((x0, y0), (x1, y1), size))
            self.edge_labels.append(label)
            count += 1
        return count

    def _free_spot(self, start: tuple[float, float], end: tuple[float, float], size: QSizeF) -> QPointF:
        """Where along an edge's first segment its label covers no label said before (crossing edges put
        their midpoints side by side); the middle when every spot is taken."""
        (x0, y0), (x1, y1) = start, end
        spots = [QPointF(x0 + (x1 - x0) * t + 4, y0 + (y1 - y0) * t - size.height() / 2) for t in LABEL_SPOTS]
        spot = next((p for p in spots if not self._covers(QRectF(p, size))), spots[0])
        self._label_rects.setdefault(int(spot.y() // LABEL_ROW), []).append(QRectF(spot, size))
        return spot

    def _covers(self, rect: QRectF) -> bool:
        rows = range(int(rect.top() // LABEL_ROW) - 1, int(rect.bottom() // LABEL_ROW) + 1)
        return any(rect.intersects(placed) for row in rows for placed in self._label_rects.get(row, ()))

    def _frame_titles(self, band: int) -> int:
        """Each frame's title in its top strip; one that would cross a title already drawn moves right past
        it, or is left out when its frame has no room (its tooltip still names it)."""
        metrics = QFontMetricsF(self.font_)
        count = 0
        for path, rect in self._frame_bands.get(band, ()):
            text = f"− {group_label(path)}"
            width = metrics.horizontalAdvance(text) + 2
            spot = QRectF(rect.left() + 4, rect.top() + 2, width, metrics.height())
            for taken in sorted(self._title_rects, key=lambda r: r.left()):
                if spot.intersects(taken):
                    spot.moveLeft(taken.right() + 8)
            if spot.right() > rect.right() - 4:
                continue
            title = QGraphicsSimpleTextItem(text, self.label_layer)
            title.setFont(self.font_)
            title.setBrush(QBrush(self.colours["title"]))
            title.setPos(spot.topLeft())
            title.setData(FRAME, path)
            self.titles.append(title)
            self._title_rects.append(spot)
            count += 1
        return count

    def ensure_all_labels(self) -> None:
        """Every label (an export draws the whole drawing)."""
        self.ensure_labels(self.sceneRect())

    # -- level of detail -----------------------------------------------------------------------------
    def set_detail(self, level: int) -> None:
        """3: everything, edge labels too; 2: box labels; 1: boxes and edges; 0: the picture of the drawing."""
        if not self.boxes and self.view is None:
            return
        if level == 0 and self.overview is None:
            self.overview = self._render_overview()
        for layer in (self.frame_layer, self.edge_layer, self.box_layer):
            layer.setVisible(level >= 1)
        self.label_layer.setVisible(level >= 2)
        self.edge_label_layer.setVisible(level >= 3)
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
        self.edge_label_layer.setVisible(False)
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
        plain = {GROUP: QBrush(self.colours["group"]), "node": QBrush(self.colours["base"])}
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
                label.setBrush(QBrush(text_colour_on(fill) if fill is not None else self.colours["text"]))
        self.drop_overview()

    def mark(self, marks: dict[int, str]) -> None:
        """Outline the boxes of `marks` (selected: the highlight colour, thick; match: dashed as well)."""
        for i in self.marked:
            if i < len(self.boxes) and i not in marks:
                self._outline(i)
        for i, how in marks.items():
            style = Qt.PenStyle.SolidLine if how == "selected" else Qt.PenStyle.DashLine
            self.boxes[i].setPen(self._pen(self.colours["highlight"], 3, style))
            self.boxes[i].setZValue(1)
        self.marked = dict(marks)

    def set_status(self, status: Mapping[int, str]) -> None:
        """A comparison's marks: boxes added, removed or changed in shape outlined in their colours."""
        self.status = dict(status)
        for i in range(len(self.boxes)):
            if i not in self.marked:
                self._outline(i)

    def _outline(self, i: int) -> None:
        how = self.status.get(i)
        if how in STATUS_COLOURS:
            style = Qt.PenStyle.DashLine if how == "removed" else Qt.PenStyle.SolidLine
            self.boxes[i].setPen(self._pen(self.colours[how], 2.5, style))
        else:
            self.boxes[i].setPen(self._pen(self.colours["box"]))
        self.boxes[i].setZValue(0)

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

"""The graph's view: pan by dragging, zoom with the wheel (or +/-), level of detail by zoom, clicks, hover and
the keyboard (arrows between boxes, Enter to open, Backspace to close: `navigated`).

Per frame nothing in Python depends on the graph's size: Qt paints the items the BSP index finds in the
exposed area, and a zoom changes at most which layers are shown (`GraphScene.set_detail`). Text is shown
from the zoom where it is `MIN_TEXT_PX` high on screen and hidden below it: never drawn smaller.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QKeyEvent, QMouseEvent, QPainter, QResizeEvent, QWheelEvent
from PySide6.QtWidgets import QFrame, QGraphicsView, QToolTip, QWidget

from ckptview.gui.graph.scene import EDGE_LABEL_PX, LABEL_PX, MIN_TEXT_PX, GraphScene

LABELS_FROM = MIN_TEXT_PX / LABEL_PX  # scale from which box labels are drawn (their text at least 8 px high)
EDGE_LABELS_FROM = MIN_TEXT_PX / EDGE_LABEL_PX  # and edges' shapes (smaller text: from a closer zoom)
BOXES_FROM = 0.04  # scale from which boxes and edges are drawn; below, the picture of the whole drawing
KEYS = {Qt.Key.Key_Up: "up", Qt.Key.Key_Down: "down", Qt.Key.Key_Left: "left", Qt.Key.Key_Right: "right",
        Qt.Key.Key_Return: "open", Qt.Key.Key_Enter: "open", Qt.Key.Key_Backspace: "close"}
MIN_SCALE, MAX_SCALE = 0.0005, 4.0


class GraphCanvas(QGraphicsView):
    """Emits `clicked(index, expand)` on a box (expand: its "+" corner or a double-click), `frame_clicked`
    on an expanded module's frame (a double-click), and asks `tooltip(index)` for hover text."""

    clicked = Signal(int, bool)
    frame_clicked = Signal(str)
    background_clicked = Signal()
    navigated = Signal(str)  # "up" | "down" | "left" | "right" | "open" | "close"
    moved = Signal()  # the part of the drawing shown changed (a pan, a zoom, a resize)

    def __init__(self, scene: GraphScene, parent: QWidget | None = None) -> None:
        super().__init__(scene, parent)
        self.graph_scene = scene
        self.setObjectName("graphCanvas")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.MinimalViewportUpdate)
        self.setOptimizationFlags(QGraphicsView.OptimizationFlag.DontSavePainterState
                                  | QGraphicsView.OptimizationFlag.DontAdjustForAntialiasing)
        self.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        self.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        self.tooltip_text = lambda index: ""  # set by the page: the hover text of box `index`
        self.level = -1
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

    @property
    def scale_factor(self) -> float:
        """The current zoom (scene units to pixels)."""
        return self.transform().m11()

    def zoom(self, factor: float) -> None:
        """Zoom by `factor` around the mouse (or the centre), within the limits."""
        current = self.scale_factor
        target = min(MAX_SCALE, max(MIN_SCALE, current * factor))
        if target != current:
            self.scale(target / current, target / current)
        self._update_detail()

    def set_zoom(self, scale: float) -> None:
        """Zoom to exactly `scale`."""
        scale = min(MAX_SCALE, max(MIN_SCALE, scale))
        self.resetTransform()
        self.scale(scale, scale)
        self._update_detail()

    def fit(self, rect: QRectF | None = None) -> None:
        """Show `rect` (None: the whole drawing) as large as fits, never above 1:1."""
        rect = rect or self.sceneRect()
        view = self.viewport().rect()
        if rect.width() <= 0 or rect.height() <= 0 or view.width() <= 0:
            return
        self.set_zoom(min(1.0, view.width() / rect.width(), view.height() / rect.height()))
        self.centerOn(rect.center())

    def start_view(self) -> None:
        """The first look at a drawing: all of it when it fits at a readable size, else its top at the width
        that fits (a tall program starts at its inputs)."""
        rect = self.sceneRect()
        view = self.viewport().rect()
        if rect.width() <= 0 or view.width() <= 0:
            return
        fit_all = min(1.0, view.width() / rect.width(), view.height() / rect.height())
        if fit_all >= LABELS_FROM:
            self.fit()
            return
        self.set_zoom(max(LABELS_FROM, min(1.0, view.width() / rect.width())))
        top = self.mapToScene(view.center()) - self.mapToScene(view.topLeft())
        self.centerOn(QPointF(rect.center().x(), rect.top() + top.y()))

    def centre_on(self, rect: QRectF) -> None:
        """Bring `rect` to the middle, zoomed in enough to read it."""
        if self.scale_factor < LABELS_FROM:
            self.set_zoom(1.0)
        self.centerOn(rect.center())
        self._update_detail()

    def _update_detail(self) -> None:
        scale = self.scale_factor
        level = 3 if scale >= EDGE_LABELS_FROM else 2 if scale >= LABELS_FROM else 1 if scale >= BOXES_FROM else 0
        if level != self.level:
            self.level = level
            self.graph_scene.set_detail(level)
        if level >= 2:
            self.graph_scene.ensure_labels(self.mapToScene(self.viewport().rect()).boundingRect())
        self.moved.emit()

    def scrollContentsBy(self, dx: int, dy: int) -> None:  # noqa: N802 (Qt's name)
        """A pan brings the labels of what comes into view (built once, for the bands it touches)."""
        super().scrollContentsBy(dx, dy)
        if self.level >= 2:
            self.graph_scene.ensure_labels(self.mapToScene(self.viewport().rect()).boundingRect())
        self.moved.emit()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        """More room shows more labels."""
        super().resizeEvent(event)
        if self.level >= 2:
            self.graph_scene.ensure_labels(self.mapToScene(self.viewport().rect()).boundingRect())
        self.moved.emit()

    def refresh_detail(self) -> None:
        """Apply the level of detail to a new drawing."""
        self.level = -1
        self._update_detail()

    # -- input ---------------------------------------------------------------------------------------
    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 (Qt's name)
        """The wheel zooms (a trackpad's pixel deltas too)."""
        delta = event.angleDelta().y() or event.pixelDelta().y()
        if delta:
            self.zoom(1.0015 ** delta)
        event.accept()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt's name)
        """+ and - zoom; 0 fits the drawing; arrows, Enter and Backspace move between boxes (`navigated`)."""
        key = event.key()
        if key in KEYS and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
            self.navigated.emit(KEYS[Qt.Key(key)])
            event.accept()
        elif key in (Qt.Key.Key_Plus, Qt.Key.Key_Equal):
            self.zoom(1.25)
        elif key == Qt.Key.Key_Minus:
            self.zoom(0.8)
        elif key == Qt.Key.Key_0:
            self.fit()
        else:
            super().keyPressEvent(event)

    def _hit(self, event: QMouseEvent) -> tuple[int | None, str | None, QPointF]:
        point = self.mapToScene(event.position().toPoint())
        index = frame = None
        for item in self.items(event.position().toPoint()):
            index = self.graph_scene.index_at(item)
            if index is not None:
                break
            frame = frame or self.graph_scene.frame_at(item)
        return index, frame, point

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        """A click on a box selects it; on a module's "+" corner it expands the module."""
        if event.button() == Qt.MouseButton.LeftButton:
            index, _, point = self._hit(event)
            if index is not None:
                self.clicked.emit(index, self.graph_scene.in_badge(index, point))
                event.accept()
                return
            self.background_clicked.emit()
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        """A double-click expands a module's box, or collapses the module whose frame it is on."""
        index, frame, _ = self._hit(event)
        if index is not None:
            self.clicked.emit(index, True)
        elif frame is not None:
            self.frame_clicked.emit(frame)
        event.accept()

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """Hover text: the box's name, op, module and the overlay's figure (computed when asked)."""
        if event.type() == QEvent.Type.ToolTip:
            point = event.pos()  # type: ignore[attr-defined]
            index = None
            for item in self.items(point):
                index = self.graph_scene.index_at(item)
                if index is not None:
                    break
            text = self.tooltip_text(index) if index is not None else ""
            if text:
                QToolTip.showText(event.globalPos(), text, self)  # type: ignore[attr-defined]
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(event)

"""The minimap: the whole drawing small, in the canvas's corner, the part shown outlined; a click or a drag
there brings that part to the middle. Hidden while the whole drawing fits the view.

Its picture is drawn once per drawing from the layout's rectangles (a few milliseconds for 20,000 boxes), and
each pan or zoom repaints the outline only.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPalette, QPen, QPixmap
from PySide6.QtWidgets import QWidget

from ckptview.gui.graph.canvas import GraphCanvas

SIZE = 180.0  # the long side of the minimap, in pixels
MARGIN = 8


class Minimap(QWidget):
    """The minimap of `canvas` (a child widget of it, in its bottom right corner)."""

    def __init__(self, canvas: GraphCanvas) -> None:
        super().__init__(canvas)
        self.setObjectName("graphMinimap")
        self.canvas = canvas
        self.picture: QPixmap | None = None
        self.scene_rect = QRectF()
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip("The whole drawing: click or drag to move the view")
        canvas.moved.connect(self.follow)
        self.hide()

    def redraw(self) -> None:
        """Draw the picture of the drawing shown (a new layout, a new palette)."""
        scene = self.canvas.graph_scene
        placed = scene.placed
        self.scene_rect = scene.sceneRect()
        if placed is None or self.scene_rect.width() <= 0 or self.scene_rect.height() <= 0:
            self.picture = None
            self.hide()
            return
        factor = SIZE / max(self.scene_rect.width(), self.scene_rect.height())
        width, height = max(24, round(self.scene_rect.width() * factor)), max(24, round(self.scene_rect.height() * factor))
        self.resize(width, height)
        pal = self.palette()
        picture = QPixmap(width, height)
        picture.fill(pal.color(QPalette.ColorRole.Base))
        painter = QPainter(picture)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(pal.color(QPalette.ColorRole.Text))
        left, top = self.scene_rect.left(), self.scene_rect.top()
        for x, y, w, h in placed.boxes:
            painter.drawRect(QRectF((x - left) * factor, (y - top) * factor, max(1.0, w * factor), max(1.0, h * factor)))
        painter.setPen(QPen(pal.color(QPalette.ColorRole.Mid), 1))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRect(0, 0, width - 1, height - 1)
        painter.end()
        self.picture = picture
        self.follow()

    def follow(self) -> None:
        """Show where the view is (hidden while the whole drawing fits it)."""
        if self.picture is None:
            return
        shown = self.canvas.mapToScene(self.canvas.viewport().rect()).boundingRect()
        whole = shown.contains(self.scene_rect.adjusted(40, 40, -40, -40))
        self.setVisible(not whole)
        view = self.canvas.viewport().geometry()
        self.move(view.right() - self.width() - MARGIN, view.bottom() - self.height() - MARGIN)
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        """The picture, and the part of the drawing the view shows."""
        if self.picture is None:
            return
        painter = QPainter(self)
        painter.drawPixmap(0, 0, self.picture)
        factor = self.width() / max(1.0, self.scene_rect.width())
        shown = self.canvas.mapToScene(self.canvas.viewport().rect()).boundingRect()
        outline = QRectF((shown.left() - self.scene_rect.left()) * factor, (shown.top() - self.scene_rect.top()) * factor,
                         shown.width() * factor, shown.height() * factor).intersected(QRectF(self.rect()).adjusted(0, 0, -1, -1))
        highlight = self.palette().color(QPalette.ColorRole.Highlight)
        painter.setPen(QPen(highlight, 2))
        fill = QColor(highlight)
        fill.setAlpha(40)
        painter.setBrush(fill)
        painter.drawRect(outline)

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        """Centre the view on the point clicked."""
        self._centre(event.position())
        event.accept()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        """Dragging moves the view along."""
        if event.buttons() & Qt.MouseButton.LeftButton:
            self._centre(event.position())
        event.accept()

    def _centre(self, point: QPointF) -> None:
        factor = self.width() / max(1.0, self.scene_rect.width())
        self.canvas.centerOn(QPointF(self.scene_rect.left() + point.x() / factor,
                                     self.scene_rect.top() + point.y() / factor))

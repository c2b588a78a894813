"""The drawing saved as a picture: SVG (QSvgGenerator, vectors) or PNG (at most 8,000 px a side)."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QGraphicsScene

MAX_PNG_SIDE = 8000


def save_svg(scene: QGraphicsScene, path: str, title: str = "ckptview graph") -> None:
    """Write the whole drawing to `path` as SVG."""
    from PySide6.QtSvg import QSvgGenerator

    rect = scene.sceneRect()
    generator = QSvgGenerator()
    generator.setFileName(path)
    generator.setSize(QSize(max(1, int(rect.width())), max(1, int(rect.height()))))
    generator.setViewBox(QRectF(0, 0, rect.width(), rect.height()))
    generator.setTitle(title)
    painter = QPainter(generator)
    scene.render(painter, QRectF(0, 0, rect.width(), rect.height()), rect)
    painter.end()


def save_png(scene: QGraphicsScene, path: str, background: QColor | None = None) -> bool:
    """Write the whole drawing to `path` as PNG, scaled down to MAX_PNG_SIDE; False when it failed."""
    rect = scene.sceneRect()
    factor = min(1.0, MAX_PNG_SIDE / max(rect.width(), rect.height(), 1.0))
    image = QImage(max(1, int(rect.width() * factor)), max(1, int(rect.height() * factor)),
                   QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(background if background is not None else QColor(Qt.GlobalColor.white))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    scene.render(painter, QRectF(image.rect()), rect)
    painter.end()
    return image.save(path, "PNG")  # type: ignore[call-overload]  # the stubs say bytes; PySide6 takes str

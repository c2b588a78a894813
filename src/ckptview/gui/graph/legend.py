"""The Graph view's colour bar: the figure's name, its range on the colour map, and the NaN/Inf swatch."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

from ckptview.core.graph.overlay import Figure, Scale
from ckptview.gui.graph.scene import NAN_COLOR, colour_at


class Legend(QWidget):
    """The colour bar: the figure's name, its range, and the NaN/Inf swatch."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("graphLegend")
        self.figure: Figure | None = None
        self.scale: Scale | None = None
        self.done = False  # the figures arrived (a scale of None then: no box has the figure)
        self.setMinimumHeight(self.fontMetrics().height() + 8)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def show_scale(self, figure: Figure | None, scale: Scale | None, done: bool = False) -> None:
        """Show `figure` over `scale` (figure None: hidden; `done`: the figures arrived)."""
        self.figure, self.scale, self.done = figure, scale, done
        self.setVisible(figure is not None)
        self.update()

    def text(self) -> str:
        """What the legend says, as text (tests, screen readers)."""
        if self.figure is None:
            return ""
        if self.scale is None:
            return f"{self.figure.title}: {'no box has one here' if self.done else 'no values yet'}"
        low, high = self.scale.ticks()
        return f"{self.figure.title}{' (log)' if self.scale.log else ''}: {low} – {high}; NaN/Inf"

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        """Name, low end, the bar, high end, then the NaN/Inf swatch."""
        if self.figure is None:
            return
        painter = QPainter(self)
        metrics = self.fontMetrics()
        height = self.height()
        text_colour = self.palette().color(QPalette.ColorRole.WindowText)
        painter.setPen(text_colour)
        x = 4
        if self.scale is None:
            painter.drawText(x, 0, self.width(), height, Qt.AlignmentFlag.AlignVCenter, self.text())
            return
        low, high = self.scale.ticks()
        name = self.figure.title + (" (log)" if self.scale.log else "")
        for part in (name, low):
            painter.drawText(x, 0, metrics.horizontalAdvance(part) + 2, height, Qt.AlignmentFlag.AlignVCenter, part)
            x += metrics.horizontalAdvance(part) + 8
        bar = max(60, min(240, self.width() - x - metrics.horizontalAdvance(high + " NaN/Inf") - 40))
        for k in range(bar):
            painter.setPen(colour_at(k / max(1, bar - 1)))
            painter.drawLine(x + k, 5, x + k, height - 5)
        x += bar + 6
        painter.setPen(text_colour)
        painter.drawText(x, 0, metrics.horizontalAdvance(high) + 2, height, Qt.AlignmentFlag.AlignVCenter, high)
        x += metrics.horizontalAdvance(high) + 14
        painter.fillRect(x, 5, 14, height - 10, QColor(NAN_COLOR))
        painter.drawText(x + 18, 0, 80, height, Qt.AlignmentFlag.AlignVCenter, "NaN/Inf")

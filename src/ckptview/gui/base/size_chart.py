"""The summary's "size by top-level module" bars, painted with QPainter.

A pyqtgraph plot here cost the window's launch the import of pyqtgraph and numpy (a quarter of a second)
before the first tree could show; a few labelled bars need neither.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, QRectF, QSize, Qt
from PySide6.QtGui import QFont, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

from ckptview.core.text import shown
from ckptview.core.units import human_bytes
from ckptview.gui.base.palette import color
from ckptview.gui.base.plots import make_exportable

TITLE = "Size by top-level module"
CHART_HEIGHT = 76
NAME_LIMIT = 28  # characters of a module name kept (its tail: the leaf names differ)


def short_name(name: str, limit: int = NAME_LIMIT) -> str:
    """`name` cut to its last `limit` characters, with an ellipsis where it was cut."""
    name = shown(name)
    return name if len(name) <= limit else "…" + name[-(limit - 1):]


class SizeChart(QWidget):
    """Horizontal bars, largest first: the module's name on the left, its size at the end of the bar."""

    def __init__(self, bars: list[tuple[str, int]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sizeChart")
        self.bars = list(bars)
        # As tall as the facts beside it (three rows): the summary must leave a 640 px screen room for the
        # panels. Bars that do not fit are left out of the drawing (largest first; all in the tooltip).
        self.setMinimumHeight(CHART_HEIGHT)
        self.setMaximumHeight(CHART_HEIGHT)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setToolTip("\n".join(f"{shown(name)}: {human_bytes(size)}" for name, size in self.bars))
        make_exportable(self, "size-by-module")  # the one export action every plot has

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """Room for the title and the largest bars."""
        return QSize(360, CHART_HEIGHT)

    def labels(self) -> list[str]:
        """The text beside each bar, top to bottom ("name  size")."""
        return [f"{short_name(name)}  {human_bytes(size)}" for name, size in self.bars]

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        """Title, then one row per module: name, bar scaled to the largest, size."""
        painter = QPainter(self)
        try:
            self._paint(painter)
        finally:
            painter.end()

    def _paint(self, painter: QPainter) -> None:
        palette = self.palette()
        text_color = palette.color(QPalette.ColorRole.Text)
        painter.fillRect(self.rect(), palette.color(QPalette.ColorRole.Base))
        font = QFont(self.font())
        font.setPointSizeF(max(7.0, font.pointSizeF() * 0.9))
        painter.setFont(font)
        metrics = painter.fontMetrics()
        line = metrics.height()
        area = self.rect().adjusted(6, 2, -6, -4)
        painter.setPen(palette.color(QPalette.ColorRole.PlaceholderText))  # the title recedes behind the bars
        painter.drawText(QRect(area.left(), area.top(), area.width(), line), Qt.AlignmentFlag.AlignHCenter, TITLE)
        if not self.bars:
            return
        top = area.top() + line + 2
        fit = max(1, int((area.bottom() - top) // line))  # bars that fit one text line each
        bars = self.bars[:fit]
        row = max(1.0, min((area.bottom() - top) / len(bars), line * 2.2))  # few bars stay together
        names = [short_name(name) for name, _ in bars]
        sizes = [human_bytes(size) for _, size in bars]
        name_width = min(max(metrics.horizontalAdvance(n) for n in names) + 16, int(area.width() * 0.4))
        size_width = max(metrics.horizontalAdvance(s) for s in sizes) + 6
        bar_left = area.left() + name_width
        bar_room = max(1, area.right() - bar_left - size_width)
        largest = max(size for _, size in bars) or 1
        for i, ((_, size), name, size_text) in enumerate(zip(bars, names, sizes, strict=True)):
            y = top + i * row
            text_box = QRectF(area.left(), y, name_width - 6, row)
            shown = metrics.elidedText(name, Qt.TextElideMode.ElideLeft, int(text_box.width()))
            painter.setPen(text_color)
            painter.drawText(text_box, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, shown)
            width = max(1.0, bar_room * size / largest)
            height = max(1.0, row * 0.7)
            painter.fillRect(QRectF(bar_left, y + (row - height) / 2, width, height), color("bar"))
            painter.drawText(QRectF(bar_left + width + 4, y, size_width, row),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, size_text)

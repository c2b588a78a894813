"""Table helpers shared by the panels: compact rows, heights that keep rows in view, reading cells."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QTableWidget, QTableWidgetItem


def row_height(table: QTableView) -> int:
    """A compact row: the font's height plus the style's margins (Qt's default is about 30 px)."""
    return table.fontMetrics().height() + 4


def compact(table: QTableView) -> None:
    """Rows as tall as their text needs, not more: more rows fit on a 640 px screen."""
    header = table.verticalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    header.setMinimumSectionSize(row_height(table))
    header.setDefaultSectionSize(row_height(table))


def rows_height(table: QTableView, rows: int) -> int:
    """Pixels the table needs to show `rows` rows with its header and a horizontal scroll bar."""
    header = table.horizontalHeader()
    # A table without columns yet has a header of height 0: count the height it will have.
    head = max(header.sizeHint().height(), row_height(table) + 4) if not header.isHidden() else 0
    off = table.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff
    scroll = 0 if off else table.horizontalScrollBar().sizeHint().height()
    return head + rows * row_height(table) + scroll + 2 * table.frameWidth() + 4


def keep_rows_visible(table: QTableView, rows: int) -> None:
    """Never shrink the table below `rows` rows (layouts and splitters give the space elsewhere)."""
    compact(table)
    table.setMinimumHeight(rows_height(table, rows))
    table.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)


def cell_text(table: QTableWidget, row: int, column: int) -> str:
    """The text shown in a cell ('' where the cell has no item)."""
    item = table.item(row, column)
    return item.text() if item is not None else ""


def header_text(table: QTableWidget, column: int) -> str:
    """The title of a column ('' where it has no header item)."""
    item = table.horizontalHeaderItem(column)
    return item.text() if item is not None else ""


def set_header_tip(table: QTableWidget, column: int, tip: str) -> None:
    """Give a column's header a tooltip (its header item is made if it has none yet)."""
    item = table.horizontalHeaderItem(column)
    if item is None:
        item = QTableWidgetItem()
        table.setHorizontalHeaderItem(column, item)
    item.setToolTip(tip)

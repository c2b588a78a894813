"""Table sizing shared by the panels: compact rows, and heights that keep a number of rows in view."""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView


def row_height(table: QTableView) -> int:
    """A compact row: the font's height plus a little padding (Qt's default is about 30 px)."""
    return table.fontMetrics().height() + 6


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
    scroll = table.horizontalScrollBar().sizeHint().height()
    return head + rows * row_height(table) + scroll + 2 * table.frameWidth() + 4


def keep_rows_visible(table: QTableView, rows: int) -> None:
    """Never shrink the table below `rows` rows (layouts and splitters give the space elsewhere)."""
    compact(table)
    table.setMinimumHeight(rows_height(table, rows))
    table.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)

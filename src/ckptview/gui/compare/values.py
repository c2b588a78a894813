"""The values beside the tensors that differ between A and B (epoch, step, lr, loss, hyper-parameters), as
one wrapped line above the comparison's table and, on demand, a table of every one of them."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.compare.values import ValueChange, iter_text
from ckptview.core.inspect.training import short_fact_keys
from ckptview.core.text import printable
from ckptview.core.units import plural

SHOWN = 6  # changes named on the line; the table has every one
ARROW = "\u2192"


class ValueChanges(QWidget):
    """A line naming the first training facts that differ ("epoch 0 → 2 · lr 0.01 → 0.00125 · …") and a
    button that lists every value that differs."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values: list[ValueChange] = []
        self.label = QLabel()
        self.label.setObjectName("diffValues")
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setWordWrap(True)
        self.button = QToolButton()
        self.button.setObjectName("diffValuesAll")
        self.button.clicked.connect(self.show_table)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def set_values(self, values: list[ValueChange]) -> None:
        """Show `values` (a comparison's `DiffResult.values`, ranked); hidden when there are none."""
        self.values = list(values)
        if not values:
            self.hide()
            return
        names = short_fact_keys([v.name for v in values])
        first = [(n, v) for n, v in zip(names, values, strict=True) if v.rank < 2][:SHOWN]
        parts = []
        for name, v in first:
            a, b = (printable(t) for t in iter_text(v))
            parts.append(f"<b>{html.escape(printable(name))}</b> {html.escape(a)} {ARROW} {html.escape(b)}")
        rest = len(values) - len(first)
        text = " &nbsp;·&nbsp; ".join(parts) if parts else ""
        if rest:
            text += (" &nbsp;·&nbsp; " if parts else "") + f"{plural(rest, 'other value')}"
        self.label.setText(f"Values that differ: {text}")
        self.button.setText(f"All {len(values)}…")
        self.button.setToolTip("List every value beside the tensors that differs between A and B")
        self.show()

    def show_table(self) -> QDialog:
        """A dialog listing every value that differs: name, A, B."""
        dialog = QDialog(self)
        dialog.setWindowTitle(f"{plural(len(self.values), 'value')} that differ")
        table = QTableWidget(len(self.values), 3, dialog)
        table.setHorizontalHeaderLabels(["Name", "A", "B"])
        table.verticalHeader().hide()
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        for row, v in enumerate(self.values):
            a, b = iter_text(v, exact=True)
            for column, text in enumerate((v.name, a, b)):
                item = QTableWidgetItem(printable(text))
                item.setToolTip(printable(text))
                table.setItem(row, column, item)
        table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(dialog.reject)
        layout = QVBoxLayout(dialog)
        layout.addWidget(table, 1)
        layout.addWidget(buttons)
        dialog.resize(720, 420)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

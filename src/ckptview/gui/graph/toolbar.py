"""The Graph view's controls above the drawing: search, colours, the view of every op, pin, reset, fit, export.

A plain row of widgets with signals; the page connects them. In the search field Escape clears it and F3
goes to the next match (Enter too).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Signal
from PySide6.QtGui import Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QMenu, QToolButton, QWidget

from ckptview.core.graph.overlay import CHECKPOINT_FIGURES


def _button(text: str, tip: str, checkable: bool = False) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    button.setToolTip(tip)
    button.setCheckable(checkable)
    return button


class GraphToolbar(QWidget):
    """The row of controls; `export_chosen(kind)`: "svg", "png", "node-data" or "open-node-data"."""

    export_chosen = Signal(str)
    next_requested = Signal()

    def __init__(self, with_figures: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.search = QLineEdit()
        self.search.setObjectName("graphSearch")
        self.search.setPlaceholderText("Find a node by name or op (Enter: next)")
        self.search.setClearButtonEnabled(True)
        self.search.returnPressed.connect(self.next_requested)
        self.search.installEventFilter(self)
        self.match_label = QLabel("")
        self.overlay_box = QComboBox()
        self.overlay_box.setObjectName("graphOverlay")
        self.overlay_box.addItem("No colours", None)
        if with_figures:
            for figure in CHECKPOINT_FIGURES:
                self.overlay_box.addItem(figure.title, figure)
        self.overlay_box.setToolTip("Colour each box by a figure of the tensors it reads")
        self.ops_button = _button("All ops", "Show every op as traced (bookkeeping included, repeated layers "
                                             "unfolded); off: the architecture's blocks", checkable=True)
        self.ops_button.setObjectName("graphAllOps")
        self.pin_button = _button("Pin", "Keep the selected box's module open while others open (one open "
                                         "module at a time otherwise)", checkable=True)
        self.top_button = _button("Top level", "Back to the first view: every module closed but the diagram's")
        self.fit_button = _button("Fit", "Show the whole drawing (0)")
        self.export_button = _button("Export", "Save the drawing, or its colours for Model Explorer")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        menu.addAction("Save as SVG…", lambda: self.export_chosen.emit("svg"))
        menu.addAction("Save as PNG…", lambda: self.export_chosen.emit("png"))
        menu.addSeparator()
        menu.addAction("Save colours for Model Explorer…", lambda: self.export_chosen.emit("node-data"))
        menu.addAction("Colour by Model Explorer data…", lambda: self.export_chosen.emit("open-node-data"))
        self.export_button.setMenu(menu)
        row.addWidget(self.search, 1)
        row.addWidget(self.match_label)
        row.addWidget(self.overlay_box)
        for button in (self.ops_button, self.pin_button, self.top_button, self.fit_button, self.export_button):
            row.addWidget(button)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """In the search field: Escape clears it, F3 goes to the next match."""
        if watched is self.search and event.type() == QEvent.Type.KeyPress:
            key = event.key()  # type: ignore[attr-defined]
            if key == Qt.Key.Key_Escape:
                self.search.clear()
                return True
            if key == Qt.Key.Key_F3:
                self.next_requested.emit()
                return True
        return super().eventFilter(watched, event)

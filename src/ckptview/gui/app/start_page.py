"""The page the window shows while no tab is open: a drop hint, the recent files, the example and Open…

Without it the last closed tab left a blank grey window with nothing saying what to do next.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt, Signal, SignalInstance
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ckptview.core.text import printable

MAX_RECENT = 8
RECENT_WIDTH = 560  # pixels a recent file's line takes at most


class StartPage(QWidget):
    """Buttons for every way in (each signal is one of the window's actions) and the recent files."""

    open_clicked = Signal()
    series_clicked = Signal()
    url_clicked = Signal()
    example_clicked = Signal()
    recent_clicked = Signal(str)  # the path to open

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("startPage")
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        title = QLabel("<b>ckptview</b>: browse PyTorch checkpoints without running them")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        outer.addWidget(title)
        self.hint = QLabel("Drop checkpoint files or folders here, or open one:")
        self.hint.setObjectName("dropHint")
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hint.setWordWrap(True)
        outer.addWidget(self.hint)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.open_button = self._button(buttons, "Open…", "Open checkpoint files (Ctrl+O)", self.open_clicked)
        self._button(buttons, "Open Series…", "Open a folder of a training run's checkpoints", self.series_clicked)
        self._button(buttons, "Open URL…", "https://, hf://ORG/REPO/FILE, s3://BUCKET/KEY (Ctrl+L)", self.url_clicked)
        self.example_button = self._button(buttons, "Open the example", "A small MLP's training checkpoint, shipped "
                                           "with ckptview", self.example_clicked)
        buttons.addStretch(1)
        outer.addLayout(buttons)
        self.recent_title = QLabel("Recent files")
        self.recent_title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        outer.addSpacing(12)
        outer.addWidget(self.recent_title)
        self.recent_box = QFrame()
        self.recent_layout = QVBoxLayout(self.recent_box)
        self.recent_layout.setContentsMargins(0, 0, 0, 0)
        self.recent_layout.setSpacing(0)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.recent_box)
        row.addStretch(1)
        outer.addLayout(row)
        outer.addStretch(2)
        self._recent: list[QPushButton] = []
        self.set_recent([])

    @staticmethod
    def _button(row: QHBoxLayout, text: str, tip: str, signal: SignalInstance) -> QPushButton:
        button = QPushButton(text)
        button.setToolTip(tip)
        button.clicked.connect(lambda _checked=False: signal.emit())
        row.addWidget(button)
        return button

    def set_recent(self, paths: list[str]) -> None:
        """Show these recent files (newest first), each a button that opens it; its tooltip the whole path."""
        for button in self._recent:
            self.recent_layout.removeWidget(button)
            # Hidden at once: deleteLater() waits for the event loop, which a window driven without one
            # (tools/screenshots.py) never runs, and the old buttons stayed above the new ones.
            button.hide()
            button.deleteLater()
        self._recent = []
        for path in paths[:MAX_RECENT]:
            name = os.path.basename(path.rstrip("/" + os.sep)) or path
            folder = os.path.dirname(path.rstrip("/" + os.sep))
            button = QPushButton()
            text = printable(f"{name}   —   {folder}" if folder else name)
            # A long path never widens the window: cut in the middle, whole in the tooltip.
            button.setText(button.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, RECENT_WIDTH))
            button.setFlat(True)
            button.setToolTip(printable(path))
            button.setStyleSheet("text-align: left;")
            button.clicked.connect(lambda _checked=False, p=path: self.recent_clicked.emit(p))
            self.recent_layout.addWidget(button)
            button.show()  # at once, not on the next event-loop turn (the page may be on screen already)
            self._recent.append(button)
        self.recent_title.setVisible(bool(paths))
        layout = self.layout()
        if layout is not None:
            layout.activate()  # laid out now: the page may be on screen already

    def recent_buttons(self) -> list[QPushButton]:
        """The buttons of the recent files, newest first."""
        return list(self._recent)

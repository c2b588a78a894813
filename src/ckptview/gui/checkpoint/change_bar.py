"""The bar "the file changed on disk since it was opened: Reload" above a tab's tree.

It keeps the identity of the file as it was opened, compares it with the disk when asked (the window
polls; a worker's read may find a change first and `mark` it), and stays shown until the tab reloads.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QStyle, QWidget

from ckptview.core.session.file_checks import Signature, describe_change, signature
from ckptview.gui.base.palette import style_banner

__all__ = ["FileChangeBar"]


class FileChangeBar(QFrame):
    """Hidden while the file matches what was opened; `changed_text` says how it no longer does."""

    reload_clicked = Signal()
    changed = Signal(str, bool)  # the bar's sentence, and whether this is the first change seen

    def __init__(self, path: str, opened_as: Signature | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.path = path
        self.opened_as = opened_as
        self.changed_text = ""  # why the file on disk no longer matches ('' while it does)
        self.setObjectName("changedBar")
        style_banner(self, "changed_banner", "changed_border")
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 8, 4)
        icon = QLabel()
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_BrowserReload).pixmap(20, 20))
        row.addWidget(icon)
        self.label = QLabel(self.message())
        self.label.setObjectName("changedLabel")
        self.label.setWordWrap(True)
        row.addWidget(self.label, 1)
        button = QPushButton("Reload")
        button.setObjectName("reloadButton")
        button.setToolTip("Open the file again, keeping the selection (Ctrl+R)")
        button.clicked.connect(self.reload_clicked)
        row.addWidget(button)
        self.setVisible(False)

    def check(self) -> bool:
        """Compare the file on disk with the one opened; True (and the bar shown) when it changed."""
        if self.changed_text:
            return True
        what = describe_change(self.opened_as, signature(self.path))
        if what:
            self.mark(what)
        return bool(what)

    def mark(self, what: str = "") -> bool:
        """Show the bar: the file changed (`what` says how). True the first time, when panels must let go."""
        first = not self.changed_text
        self.changed_text = what or "it no longer matches what was opened"
        self.label.setText(self.message())
        self.show()
        self.changed.emit(self.message(), first)
        return first

    def message(self) -> str:
        """The bar's sentence."""
        return f"The file changed on disk since it was opened ({self.changed_text}). Reload to see it as it is now."

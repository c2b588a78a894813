"""The application: QApplication and start-up, the main window, single-instance hand-over."""

from __future__ import annotations

from ckptview.gui.app.launch import main
from ckptview.gui.app.main_window import MainWindow

__all__ = ["MainWindow", "main"]

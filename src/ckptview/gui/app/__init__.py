"""The application: QApplication and start-up, the main window, single-instance hand-over."""

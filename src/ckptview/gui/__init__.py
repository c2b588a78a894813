"""The PySide6 window: a thin layer over `ckptview.core` (extension points in `ckptview.gui.panels.registry`)."""

"""Choosing model code for the Graph view: a Python file, then one of the classes it defines (read with `ast`,
never imported here: the worker imports it, as a run's `--model`)."""

from __future__ import annotations

import os

from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox, QWidget

from ckptview.core.run.model_classes import ModelCodeError, classes_in_file
from ckptview.core.text import printable


def choose_model_code(parent: QWidget, start: str) -> str | None:
    """`path/file.py:Class` picked by the user (None: cancelled, or the file defines no class)."""
    path, _ = QFileDialog.getOpenFileName(parent, "Model code to trace", start, "Python files (*.py);;All files (*)")
    if not path:
        return None
    try:
        classes = classes_in_file(path)
    except ModelCodeError as exc:
        QMessageBox.warning(parent, "Model code", printable(exc))
        return None
    modules = [c.name for c in classes if c.is_module] or [c.name for c in classes]
    if not modules:
        QMessageBox.warning(parent, "Model code", f"{printable(os.path.basename(path))} defines no class")
        return None
    if len(modules) == 1:
        return f"{path}:{modules[0]}"
    name, ok = QInputDialog.getItem(parent, "Model code", f"The class of {printable(os.path.basename(path))} to "
                                    "trace:", modules, 0, False)
    return f"{path}:{name}" if ok and name else None

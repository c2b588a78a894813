"""The export dialog at rest and after an export (issue 35, finding 8): an idle progress bar looked like a text
field, the bundled example's default target was inside the installed package, and after an export the
preview said its own files "[exists: will be replaced]"."""

from __future__ import annotations

import os

import numpy as np
import torch
from PySide6.QtCore import Qt

from ckptview.gui.export.dialog import ExportDialog, export_nodes
from tests.support.guihelpers import wait_settled


def dialog_for(qtbot, window, path) -> ExportDialog:
    (tab,) = window.open_paths([str(path)])
    wait_settled(qtbot, tab)
    dialog = export_nodes(window)
    assert dialog is not None
    qtbot.addWidget(dialog)
    qtbot.waitExposed(dialog)
    return dialog


def test_the_example_exports_to_a_user_folder_and_an_idle_bar_is_hidden(qtbot, window):
    import ckptview
    import ckptview.resources
    from ckptview.gui.app.main_window import example_path

    dialog = dialog_for(qtbot, window, example_path())
    target = os.path.abspath(dialog.path_edit.text())
    for package in (ckptview.__file__, ckptview.resources.__file__):  # never inside the installed package
        assert not target.startswith(os.path.dirname(os.path.abspath(package)) + os.sep), target
    assert os.access(os.path.dirname(target), os.W_OK)
    assert os.path.basename(target) == "example-export"
    assert dialog.isVisible() and not dialog.progress.isVisible()  # no empty bar that reads as a text field


def test_after_an_export_the_dialog_says_what_it_wrote(qtbot, window, tmp_path):
    torch.save({"w": torch.randn(3, 4).to(torch.bfloat16), "step": torch.tensor(5)}, tmp_path / "m.pt")
    dialog = dialog_for(qtbot, window, tmp_path / "m.pt")
    assert dialog.path_edit.text() == str(tmp_path / "m-export")  # beside a checkpoint in a folder of its own
    assert "--" not in dialog.notes.toPlainText(), dialog.notes.toPlainText()  # no command-line flag
    qtbot.mouseClick(dialog.export_button, Qt.MouseButton.LeftButton)
    assert dialog.progress.isVisible()
    qtbot.waitUntil(lambda: dialog.worker is None, timeout=20_000)
    assert dialog.result is not None, dialog.status.text()
    preview = dialog.preview.toPlainText()
    assert "exists" not in preview and "replaced" not in preview, preview
    assert "written" in preview
    assert "Wrote" in dialog.existing_label.text() and "exist" not in dialog.existing_label.text()
    assert not dialog.progress.isVisible()
    ref = torch.load(tmp_path / "m.pt", weights_only=True)
    assert np.load(tmp_path / "m-export" / "step.npy") == ref["step"].item()
    dialog.format_box.setCurrentIndex(dialog.format_box.findData("npz"))  # a new choice: a new plan
    dialog.format_box.setCurrentIndex(dialog.format_box.findData("npy"))
    assert "[exists: will be replaced]" in dialog.preview.toPlainText()  # now it would replace them

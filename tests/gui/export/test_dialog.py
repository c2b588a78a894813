"""File > Export… on a tree selection: the dialog writes what torch.load reads, asks before replacing,
cancels cleanly, and opens the result's folder."""

from __future__ import annotations

import os
import threading

import numpy as np
import torch
from PySide6.QtCore import QItemSelectionModel
from PySide6.QtGui import QDesktopServices

from ckptview.gui.export import dialog as export_dialog
from ckptview.gui.export.dialog import ExportDialog
from tests.support.guihelpers import wait_settled


def _open_dialog(qtbot, window, path) -> ExportDialog:
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab)
    model, tree = tab.model, tab.tree
    labels = {model.index(r, 0).data(): model.index(r, 0) for r in range(model.rowCount())}
    flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
    tree.selectionModel().select(labels["decoder"], flags)  # a module group: every tensor below it
    tree.selectionModel().select(labels["step"], flags)
    action = next(a for a in window.menus.menu("File").actions() if a.text() == "Export…")
    assert action.shortcut().toString() == export_dialog.SHORTCUT
    action.trigger()
    dialog = window.findChild(ExportDialog)
    assert dialog is not None and dialog.isVisible()
    qtbot.addWidget(dialog)
    return dialog


def _finish(qtbot, dialog: ExportDialog) -> None:
    qtbot.waitUntil(lambda: dialog.worker is None, timeout=10_000)


def test_export_selection_to_npz_then_open_folder(qtbot, window, state_dict_file, tmp_path, monkeypatch):
    dialog = _open_dialog(qtbot, window, state_dict_file)
    assert dialog.use_selection.isChecked() and dialog.use_selection.text().startswith("Selection: 2 tensors")
    assert [e.name for e in dialog.entries()] == ["decoder.embed.weight", "step"]
    dialog.format_box.setCurrentIndex(dialog.format_box.findData("npz"))
    assert dialog.path_edit.text().endswith("model-export.npz")  # the default name follows the format
    out = tmp_path / "out" / "sel.npz"
    dialog.path_edit.setText(str(out))
    qtbot.mouseClick(dialog.export_button, qtbot_button())
    _finish(qtbot, dialog)
    assert dialog.result is not None, dialog.status.text()
    assert str(out) in dialog.status.text() and dialog.open_button.isVisible()
    ref = torch.load(state_dict_file, weights_only=True)
    with np.load(out) as npz:
        assert sorted(npz.files) == ["decoder.embed.weight", "step"]
        np.testing.assert_array_equal(npz["decoder.embed.weight"], ref["decoder.embed.weight"].numpy())
        assert npz["step"] == 7

    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()) or True)
    qtbot.mouseClick(dialog.open_button, qtbot_button())
    assert opened == [str(out.parent)]

    # A second export to the same file asks first; "No" leaves the file alone.
    before = out.read_bytes()
    asked = []
    monkeypatch.setattr(dialog, "confirm_overwrite", lambda paths: asked.append(paths) or False)
    qtbot.mouseClick(dialog.export_button, qtbot_button())
    assert asked == [[str(out)]] and dialog.worker is None and out.read_bytes() == before
    assert "Nothing written" in dialog.status.text()


def test_whole_checkpoint_npy_notes_bf16_and_exact_option(qtbot, window, state_dict_file, tmp_path):
    dialog = _open_dialog(qtbot, window, state_dict_file)
    dialog.use_all.setChecked(True)
    assert "bfloat16 converted to float32" in dialog.notes.toPlainText()
    dialog.exact_box.setChecked(True)
    assert "converted" not in dialog.notes.toPlainText()
    dialog.path_edit.setText(str(tmp_path / "folder"))
    qtbot.mouseClick(dialog.export_button, qtbot_button())
    _finish(qtbot, dialog)
    assert dialog.result is not None, dialog.status.text()
    ref = torch.load(state_dict_file, weights_only=True)
    assert set(dialog.result.files) == set(ref)
    got = np.load(dialog.result.files["encoder.layers.10.mlp.fc.weight"])
    assert got.dtype.name == "bfloat16"
    assert got.view(np.int16).tobytes() == ref["encoder.layers.10.mlp.fc.weight"].view(torch.int16).numpy().tobytes()
    assert dialog.result_folder() == str(tmp_path / "folder")


def test_cancel_leaves_no_file(qtbot, window, tmp_path, monkeypatch):
    src = tmp_path / "big.pt"
    torch.save({"a": torch.zeros(300_000), "b": torch.ones(300_000)}, src)
    gate = threading.Event()
    real = export_dialog.export_job

    def gated(checkpoint, plan, placement, remote, *, force=False, token=None):
        job = real(checkpoint, plan, placement, remote, force=force, token=token, chunk_elems=50_000)
        yield next(job)
        gate.wait(10)  # hold the worker after its first chunk until the test has pressed Cancel
        yield from job

    monkeypatch.setattr(export_dialog, "export_job", gated)
    dialog = _open_dialog_plain(qtbot, window, str(src))
    out = tmp_path / "big.safetensors"
    dialog.format_box.setCurrentIndex(dialog.format_box.findData("safetensors"))
    dialog.path_edit.setText(str(out))
    before = set(os.listdir(tmp_path))
    qtbot.mouseClick(dialog.export_button, qtbot_button())
    qtbot.waitUntil(lambda: dialog.progress.value() > 0, timeout=10_000)
    assert dialog.cancel_button.isEnabled() and not dialog.export_button.isEnabled()
    qtbot.mouseClick(dialog.cancel_button, qtbot_button())
    gate.set()
    _finish(qtbot, dialog)
    assert dialog.result is None and "Cancelled" in dialog.status.text()
    assert set(os.listdir(tmp_path)) == before  # no final file, no temporary file
    assert dialog.export_button.isEnabled()


def _open_dialog_plain(qtbot, window, path) -> ExportDialog:
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab)
    dialog = export_dialog.export_nodes(window)
    assert dialog is not None and not dialog.use_selection.isEnabled() and dialog.use_all.isChecked()
    qtbot.addWidget(dialog)
    return dialog


def qtbot_button():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton


def test_the_dialog_lists_what_it_will_write_and_offers_only_options_that_apply(
        qtbot, window, state_dict_file, tmp_path):
    dialog = _open_dialog(qtbot, window, state_dict_file)  # decoder.embed.weight (float32) and step
    assert dialog.exact_box.isHidden()  # nothing bf16/fp8 selected: the choice would change nothing
    out = tmp_path / "folder"
    out.mkdir()
    (out / "step.npy").write_bytes(b"old")
    dialog.path_edit.setText(str(out))
    preview = dialog.preview.toPlainText().splitlines()
    assert preview[0] == "decoder.embed.weight.npy  <-  decoder.embed.weight (float32)"
    assert preview[1] == "step.npy  <-  step (int64)   [exists: will be replaced]"
    assert preview[2] == "manifest.json"
    assert "1 of these exist already" in dialog.existing_label.text()  # said before Export is pressed
    dialog.use_all.setChecked(True)  # the whole file holds a bf16 tensor: now the choice applies
    assert not dialog.exact_box.isHidden()
    dialog.format_box.setCurrentIndex(dialog.format_box.findData("safetensors"))
    assert dialog.exact_box.isHidden()  # safetensors keeps bf16 bits anyway
    dialog.path_edit.setText(str(tmp_path / "all.safetensors"))
    lines = dialog.preview.toPlainText().splitlines()
    assert lines[0].endswith(".safetensors") and len(lines) == 1 + len(dialog.entries())

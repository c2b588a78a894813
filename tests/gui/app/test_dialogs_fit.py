"""No dialog is larger than the screen it opens on, whatever names it lists (issue 35: "no tab, panel or
dialog makes the window larger than its screen").

Compare Two Open Tabs… sized its two lists to the longest file name (1,222 px for three tabs of long names
on an 800 px screen), and a message box that lists a name (the run's consent, Export's "Replace files?")
grew as wide as the name's longest unbroken run of characters: a tensor or global name of a few hundred
characters, which a file may hold, pushed its buttons off the screen. The offscreen screen is 800 px wide.
"""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

FOLDER = "/home/someone/runs/llama-3.1-8b-sft-lr2e-5-wd0.1-warmup2000-seed17-bf16-fsdp"
LONG_FILE = "checkpoint-epoch=12-step=48000-val_loss=0.1234-the-best-one-of-the-whole-sweep-so-far.ckpt"
# A name as a file may hold it (the window hands up to SHOWN_CHARS characters of a name to Qt).
HOSTILE = "model." + "very_long_module_name_" * 20 + "weight"


def fits(widget: QWidget) -> tuple[bool, str]:
    """(whether `widget`'s frame fits the available area of its screen, the sizes)."""
    room = widget.screen().availableGeometry()
    frame = widget.frameGeometry()
    return frame.width() <= room.width() and frame.height() <= room.height(), f"{frame.size()} on {room.size()}"


def measure_box_while(qtbot, call) -> str:
    """Run `call` (which shows a modal message box and waits), measure the box, answer it No/Cancel;
    return what `fits` said."""
    seen: list[tuple[bool, str]] = []

    def answer() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox) or not box.isVisible():
            QTimer.singleShot(20, answer)  # the box is not up yet: look again on a later turn
            return
        seen.append(fits(box))
        box.reject()

    QTimer.singleShot(0, answer)
    call()
    assert seen, "no message box was shown"
    ok, sizes = seen[0]
    assert ok, sizes
    return sizes


@pytest.mark.parametrize("names", [[LONG_FILE, "a-" + LONG_FILE, "short.pt"], [HOSTILE + ".pt", "b.pt", "c.pt"]],
                         ids=["long-names", "a-name-of-500-characters"])
def test_comparing_two_of_several_tabs_asks_in_a_dialog_that_fits(qtbot, names):
    from ckptview.gui.compare.tab import TabPairDialog

    paths = [os.path.join(FOLDER, name) for name in names]
    dialog = TabPairDialog(paths)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    ok, sizes = fits(dialog)
    assert ok, sizes
    assert dialog.paths() == (paths[0], paths[1])
    for combo in (dialog.combo_a, dialog.combo_b):  # the whole path where the name is cut
        assert [combo.itemData(i, Qt.ItemDataRole.ToolTipRole) for i in range(combo.count())] == paths


@pytest.mark.parametrize("name", ["torch.nn.modules.linear.Linear", HOSTILE])
def test_the_consent_to_run_code_fits_the_screen(qtbot, name):
    from ckptview.gui.panels.run import ask_trust

    parent = QWidget()
    qtbot.addWidget(parent)
    path = os.path.join(FOLDER, LONG_FILE)
    answer: list[bool] = []
    measure_box_while(qtbot, lambda: answer.append(ask_trust(parent, [(path, [name, "collections.OrderedDict"])])))
    assert answer == [False]


def test_replacing_exported_files_asks_in_a_box_that_fits(qtbot, tmp_path):
    import torch

    from ckptview.core.read.open import open_checkpoint
    from ckptview.gui.export.dialog import ExportDialog

    path = tmp_path / "model.pt"
    torch.save({HOSTILE: torch.ones(3), "b": torch.ones(2)}, path)
    dialog = ExportDialog(open_checkpoint(str(path)))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    ok, sizes = fits(dialog)
    assert ok, sizes
    files = [os.path.join(FOLDER, HOSTILE + ".npy"), os.path.join(FOLDER, "b.npy")]
    answer: list[bool] = []
    measure_box_while(qtbot, lambda: answer.append(dialog.confirm_overwrite(files)))
    assert answer == [False]

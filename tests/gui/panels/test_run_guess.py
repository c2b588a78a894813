"""The run panel guesses a CNN's input from its first convolution and speaks of its own fields (issue 25,
finding 7): it pre-filled `2,<in_features>` from the classifier (the run failed in conv2d) and told the
user to pass `--model`, a command-line flag."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ckptview.commands.wording import cli_words
from ckptview.core.message import Fix, Hint, Message
from ckptview.core.worker.device_probe import list_devices


def cnn_state_dict(path) -> str:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 10))
    torch.save(model.state_dict(), path)
    return str(path)


def test_cnn_prefills_an_image_batch_and_errors_name_the_fields(qtbot, tmp_path):
    from ckptview.gui.panels.run import RunPanel

    panel = RunPanel(path=cnn_state_dict(tmp_path / "cnn.pth"), devices=list_devices())
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(lambda: panel.input_edit.text() != "")
    assert panel.input_edit.text() == "2,3,32,32@float32=normal"
    assert panel.start_run() is False  # no model code for a state dict
    shown = panel.status_label.text()
    assert "Model code" in shown and "--model" not in shown and "--" not in panel.last_error


@pytest.mark.parametrize("fix", list(Fix))
def test_every_fix_of_the_core_is_worded_by_both_front_ends(fix):
    """A fix the core names reaches the command line as a flag or a command, and the window without one."""
    from ckptview.gui.base.wording import window_text

    said = Message("the reason", Hint(fix, ("a.pt", "b.pt")))
    cli, window = cli_words(said), window_text(said)
    assert str(said).startswith("the reason") and "--" not in str(said) and "ckptview " not in str(said)
    assert cli.startswith("the reason; ") and ("--" in cli or "`ckptview " in cli)
    assert window.startswith("the reason") and "--" not in window and "ckptview " not in window


@pytest.mark.parametrize(("said", "window"), [
    (Message("no input shape (the model does not declare one)", Hint(Fix.INPUT_SHAPE)), "Input field"),
    (Message("refusing to load the second checkpoint nobody trusted", Hint(Fix.TRUST_COMPARE)), "Compare with"),
    (Message("3 weights of the model not loaded", Hint(Fix.ALLOW_MISSING)), "Allow missing weights"),
])
def test_core_messages_speak_of_the_window(said, window):
    from ckptview.gui.base.wording import window_text

    words = window_text(said)
    assert window in words and "--" not in words

"""The run panel guesses a CNN's input from its first convolution and speaks of its own fields (issue 25,
finding 7): it pre-filled `2,<in_features>` from the classifier (the run failed in conv2d) and told the
user to pass `--model`, a command-line flag."""

from __future__ import annotations

import pytest
import torch
from torch import nn

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


@pytest.mark.parametrize(("core", "window"), [
    ("no input shape: pass --input-shape, e.g. 2,20 (the model does not declare one)", "Input field"),
    ("refusing to load the second checkpoint without --trust-compare: loading it imports and runs x",
     "Compare with"),
    ("--strict: lm_head.weight left at its initial value", "strict"),
])
def test_core_messages_speak_of_the_window(core, window):
    from ckptview.gui.panels.run import window_words

    words = window_words(core)
    assert window in words and "--" not in words

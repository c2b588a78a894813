"""A download cut short opens in its tab from the records before the cut, and says so (issue 45, defect 7)."""

from __future__ import annotations

import torch
from PySide6.QtWidgets import QLabel

from tests.support.guihelpers import wait_settled


def test_a_cut_file_opens_with_a_banner_saying_it_is_salvaged(qtbot, window, tmp_path):
    torch.manual_seed(0)
    torch.save({f"layer{i}.weight": torch.randn(64, 64) for i in range(6)}, tmp_path / "whole.pt")
    data = (tmp_path / "whole.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    (tab,) = window.open_paths([str(tmp_path / "cut.pt")])
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    banner = tab.findChild(QLabel, "bannerText")
    assert banner is not None and "incomplete download" in banner.text() and "salvaged" in banner.text()
    assert tab.select_name("layer0.weight")  # whole, before the cut
    assert tab.select_name("layer5.weight")  # cut off: listed, marked broken
    assert "cut off" in tab.detail.toPlainText()


def test_the_banner_of_a_trainer_folder_names_its_globals_once_and_briefly(qtbot, window, tmp_path):
    """An HF Trainer folder's banner took ten lines of a 640 px screen: the globals, then each file's warning
    naming them again. They are named once, the first few in the text, all in its tooltip."""
    import random

    import numpy as np
    from safetensors.torch import save_file

    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    save_file({"w": torch.ones(2)}, str(folder / "model.safetensors"))
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state()},
               folder / "rng_state.pth")
    import argparse
    import datetime
    import pathlib

    torch.save(argparse.Namespace(lr=0.1, output_dir=pathlib.PurePosixPath("/out"), when=datetime.date(2024, 1, 2)),
               folder / "training_args.bin")
    window.resize(1024, 640)
    (tab,) = window.open_paths([str(folder)])
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    banner = tab.findChild(QLabel, "bannerText")
    text = banner.text()
    assert "file references globals outside the safe set" not in text  # said once, by the first sentence
    unsafe = tab.checkpoint.unsafe_globals
    assert len(unsafe) > 4 and all(g in banner.toolTip() for g in unsafe)
    assert sum(g in text for g in unsafe) <= 4 and f"and {len(unsafe) - 4} more" in text

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

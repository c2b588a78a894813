"""The summary's Parameters is what `sum(p.numel() for p in model.parameters())` says, for a .pt2 too (its sample
inputs are no parameters)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pytestqt")

from ckptview.core import open_checkpoint  # noqa: E402
from ckptview.core.inspect.grouping import group_tree  # noqa: E402
from ckptview.gui.checkpoint.summary import SummaryHeader  # noqa: E402

pytestmark = pytest.mark.gui


def test_the_parameters_of_an_exported_program(qtbot, tmp_path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Flatten(),
                                torch.nn.LazyLinear(10))
    model(torch.randn(1, 3, 16, 16))
    program = torch.export.export(model.eval(), (torch.randn(4, 3, 16, 16),))
    path = tmp_path / "m.pt2"
    torch.export.save(program, path)
    truth = sum(p.numel() for p in model.parameters())
    ck = open_checkpoint(str(path))
    try:
        header = SummaryHeader(ck, group_tree(ck.root))
        qtbot.addWidget(header)
        assert header.facts["Parameters"] == f"{truth:,}"
        assert header.headline.endswith(f"{truth:,} parameters")
    finally:
        ck.close()

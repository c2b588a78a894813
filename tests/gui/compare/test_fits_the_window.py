"""A comparison never makes the window wider than it was (issue 35, finding 2): its one-line summary (counts,
the overall change, buffers, the other entries, what was stripped) widened a 1024 or 1280 px window to
1595 px, half of it off a laptop's screen; two long paths did the same."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.support import layout_checks as check
from tests.support.screens import rest

SIZES = [(1024, 640), (1280, 800)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two training checkpoints of a CNN with BatchNorm, the second with one more block, in deep folders."""
    folder = tmp_path_factory.mktemp("compare") / ("experiments_with_a_long_name_" * 4)
    folder.mkdir()
    torch.manual_seed(0)
    small = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.LazyLinear(4))
    small(torch.randn(1, 3, 8, 8))
    big = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8), nn.Flatten(),
                        nn.LazyLinear(4))
    big(torch.randn(1, 3, 8, 8))
    paths = []
    for i, model in enumerate((small, big)):
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.randn(2, 3, 8, 8)).sum().backward()
        optimizer.step()
        path = folder / f"checkpoint_of_the_run_with_the_longest_name_{i}.pt"
        torch.save({"model": {"module." + k if i else k: v for k, v in model.state_dict().items()},
                    "optimizer": optimizer.state_dict(), "epoch": i}, path)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_comparison_wraps_its_summary_and_cuts_its_paths(qtbot, window, pair, size):
    from ckptview.gui.compare.tab import open_diff

    window.resize(*size)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size)
    view = open_diff(window, *pair)
    qtbot.waitUntil(lambda: not view.busy, timeout=60_000)
    qtbot.waitUntil(lambda: "buffers" in view.summary_label.text())
    rest(lambda condition, timeout: qtbot.waitUntil(condition, timeout=timeout), window)  # layouts settled
    assert (window.width(), window.height()) == size
    assert view.summary_label.wordWrap() and view.summary_label.height() > view.summary_label.fontMetrics().height()
    for label, path in zip(view.path_labels, pair, strict=True):
        assert label.text() != label.whole_text() and path in label.toolTip()  # cut, whole in the tooltip
    assert not check.label_problems(view, "compare")

"""NaN, +Inf and -Inf have colours of their own in the heat-map and the values table (issue 25, finding 2).

Before, a NaN cell had the colour of 0.0 and the caption counted nothing; an infinity looked like the
largest finite value."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor

from tests.support.guihelpers import wait_settled


@pytest.fixture
def nonfinite_file(tmp_path) -> str:
    w = torch.zeros(6, 8)
    w[1, 2] = float("nan")
    w[3, 4] = float("inf")
    w[4, 6] = float("-inf")
    w[5, 7] = 2.0
    torch.save({"w": w}, tmp_path / "w.pth")
    return str(tmp_path / "w.pth")


def pixel(view, row: int, col: int) -> QColor:
    """The colour drawn at the centre of matrix cell (row, col) of the heat-map widget."""
    scene = view.plot.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))
    at = view.graphics.mapFromScene(scene)
    return view.graphics.grab().toImage().pixelColor(at)


def test_heatmap_draws_nan_and_infinities_in_their_own_colours(qtbot, window, nonfinite_file):
    from ckptview.gui.base.plots import nonfinite_colors

    tab = window.open_paths([nonfinite_file])[0]
    wait_settled(qtbot, tab)
    view = tab.show_panel("Heat-map")
    with qtbot.waitSignal(view.ready, timeout=20_000):
        assert tab.select_name("w")
    qtbot.waitUntil(lambda: view.graphics.isVisible() and view.graphics.height() > 100)
    zero = pixel(view, 0, 0)
    drawn = {name: pixel(view, r, c) for name, (r, c) in (("NaN", (1, 2)), ("+Inf", (3, 4)), ("-Inf", (4, 6)))}
    for name, color in drawn.items():
        assert color != zero, name
        assert color.name() == QColor(nonfinite_colors()[name]).name(), name
    assert len({c.name() for c in drawn.values()} | {zero.name(), pixel(view, 5, 7).name()}) == 5
    caption = view.status.text()
    assert "1 NaN" in caption and "1 +Inf" in caption and "1 -Inf" in caption


def test_values_table_marks_nan_and_infinities(qtbot, window, nonfinite_file):
    from ckptview.gui.base.plots import nonfinite_colors

    tab = window.open_paths([nonfinite_file])[0]
    wait_settled(qtbot, tab)
    view = tab.show_panel("Values")
    with qtbot.waitSignal(view.sliceReady, timeout=20_000):
        assert tab.select_name("w")
    model = view.model
    model.data(model.index(0, 0))  # asks for the tile
    qtbot.waitUntil(lambda: model.cell_text(1, 2) is not None, timeout=20_000)

    def foreground(r, c):
        brush = model.data(model.index(r, c), Qt.ItemDataRole.ForegroundRole)
        return None if brush is None else QColor(brush.color() if hasattr(brush, "color") else brush).name()

    assert foreground(1, 2) == QColor(nonfinite_colors()["NaN"]).name()
    assert foreground(3, 4) == QColor(nonfinite_colors()["+Inf"]).name()
    assert foreground(4, 6) == QColor(nonfinite_colors()["-Inf"]).name()
    assert foreground(0, 0) is None and foreground(5, 7) is None
    assert np.isnan(float(model.cell_text(1, 2)))

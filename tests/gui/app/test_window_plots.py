"""Issue 35's findings 5, 6 and 10 in the real window, as a person reaches them: a tab, its tree and its side
panels (the panels' own tests build each panel alone). One torch checkpoint: a 256 x 256 Linear (65,536
weights), a 1,280-long bias, a 2010 x 4096 matrix whose values tell their place, one NaN."""

from __future__ import annotations

import math

import pytest
import torch
from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtGui import QGuiApplication

from tests.gui.series.test_views import assert_no_overlap, texts
from tests.support.guihelpers import wait_settled


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"proj": torch.nn.Linear(256, 256), "head": torch.nn.Linear(64, 1280)})
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["proj.weight"][3, 4] = math.nan
    state["big"] = ((torch.arange(2010).reshape(-1, 1) * 7 + torch.arange(4096)) % 127).to(torch.int8)
    path = tmp_path_factory.mktemp("window_plots") / "model.pt"
    torch.save({"model": state, "step": 3}, path)
    return path, torch.load(path, weights_only=True)


@pytest.fixture
def tab(qtbot, window, saved):
    window.resize(1024, 640)
    (opened,) = window.open_paths([str(saved[0])])
    wait_settled(qtbot, opened)
    assert opened.state == "ready", opened.error_text
    return opened


def select(tab, *names: str) -> None:
    """Select these rows of the tree, as ctrl-clicks do."""
    assert tab.select_name(names[0])
    selection = tab.tree.selectionModel()
    for name in names[1:]:
        row = next(r for r in tab.top.walk() if r.name == name)
        selection.select(tab.model.index_of(row),
                         QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows)


def test_a_slice_in_the_values_panel_is_numbered_by_the_tensors_indices(qtbot, tab, saved):
    _path, ref = saved
    select(tab, "model.big")
    values = tab.show_panel("Values")
    with qtbot.waitSignal(values.sliceReady, timeout=20_000):
        values.spec.setText("[2000:2010, 4000:]")
        qtbot.keyClick(values.spec, Qt.Key.Key_Return)
    model = values.model
    assert [model.headerData(i, Qt.Orientation.Vertical) for i in (0, 9)] == ["2000", "2009"]
    assert [model.headerData(i, Qt.Orientation.Horizontal) for i in (0, 95)] == ["4000", "4095"]
    qtbot.waitUntil(lambda: model.cell_text(5, 2) is not None, timeout=20_000)
    assert model.cell_text(5, 2) == str(int(ref["model"]["big"][2005, 4002]))


def test_plots_of_the_side_panels_in_the_window(qtbot, tab):
    select(tab, "model.head.bias")
    heatmap = tab.show_panel("Heat-map")
    qtbot.waitUntil(lambda: heatmap.heatmap is not None and heatmap.heatmap.matrix_shape == (1, 1280),
                    timeout=20_000)
    qtbot.waitUntil(lambda: len(texts(heatmap.plot.getAxis("bottom"))) >= 2, timeout=10_000)
    assert [t for _, t in texts(heatmap.plot.getAxis("left"))] == ["0"]  # one row, one tick
    stats = tab.show_panel("Statistics")
    with qtbot.waitSignals([stats.statsReady, stats.histogram.exactReady], timeout=30_000):
        select(tab, "model.proj.weight", "model.head.bias")  # 65,536 and 1,280 values
    plots = stats.histogram.plot_items()
    assert len(plots) == 2  # a count axis each
    for plot in plots:
        qtbot.waitUntil(lambda p=plot: len(texts(p.getAxis("left"))) >= 2, timeout=10_000)
        assert_no_overlap(texts(plot.getAxis("left")))
    # The table copies whole, from the window's Ctrl+C with the table focused.
    QGuiApplication.clipboard().clear()
    stats.table.setFocus()
    qtbot.keyClick(stats.table, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    lines = QGuiApplication.clipboard().text().split("\n")
    assert lines[0] == "figure\tmodel.proj.weight\tmodel.head.bias" and any(line.startswith("NaN\t1 ") for line in lines)
    # Every plot the tab shows offers the one export action in its right-click menu.
    from ckptview.gui.base.plots import EXPORT_TEXT

    for view in (stats.histogram.plot, heatmap.graphics):
        assert [a.text() for a in view.scene().contextMenu] == [EXPORT_TEXT]


def test_the_tree_is_searched_and_sorted_by_a_figure(qtbot, tab, saved):
    _path, ref = saved
    tab.focus_filter()  # Ctrl+F
    with qtbot.waitSignal(tab.filter.applied, timeout=60_000):
        qtbot.keyClicks(tab.filter_edit, "nan>0")
        qtbot.keyClick(tab.filter_edit, Qt.Key.Key_Return)
    assert tab.model.match_count == 1 and "1 of" in tab.match_label.text()
    with qtbot.waitSignal(tab.filter.applied, timeout=60_000):
        tab.filter_edit.selectAll()
        qtbot.keyClicks(tab.filter_edit, "sort:-absmax")
        qtbot.keyClick(tab.filter_edit, Qt.Key.Key_Return)
    model_row = next(r for r in tab.model.kids(tab.top) if r.name == "model")
    first = tab.model.kids(model_row)[0]
    assert first.name == "model.big"  # |x| up to 126 in an int8 matrix: the largest there is
    assert "max |x| 126" in tab.model.data(tab.model.index_of(first), Qt.ItemDataRole.ToolTipRole)
    qtbot.keyClick(tab.filter_edit, Qt.Key.Key_Escape)
    assert tab.filter_edit.text() == "" and tab.model.figure_order is None

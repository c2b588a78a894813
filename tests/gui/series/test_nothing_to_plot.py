"""The series tab's plots say when there is nothing to plot, and show something for a module (issue 35, finding 5).

A stalled tensor's update-ratio plot was empty on an axis pyqtgraph made up (0.01-0.1 on a log scale), and
the Histograms view opened on empty -0.5..0.5 axes because the default selection is modules.
"""

from __future__ import annotations

import torch

from ckptview.gui.base.plots import nothing_text
from tests.gui.series.test_views import open_tab, texts
from tests.support.series_run import STEPS, make_run


def test_a_stalled_tensor_says_its_update_ratio_is_zero(qtbot, tmp_path):
    torch.manual_seed(0)
    frozen = torch.nn.Linear(8, 8)
    for step in (1, 2, 3):
        moving = torch.nn.Linear(8, 8)
        torch.save({"step": step, "model": {"frozen.weight": frozen.weight.detach(),
                                            "moving.weight": moving.weight.detach()}}, tmp_path / f"s{step}.pt")
    tab = open_tab(qtbot, [tmp_path])
    assert tab.result.tensors["model.frozen.weight"].update_ratio[1:] == [0.0, 0.0]
    assert tab.select_tensor("model.frozen.weight")
    lines = tab.lines
    assert nothing_text(lines.norm_plot) == ""  # its norm is drawn
    said = nothing_text(lines.ratio_plot)
    assert "0 at every step" in said and "did not change" in said
    assert not lines.ratio_plot.getAxis("left").style["showValues"]  # no made-up 0.01-0.1 range
    assert lines.norm_plot.getAxis("left").style["showValues"]
    # A tensor that moves: both plots draw, and nothing is said.
    assert tab.select_tensor("model.moving.weight")
    assert nothing_text(lines.ratio_plot) == "" and lines.ratio_plot.getAxis("left").style["showValues"]
    assert len(lines.ratio_plot.listDataItems()) == 1
    # Steps 1, 2, 3 tick at whole steps: no invented 1.5 and 2.5 between them (in every plot of the run).
    for plot in (lines.norm_plot, lines.ratio_plot):
        qtbot.waitUntil(lambda p=plot: len(texts(p.getAxis("bottom"))) >= 2, timeout=10_000)
        assert {t for _, t in texts(plot.getAxis("bottom"))} <= {"1", "2", "3"}
    # With the log scale off, a ratio of 0 has its place.
    assert tab.select_tensor("model.frozen.weight")
    lines.log_box.setChecked(False)
    assert nothing_text(lines.ratio_plot) == "" and len(lines.ratio_plot.listDataItems()) == 1


def test_the_histograms_view_shows_a_tensor_of_the_selected_module(qtbot, tmp_path):
    make_run(tmp_path / "run")
    tab = open_tab(qtbot, [tmp_path / "run"])
    assert tab.selected() and all(kind == "module" for kind, _ in tab.selected())  # the default selection
    with qtbot.waitSignal(tab.histograms_ready, timeout=60_000) as ready:
        tab.views.setCurrentWidget(tab.histograms)
        tab._on_selection_changed()
    name, hists = ready.args[0]
    module = tab.selected()[0][1]
    assert name.startswith(module + ".")
    members = [n for n, s in tab.result.tensors.items() if n.startswith(module + ".") and s.shape]
    assert name == max(members, key=lambda n: torch.Size(tab.result.tensors[n].shape).numel())
    view = tab.histograms
    assert view.counts.shape[1] == len(STEPS) and view.counts.sum() > 0
    assert nothing_text(view.plot) == "" and "largest tensor" in view.status.text()
    qtbot.waitUntil(lambda: len(texts(view.plot.getAxis("bottom"))) >= 2, timeout=10_000)
    columns = [t for _, t in texts(view.plot.getAxis("bottom"))]  # a column per checkpoint, by its number
    assert all(t.isdigit() and int(t) < len(STEPS) for t in columns), columns
    # A selection with no tensor at all says so in the plot, not on empty axes.
    tab.tree.clearSelection()
    assert "Select a tensor" in nothing_text(view.plot)

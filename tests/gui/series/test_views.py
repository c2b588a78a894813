"""The series tab's views on the issue's run folder (issue 25.3): heat-map colours and legend, named rows and step
columns, labelled log ticks, no overlapping labels, legends outside the data, a default selection, findings that
select and mark, NaN/Inf visible; unsafe globals in the findings (issue 24.14)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter

from ckptview.gui.series.plots import HEAT_FLOOR
from ckptview.gui.series.tab import SeriesTab
from tests.core.series.test_timeline import flat
from tests.support.series_run import STEPS, make_run


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("issue_run_gui") / "run"
    make_run(folder)
    return folder


def open_tab(qtbot, paths, size=(1024, 640)) -> SeriesTab:
    tab = SeriesTab([str(p) for p in paths])
    qtbot.addWidget(tab)
    tab.resize(*size)
    tab.show()
    qtbot.waitExposed(tab)
    with qtbot.waitSignal(tab.finished, timeout=120_000):
        tab.start()
    return tab


def texts(axis) -> list[tuple[QRectF, str]]:
    """The tick labels an axis draws now, with their rectangles (pyqtgraph's own layout of them)."""
    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    if specs is None:
        return []
    return [(QRectF(rect), text) for rect, _flags, text in specs[2]]


def assert_no_overlap(labels: list[tuple[QRectF, str]]) -> None:
    for i, (a, ta) in enumerate(labels):
        for b, tb in labels[i + 1:]:
            assert not a.intersects(b), (ta, tb)


def hexes(rgba: np.ndarray) -> str:
    return QColor(int(rgba[0]), int(rgba[1]), int(rgba[2])).name()


def distance(a: str, b: str) -> int:
    ca, cb = QColor(a), QColor(b)
    return abs(ca.red() - cb.red()) + abs(ca.green() - cb.green()) + abs(ca.blue() - cb.blue())


def test_heatmap_colours_legend_rows_and_columns(qtbot, run_folder):
    tab = open_tab(qtbot, [run_folder])
    tab.views.setCurrentWidget(tab.heatmap)
    heat = tab.heatmap
    names = list(tab.result.tensors)
    colors = heat.colors

    def cell(name, t):
        return hexes(heat.rgba[names.index(name), t])

    assert cell("model.conv2.weight", 0) == colors["absent"]  # added at step 20
    assert cell("model.conv1.weight", 0) == colors["first"]  # nothing to compare with
    assert cell("model.conv2.weight", 2) == colors["first"]  # new here
    assert cell("model.fc.weight", 4) == colors["nan"]  # one NaN from step 40
    # A value cell: the colour bar's colour of log10(ratio).
    ratio = tab.result.tensors["model.conv1.weight"].update_ratio[1]
    level = (math.log10(ratio) - HEAT_FLOOR) / (heat.top - HEAT_FLOOR)
    expected = heat.colormap.map(np.array([level]), mode="byte")[0]
    assert np.abs(heat.rgba[names.index("model.conv1.weight"), 1, :3].astype(int) - expected[:3]).max() <= 2
    # Every category colour differs from the others and from the bottom of the colour bar.
    bottom = hexes(heat.colormap.map(np.array([0.0]), mode="byte")[0])
    palette = [*colors.values(), bottom]
    for i, a in enumerate(palette):
        for b in palette[i + 1:]:
            assert distance(a, b) >= 60, (a, b)
    # The legend names every colour drawn outside the colour bar.
    legend = dict(heat.legend_entries())
    drawn = {hexes(heat.rgba[r, c]) for r in range(len(names)) for c in range(len(STEPS))
             if heat.kinds[r, c] != 0}
    assert drawn <= set(legend.values())
    assert {"absent", "nan"} <= {k for k, v in colors.items() if v in drawn}
    assert "NaN" in heat.legend.text() and "absent" in heat.legend.text()
    assert heat.legend.isVisible()
    # NaN counted in the caption.
    assert "NaN" in heat.note.text()
    # Rows are named by tensor, columns by step; the labels do not overlap.
    qtbot.waitUntil(lambda: heat.isVisible() and len(texts(heat.plot.getAxis("left"))) >= 5, timeout=10_000)
    rows = texts(heat.plot.getAxis("left"))
    assert len(rows) >= 5 and all(any(t.replace("…", "") in n or _elided(t, n) for n in names) for _, t in rows)
    assert_no_overlap(rows)
    columns = [t for _, t in texts(heat.plot.getAxis("bottom"))]
    assert columns == [str(s) for s in STEPS]
    assert heat.plot.getAxis("bottom").labelText == "step"


def _elided(shown: str, name: str) -> bool:
    head, _, tail = shown.partition("…")
    return name.startswith(head) and name.endswith(tail)


def test_heatmap_unchanged_and_inf_have_their_own_colours(qtbot, tmp_path):
    for step in (1, 2, 3):
        boom = torch.arange(4.0) * step
        if step >= 2:
            boom[1] = float("inf")
            boom[2] = float("-inf")
        torch.save({"step": step, "frozen": torch.ones(4), "boom": boom, "moving": torch.arange(4.0) * step},
                   tmp_path / f"s{step}.pt")
    tab = open_tab(qtbot, [tmp_path])
    heat = tab.heatmap
    names = list(tab.result.tensors)
    assert hexes(heat.rgba[names.index("frozen"), 1]) == heat.colors["unchanged"]
    assert hexes(heat.rgba[names.index("frozen"), 2]) == heat.colors["unchanged"]
    assert hexes(heat.rgba[names.index("boom"), 1]) == heat.colors["inf"]
    assert heat.kinds[names.index("moving"), 1] == 0
    assert "Inf" in heat.note.text() and "2 cells" in heat.note.text()
    assert "unchanged" in heat.legend.text() and "Inf" in heat.legend.text()


def test_default_selection_lines_legend_and_ticks(qtbot, run_folder):
    tab = open_tab(qtbot, [run_folder])
    # The largest modules (by the number of floating-point values in the last checkpoint), not empty plots.
    last = flat(torch.load(run_folder / f"step_{STEPS[-1]}.pt", weights_only=True))
    sizes: dict[str, int] = {}
    for name, value in last.items():
        if name.startswith("model.") and value.is_floating_point():
            module = name.rsplit(".", 1)[0]
            sizes[module] = sizes.get(module, 0) + value.numel()
    largest = sorted(sizes, key=lambda m: -sizes[m])[:4]
    assert sorted(name for _, name in tab.selected()) == sorted(largest)
    assert all(kind == "module" for kind, _ in tab.selected())
    lines = tab.lines
    assert len(lines.norm_plot.listDataItems()) == 4
    tab.views.setCurrentWidget(lines)  # a run that logged a loss opens on its Scalars view
    # The legend sits outside the data.
    legend_rect = lines.legend.geometry()
    plot_rect = lines.graphics.mapFromScene(lines.norm_plot.vb.sceneBoundingRect()).boundingRect()
    plot_rect.translate(lines.graphics.pos())
    assert lines.legend.isVisible() and not legend_rect.intersects(plot_rect)
    assert all(f"{m} (module)" in lines.legend.text() for m in largest)
    # Both plots have labelled ticks, none overlapping, whatever the range.
    for plot in (lines.norm_plot, lines.ratio_plot):
        # The view takes its new range when it next paints: wait for it, then read what the axis draws.
        qtbot.waitUntil(lambda p=plot: len(texts(p.getAxis("left"))) >= 2, timeout=10_000)
        left = texts(plot.getAxis("left"))
        assert_no_overlap(left)
        assert_no_overlap(texts(plot.getAxis("bottom")))
    # Four tensors of very different sizes selected: labelled ticks, none overlapping.
    tab.tree.clearSelection()
    for name in ("model.conv1.weight", "model.bn1.running_var", "optimizer.state.fc.weight.exp_avg_sq",
                 "model.bn2.bias"):
        tab._items[name].setSelected(True)
    assert len(lines.series) == 4
    for plot in (lines.norm_plot, lines.ratio_plot):
        # The view takes its new range when it next paints: wait for it, then read what the axis draws.
        qtbot.waitUntil(lambda p=plot: len(texts(p.getAxis("left"))) >= 2, timeout=10_000)
        left = texts(plot.getAxis("left"))
        assert_no_overlap(left)
        assert_no_overlap(texts(plot.getAxis("bottom")))
    # A tensor whose norm stays within one decade still has labelled ticks on the log axis.
    tab.select_tensor("model.bn1.weight")
    norms = [v for v in tab.result.tensors["model.bn1.weight"].figure("norm") if v]
    assert max(norms) / min(norms) < 10
    def within_one_decade() -> bool:
        lo, hi = lines.norm_plot.vb.viewRange()[1]  # log10 of the norms shown
        return hi - lo < 1

    qtbot.waitUntil(within_one_decade, timeout=10_000)
    left = texts(lines.norm_plot.getAxis("left"))
    values = [float(t) for _, t in left]
    assert len(values) >= 2 and len(set(values)) == len(values)
    assert_no_overlap(left)


def test_clicking_the_nan_finding_selects_the_tensor_and_marks_the_step(qtbot, run_folder):
    tab = open_tab(qtbot, [run_folder])
    items = [tab.findings_list.item(i) for i in range(tab.findings_list.count())]
    nan = next(i for i in items if " nan " in i.text() and "model.fc.weight" in i.text())
    tab.findings_list.scrollToItem(nan)
    qtbot.mouseClick(tab.findings_list.viewport(), Qt.MouseButton.LeftButton,
                     pos=tab.findings_list.visualItemRect(nan).center())
    assert tab.selected() == [("tensor", "model.fc.weight")]
    for marker in tab.lines.markers:
        assert marker.isVisible() and marker.value() == 40.0
    assert "step 40" in tab.lines.markers[0].label.toPlainText()
    # Its line carries a red cross where it holds NaN, also at step 50 where no value is finite (no norm).
    xs, ys = tab.lines.crosses["model.fc.weight"]
    assert list(xs) == [40.0, 50.0] and np.isfinite(ys).all()
    assert "NaN/Inf" in tab.lines.legend.text()
    row = list(tab.result.tensors).index("model.fc.weight")
    assert tab.heatmap.marked == (row, STEPS.index(40))
    assert tab.heatmap.marker.isVisible()
    # The NaN is visible: the tree counts its values, the heat-map cell has the NaN colour.
    last = flat(torch.load(run_folder / f"step_{STEPS[-1]}.pt", weights_only=True))["model.fc.weight"]
    item = tab._items["model.fc.weight"]
    assert item.text(4) == f"{int(torch.isnan(last).sum())}/{int(torch.isinf(last).sum())}"
    assert item.text(2) == "no finite"  # every value NaN at the last step: no norm, not a zero one


def test_unsafe_checkpoint_is_a_finding_in_the_tab(qtbot, tmp_path):
    from tests.core.series.test_truth import Exec

    marker = tmp_path / "ran"
    for step in (1, 2):
        state = {"step": step, "w": torch.ones(3) * step}
        if step == 2:
            state["hook"] = Exec(f"open({str(marker)!r}, 'w').close()")
        torch.save(state, tmp_path / f"s{step}.pt")
    tab = open_tab(qtbot, [tmp_path])
    items = [tab.findings_list.item(i).text() for i in range(tab.findings_list.count())]
    assert any("unsafe" in t and "builtins.exec" in t and "s2.pt" in t for t in items)
    assert "unsafe" in tab.summary_label.text()
    assert not marker.exists()


def test_histograms_of_optimizer_state_named_by_parameter(qtbot, run_folder):
    tab = open_tab(qtbot, [run_folder])
    with qtbot.waitSignal(tab.histograms_ready, timeout=60_000) as blocker:
        assert tab.select_tensor("optimizer.state.fc.weight.exp_avg")
    name, hists = blocker.args[0]
    assert name == "optimizer.state.fc.weight.exp_avg"
    # Found in every checkpoint although its id changed when the optimizer was rebuilt at step 20.
    assert all(h is not None for h in hists)
    assert [int(h.counts.sum() + h.nan + h.posinf + h.neginf) for h in hists] == [12] * len(STEPS)


def test_checkpoint_resaved_while_the_tab_reads_it_is_reported_and_the_rest_shown(qtbot, run_folder, tmp_path,
                                                                                 monkeypatch):
    import shutil

    from ckptview.core.series import timeline as series_mod
    from ckptview.core.series.cells import UNREADABLE

    run = tmp_path / "run"
    shutil.copytree(run_folder, run)
    victim = str(run / "step_30.pt")
    real_entries = series_mod.series_entries
    listed: list[str] = []

    def listing(ckpt):
        listed.append(ckpt.path)
        if ckpt.path == victim and listed.count(victim) == 2:  # planned; now the worker reads its values
            with open(victim, "r+b") as fh:
                fh.truncate(0)
            torch.save({"step": 30, "w": torch.ones(3)}, victim)
        return real_entries(ckpt)

    monkeypatch.setattr(series_mod, "series_entries", listing)
    tab = open_tab(qtbot, [run])
    assert tab.state == "ready"
    texts_ = [tab.findings_list.item(i).text() for i in range(tab.findings_list.count())]
    bad = [t for t in texts_ if " unreadable " in t]
    assert len(bad) == 1 and "step_30.pt" in bad[0] and "changed on disk" in bad[0]
    assert (tab.heatmap.kinds[:, 3] == UNREADABLE).all()
    assert hexes(tab.heatmap.rgba[0, 3]) == tab.heatmap.colors["unreadable"]
    _, norms, _ = tab.lines.line("model.conv1 (module)")
    assert np.isnan(norms[3]) and np.isfinite(norms[[0, 1, 2, 4]]).all()

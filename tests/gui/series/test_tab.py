"""The series tab driven with qtbot: read a trained run, read back its lines, findings, heat-map and histograms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import Qt

from ckptview.cli import window_args
from ckptview.gui.app.launch import launch
from ckptview.gui.base.workers import wait_for_workers
from ckptview.gui.series.plots import HEAT_FLOOR
from ckptview.gui.series.tab import SeriesTab
from tests.core.series.test_timeline import STEPS, flat, torch_figures, torch_update, train_run


def open_tab(qtbot, paths: list[str]) -> tuple[SeriesTab, list[int]]:
    tab = SeriesTab(paths)
    qtbot.addWidget(tab)
    done: list[int] = []
    tab.checkpoint_done.connect(done.append)
    with qtbot.waitSignal(tab.finished, timeout=120_000):
        tab.start()
    return tab, done


def findings_text(tab: SeriesTab) -> list[str]:
    return [tab.findings_list.item(i).text() for i in range(tab.findings_list.count())]


def click_item(qtbot, widget, item) -> None:
    qtbot.mouseClick(widget.viewport(), Qt.MouseButton.LeftButton, pos=widget.visualItemRect(item).center())


def test_run_tab_lines_findings_and_histograms(qtbot, tmp_path):
    paths = train_run(tmp_path / "run", freeze=True, nan_at=4)
    tab, done = open_tab(qtbot, [str(tmp_path / "run")])
    assert done == list(range(STEPS))  # results arrived checkpoint by checkpoint
    assert tab.state == "ready" and not tab.progress.isVisible()
    assert "6 checkpoints" in tab.summary_label.text() and "step" in tab.summary_label.text()
    texts = findings_text(tab)
    assert any("stalled" in t and "model.embed.weight" in t and t.startswith("step 2") for t in texts)
    nan_row = next(i for i, t in enumerate(texts) if " nan " in t)
    assert texts[nan_row].startswith("step 4") and "model.head.weight" in texts[nan_row]

    # Clicking the finding selects its tensor; its lines and histograms follow.
    item = tab.findings_list.item(nan_row)
    tab.findings_list.scrollToItem(item)
    with qtbot.waitSignal(tab.histograms_ready, timeout=60_000) as hist_signal:
        click_item(qtbot, tab.findings_list, item)
    assert tab.selected() == [("tensor", "model.head.weight")]
    loaded = [flat(torch.load(p, weights_only=True)) for p in paths]
    x, norms, ratios = tab.lines.line("model.head.weight")
    assert list(x) == [float(s) for s in range(1, STEPS + 1)]
    for t, state in enumerate(loaded):
        assert norms[t] == pytest.approx(torch_figures(state["model.head.weight"])["norm"], rel=1e-9)
        if t:
            expected, _ = torch_update(loaded[t - 1]["model.head.weight"], state["model.head.weight"])
            assert (np.isnan(ratios[t]) if expected is None else ratios[t] == pytest.approx(expected, rel=1e-9))
    assert np.isnan(ratios[0])
    curves = tab.lines.norm_plot.listDataItems()
    shown = np.where(norms > 0, norms, np.nan)  # log scale (the default): a zero norm has no place
    assert len(curves) == 1 and np.allclose(curves[0].yData, shown, equal_nan=True)

    # Histograms over steps: one column per checkpoint, on one range, exact against numpy.
    name, hists = hist_signal.args[0]
    assert name == "model.head.weight" and len(hists) == STEPS
    values = [s["model.head.weight"].double().numpy().ravel() for s in loaded]
    finite = np.concatenate([v[np.isfinite(v)] for v in values])
    for t, v in enumerate(values):
        expected = np.histogram(v[np.isfinite(v)], 64, (finite.min(), finite.max()))[0]
        assert np.array_equal(tab.histograms.counts[:, t], expected)
        assert hists[t].nan == int(np.isnan(v).sum())

    # The heat-map: the frozen layer is at the floor from step 2 on; the first column is empty.
    row = list(tab.result.tensors).index("model.embed.weight")
    assert np.all(tab.heatmap.matrix[row, 1:] == HEAT_FLOOR) and np.isnan(tab.heatmap.matrix[row, 0])

    # A module row draws the module's aggregate; the log switch keeps the data.
    tab.select_tensor("model.embed.weight")
    module_item = tab._items["model.embed.weight"].parent()
    tab.tree.clearSelection()
    module_item.setSelected(True)
    assert tab.selected() == [("module", "model.embed")]
    _, module_norms, module_ratios = tab.lines.line("model.embed (module)")
    both = [torch.cat([s["model.embed.weight"].double().ravel(), s["model.embed.bias"].double().ravel()])
            for s in loaded]
    assert module_norms == pytest.approx([float(v.norm()) for v in both], rel=1e-9)
    assert list(module_ratios[1:]) == [0.0] * (STEPS - 1)
    tab.lines.log_box.setChecked(False)
    assert np.allclose(tab.lines.ratio_plot.listDataItems()[0].yData[1:], 0.0)


def test_layer_added_shows_in_tree_and_findings(qtbot, tmp_path):
    train_run(tmp_path / "run", grow_at=4)
    tab, _ = open_tab(qtbot, [str(tmp_path / "run")])
    assert "model.extra.weight" in tab._items
    texts = findings_text(tab)
    assert any(t.startswith("step 4") and "appeared" in t and "model.extra.weight" in t for t in texts)
    assert any("shape_changed" in t and "[16, 6] -> [16, 8]" in t for t in texts)
    tab.select_tensor("model.extra.weight")
    _, norms, _ = tab.lines.line("model.extra.weight")
    assert np.isnan(norms[:3]).all() and np.isfinite(norms[3:]).all()


def test_not_a_run_is_one_message_in_the_tab(qtbot, tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    tab = SeriesTab([str(tmp_path)])
    qtbot.addWidget(tab)
    with qtbot.waitSignal(tab.failed, timeout=30_000) as blocker:
        tab.start()
    assert "holds no checkpoint" in blocker.args[0]
    assert tab.summary_label.text().startswith("error: ") and tab.state == "error"


def test_window_opens_a_run_from_the_command_line_and_closing_cancels(qtbot, settings, server_name, tmp_path):
    train_run(tmp_path / "run", steps=3)
    window = launch(window_args(["--series", str(tmp_path / "run")]), settings, server_name)
    qtbot.addWidget(window)
    tab = window.tabs.currentWidget()
    assert isinstance(tab, SeriesTab) and window.tabs.tabText(window.tabs.currentIndex()) == "Series: run"
    assert window.menus.open_series_action in window.menus["File"].actions()
    qtbot.waitUntil(lambda: tab.state != "loading", timeout=60_000)
    assert tab.result is not None and tab.result.done == 3
    # A second series tab, closed at once: its reading stops and nothing fires into the deleted tab.
    second = window.open_series([str(tmp_path / "run")])
    worker = second._worker
    window.close_tab(window.tabs.indexOf(second))
    assert wait_for_workers(60_000) and worker.is_done
    window.close()


def test_truncated_checkpoint_is_a_finding_and_the_rest_shows(qtbot, tmp_path):
    import os

    paths = train_run(tmp_path / "run", steps=4)
    os.truncate(paths[1], os.path.getsize(paths[1]) // 3)
    tab, done = open_tab(qtbot, [str(tmp_path / "run")])
    assert done == [0, 1, 2, 3] and tab.state == "ready"
    texts = findings_text(tab)
    # the cut file is listed from the records before the cut (issue 45): what the cut took is unreadable
    assert any(t.startswith("step 2") and "unreadable" in t and "cut off" in t for t in texts), texts
    tab.select_tensor("model.head.weight")
    _, norms, ratios = tab.lines.line("model.head.weight")
    assert np.isnan(norms[1]) and np.isfinite(norms[[0, 2, 3]]).all()
    assert np.isnan(ratios[2]) and np.isfinite(ratios[3])  # no ratio across the hole


def test_a_single_checkpoint_is_no_timeline(qtbot, tmp_path):
    """One checkpoint showed as a one-step "timeline": the tab says a series needs two."""
    torch.save({"w": torch.ones(3)}, tmp_path / "step1.pt")
    tab = SeriesTab([str(tmp_path)])
    qtbot.addWidget(tab)
    with qtbot.waitSignals([tab.finished], timeout=60_000, raising=False):
        tab.start()
    text = tab.summary_label.text()
    assert "at least two" in text and "1 checkpoints" not in text, text

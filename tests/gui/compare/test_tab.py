"""The comparison tab driven with qtbot: open a diff, sort, filter, select a row, read the overlay."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import Qt

from ckptview.gui.compare.tab import COLUMN, CompareTab, compare_open_tabs, compare_with
from tests.support.guihelpers import wait_settled


@pytest.fixture
def pair(tmp_path):
    g = torch.Generator().manual_seed(0)
    sd = {"enc.w": torch.randn(40, 30, generator=g), "enc.b": torch.zeros(30),
          "head.w": torch.randn(10, 40, generator=g), "gone": torch.ones(3)}
    torch.save(sd, tmp_path / "a.pth")
    sd_b = {"module." + k: v.clone() for k, v in sd.items() if k != "gone"}
    sd_b["module.enc.w"] += 0.001 * torch.randn(40, 30, generator=g)
    sd_b["module.head.w"] += 0.5 * torch.randn(10, 40, generator=g)  # the layer that moved most
    sd_b["module.new"] = torch.zeros(2)
    torch.save(sd_b, tmp_path / "b.pth")
    return str(tmp_path / "a.pth"), str(tmp_path / "b.pth"), sd, sd_b


def open_view(qtbot, a: str, b: str) -> CompareTab:
    view = CompareTab(a, b)
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.finished, timeout=20_000):
        view.start()
    return view


def test_sort_select_and_overlay(qtbot, pair):
    a, b, sd, sd_b = pair
    view = open_view(qtbot, a, b)
    assert "module." in view.summary_label.text() and "2 changed" in view.summary_label.text()
    assert view.result.summary() == {"changed": 2, "identical": 1, "only_a": 1, "only_b": 1}
    # Sort by relative change, largest first: head.w moved most.
    view.table.sortByColumn(COLUMN["rel_l2"], Qt.SortOrder.DescendingOrder)
    first = view.proxy.index(0, COLUMN["name"]).data()
    assert first == "head.w"
    assert view.proxy.index(1, COLUMN["name"]).data() == "enc.w"
    # The plot shows relative change in model order.
    x, y = view.rel_series()
    assert list(x) == [0, 1, 2] and y[2] == max(y)
    # Select the top row: the overlay gets A and B on one range, and B - A.
    with qtbot.waitSignal(view.histograms_ready, timeout=20_000):
        view.table.selectRow(0)
    assert view.current_row().name == "head.w"
    counts = view.overlay_counts()
    ta, tb = sd["head.w"].double().numpy().ravel(), sd_b["module.head.w"].double().numpy().ravel()
    lo, hi = min(ta.min(), tb.min()), max(ta.max(), tb.max())
    assert np.array_equal(counts["a"], np.histogram(ta, 100, (lo, hi))[0])
    assert np.array_equal(counts["b"], np.histogram(tb, 100, (lo, hi))[0])
    d = (sd_b["module.head.w"].double() - sd["head.w"].double()).numpy().ravel()
    assert np.array_equal(counts["diff"], np.histogram(d, 100, (d.min(), d.max()))[0])
    assert len(view.hist_plot.plotItem.listDataItems()) == 2
    # Filters: by name and by status.
    view.filter_edit.setText("enc")
    assert view.proxy.rowCount() == 2
    view.filter_edit.clear()
    view.status_combo.setCurrentIndex(view.status_combo.findData("only_b"))
    assert view.proxy.rowCount() == 1 and view.proxy.index(0, COLUMN["name"]).data() == "new"
    view.status_combo.setCurrentIndex(view.status_combo.findData("differences"))
    assert view.proxy.rowCount() == 4


def test_one_sided_row_shows_one_histogram(qtbot, pair):
    a, b, _, _ = pair
    view = open_view(qtbot, a, b)
    row = next(i for i, r in enumerate(view.model.rows) if r.status == "only_a")
    with qtbot.waitSignal(view.histograms_ready, timeout=20_000):
        view.select_row(row)
    counts = view.overlay_counts()
    assert counts["b"] is None and counts["diff"] is None and counts["a"].sum() == 3


def test_error_is_shown_in_place(qtbot, tmp_path, pair):
    a, _, _, _ = pair
    (tmp_path / "junk.pth").write_text("not a checkpoint at all")
    view = CompareTab(a, str(tmp_path / "junk.pth"))
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.failed, timeout=20_000):
        view.start()
    assert "not a checkpoint" in view.summary_label.text()


def test_ways_in_from_the_window(qtbot, window, pair):
    a, b, _, _ = pair
    window.open_diff(a, b)  # what `ckptview --diff A B` calls
    view = window.tabs.currentWidget()
    assert isinstance(view, CompareTab)
    qtbot.waitUntil(lambda: not view.busy, timeout=20_000)
    tabs = window.open_paths([a, b])
    for tab in tabs:
        wait_settled(qtbot, tab)
    view2 = compare_open_tabs(window)
    assert isinstance(view2, CompareTab) and (view2.path_a, view2.path_b) == (tabs[0].path, tabs[1].path)
    window.tabs.setCurrentWidget(tabs[1])
    view3 = compare_with(window, a)
    assert (view3.path_a, view3.path_b) == (tabs[1].path, view.path_a)
    for v in (view2, view3):
        qtbot.waitUntil(lambda v=v: not v.busy, timeout=20_000)
    window.close_tab(window.tabs.indexOf(view3))  # closing releases the view's files
    assert any(a.text() == "Compare With…" for a in window.menus.menu("Tools").actions())


def test_sections_weights_and_other_entries(qtbot, tmp_path):
    """Optimizer state is its own section, named by parameter; the headline counts the weights only."""
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    paths = []
    for step in (1, 2):
        opt.zero_grad()
        net(torch.randn(2, 4)).sum().backward()
        opt.step()
        torch.save({"model_state_dict": {k: v.clone() for k, v in net.state_dict().items()},
                    "optimizer_state_dict": opt.state_dict()}, tmp_path / f"s{step}.pt")
        paths.append(str(tmp_path / f"s{step}.pt"))
    view = open_view(qtbot, *paths)
    text = view.summary_label.text()
    assert "2 model weights" in text and "other entries" in text
    view.status_combo.setCurrentIndex(view.status_combo.findData("section:other"))
    names = {view.proxy.index(r, COLUMN["name"]).data() for r in range(view.proxy.rowCount())}
    assert {"exp_avg of weight", "exp_avg_sq of bias", "step of weight"} <= names
    assert {view.proxy.index(r, COLUMN["section"]).data() for r in range(view.proxy.rowCount())} == {"other"}
    view.status_combo.setCurrentIndex(view.status_combo.findData("section:weights"))
    assert view.proxy.rowCount() == 2



def test_a_diff_of_thousands_of_rows_reaches_the_window_in_a_few_updates(qtbot, tmp_path, monkeypatch):
    """Rows finish far faster than a window can show them: progress is coalesced in the worker (clock
    faked: one millisecond per reading) and the summary is redrawn on a timer, not once per row (each
    redraw counts every row: per row, a 100,000-tensor diff froze the window)."""
    import ckptview.gui.compare.tab as diff_view

    g = torch.Generator().manual_seed(1)
    sd = {f"layers.{i}.w": torch.randn(3, generator=g) for i in range(3000)}
    sd_b = {k: v + (1 if i % 10 == 0 else 0) for i, (k, v) in enumerate(sd.items())}
    torch.save(sd, tmp_path / "a.pth")
    torch.save(sd_b, tmp_path / "b.pth")
    ticks = iter(range(10**9))
    monkeypatch.setattr(diff_view, "_clock", lambda: next(ticks) / 1000)
    delivered, summaries = [], []
    view = CompareTab(str(tmp_path / "a.pth"), str(tmp_path / "b.pth"))
    qtbot.addWidget(view)
    view.job.yielded.connect(delivered.append)
    real = view.update_summary
    monkeypatch.setattr(view, "update_summary", lambda *a, **k: (summaries.append(1), real(*a, **k)))
    with qtbot.waitSignal(view.finished, timeout=60_000):
        view.start()
    assert len(delivered) <= 3000 // 50, len(delivered)  # one per 100 ms of the faked clock, and the last
    assert len(summaries) <= len(delivered) + 2
    assert view.result.summary() == {"changed": 300, "identical": 2700}
    assert "300 changed" in view.summary_label.text()
    rows = view.model.rows
    assert all(r.done for r in rows) and view.model.index(2999, COLUMN["name"]).data() == "layers.2999.w"


def test_sorting_and_filtering_keep_the_selection_and_put_rows_without_figures_last(qtbot, pair):
    a, b, _, _ = pair
    view = open_view(qtbot, a, b)
    names = lambda: [view.proxy.index(r, COLUMN["name"]).data() for r in range(view.proxy.rowCount())]  # noqa: E731
    view.select_row(next(i for i, r in enumerate(view.model.rows) if r.name == "enc.w"))
    # Descending by relative change: the rows without one (one side only) last, in model order.
    view.table.sortByColumn(COLUMN["rel_l2"], Qt.SortOrder.DescendingOrder)
    assert names() == ["head.w", "enc.w", "enc.b", "new", "gone"]
    assert view.current_row().name == "enc.w"  # the selection follows its row
    view.table.sortByColumn(COLUMN["rel_l2"], Qt.SortOrder.AscendingOrder)
    assert names() == ["new", "gone", "enc.b", "enc.w", "head.w"]
    view.filter_edit.setText("w")  # enc.w, head.w and new stay
    assert names() == ["new", "enc.w", "head.w"] and view.current_row().name == "enc.w"
    view.filter_edit.setText("head")  # the selected row is filtered out: nothing selected
    assert names() == ["head.w"] and view.current_row() is None
    view.filter_edit.clear()
    view.table.sortByColumn(COLUMN["order"], Qt.SortOrder.AscendingOrder)
    assert names() == [r.name for r in view.model.rows]
    assert view.proxy.index(4, COLUMN["order"]).data() == "5"


def test_a_comparison_keeps_its_trees_out_of_the_collector_and_closing_it_frees_them(qtbot, window, pair):
    """As a checkpoint tab: the two trees are frozen while the tab lives (a 100,000-tensor comparison's
    collector passes stopped the window half a second each) and freed when it closes."""
    import gc
    import weakref

    from PySide6.QtCore import QCoreApplication, QEvent

    a, b, _, _ = pair
    window.open_diff(a, b)
    view = window.tabs.currentWidget()
    assert isinstance(view, CompareTab)
    qtbot.waitUntil(lambda v=view: not v.busy, timeout=20_000)
    roots = view.trees()
    assert len(roots) == 2 and all(not gc.is_tracked(r) or gc.get_freeze_count() > 0 for r in roots)
    gone = weakref.ref(view.result.tensors[0].info_a)
    del roots
    window.close_tab(window.tabs.indexOf(view))
    del view

    def deleted() -> bool:
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        return gone() is None

    qtbot.waitUntil(deleted, timeout=5000)


def test_buffers_and_counters_stay_out_of_the_headline_and_its_plot(qtbot, tmp_path):
    """A BatchNorm's step counter going 5 -> 55 (relative change 10) must not be the plot's tallest point
    nor weigh in the bold figure: both are over the learnable parameters (issue 25)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.BatchNorm1d(4))
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    sd["1.num_batches_tracked"] = torch.tensor(5)
    torch.save(sd, tmp_path / "a.pth")
    sd_b = {k: v.clone() for k, v in sd.items()}
    sd_b["0.weight"] += 0.01
    sd_b["1.running_mean"] += 1.0
    sd_b["1.num_batches_tracked"] = torch.tensor(55)
    torch.save(sd_b, tmp_path / "b.pth")
    view = open_view(qtbot, str(tmp_path / "a.pth"), str(tmp_path / "b.pth"))
    params = [name for name, _ in model.named_parameters()]
    x, _y = view.rel_series()
    assert sorted(view.model.rows[int(i)].name for i in x) == sorted(params)
    dd = float(((sd_b["0.weight"] - sd["0.weight"]) ** 2).sum())
    aa = sum(float((sd[k] ** 2).sum()) for k in params)
    assert f"overall relative change <b>{(dd / aa) ** 0.5:.4g}</b>" in view.summary_label.text()
    assert "3 buffers" in view.summary_label.text()


def test_statuses_read_as_words_and_the_tensor_axis_as_whole_numbers(qtbot, pair):
    """The filter listed raw ids (`only_a`, `dtype_mismatch`) beside its labels, the summary and the Status
    column said them too; the plot's tensor axis had ticks at 0.5, 1.5 between its tensors."""
    a, b, _sd, _sd_b = pair
    view = open_view(qtbot, a, b)
    texts = [view.status_combo.itemText(i) for i in range(view.status_combo.count())]
    assert not [t for t in texts if "_" in t], texts
    assert "only in A" in texts and "dtype differs" in texts
    status = [view.proxy.index(r, COLUMN["status"]).data() for r in range(view.proxy.rowCount())]
    assert "only in A" in status and not [s for s in status if "_" in s], status
    assert "only_a" not in view.summary_label.text() and "only in A" in view.summary_label.text()
    axis = view.rel_plot.getAxis("bottom")
    for lo, hi in ((-0.3, 2.3), (-0.1, 0.1), (0.0, 3.0)):
        values = [v for _spacing, vs in axis.tickValues(lo, hi, 400) for v in vs]
        assert values and all(float(v).is_integer() for v in values), (lo, hi, values)

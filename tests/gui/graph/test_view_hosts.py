"""The Graph view in a comparison tab (coloured by each box's relative change, as the diff computes it) and in
a run tab (by the update ratio at a chosen step, as the run's module lines compute it), selection tied both
ways to the tab's rows."""

from __future__ import annotations

import math
import threading

import torch

from ckptview.core.graph import graph_job
from ckptview.core.graph.collapse import ALL_OPS
from ckptview.core.graph.overlay import CHANGE, NORM, UPDATE, format_number
from ckptview.core.jobs import Progress
from ckptview.core.series.model import module_series
from ckptview.gui.compare.tab import open_diff
from ckptview.gui.series.tab import open_series_tab
from tests.support.graphs import llama_program
from tests.support.graphview import LAYERS, click_box, laid_out, wait_coloured
from tests.support.layout_engines import needs_igraph

pytestmark = needs_igraph  # every test here lays out a graph


def test_a_comparison_colours_the_graph_of_a_by_the_relative_change(qtbot, window, llama_file, tmp_path,
                                                                    graph_caches):
    path, tensors = llama_file
    torch.manual_seed(1)
    later = {k: t + 0.01 * torch.randn_like(t) * (1 + i % 3) for i, (k, t) in enumerate(tensors.items())}
    other = tmp_path / "later.pth"
    torch.save(later, other)
    view = open_diff(window, path, str(other))
    qtbot.waitUntil(lambda: not view.busy and view.result is not None, timeout=60_000)
    host = view.show_graph(True)
    assert view.bottom_stack.currentWidget() is host and view.graph_button.isChecked()
    qtbot.waitUntil(lambda: host.page is not None and host.page.view is not None, timeout=30_000)
    page = host.page
    # Both checkpoints' graphs are read (merged: A's nodes, then B's own), traced ones kept in the window's cache.
    assert graph_caches == [window.graph_cache, window.graph_cache]
    assert host.found["comparison"].counts()["added"] == 0  # one architecture: nothing added or removed
    laid_out(qtbot, page, lambda: page.set_mode(ALL_OPS))
    qtbot.waitUntil(lambda: page.coloured is not None and page.coloured.figure is CHANGE
                    and page.coloured.view is page.view, timeout=30_000)
    assert page.overlay_box.currentText() == "relative change" and page.legend.text().startswith("relative")
    rows = {r.name_a: r for r in view.result.tensors if r.name_a is not None}
    # A module's box: the relative change of its tensors taken together, from the diff's own sums.
    reads = page.hierarchy.params_below("model.layers.1")
    dd = sum(rows[k].sums.dd for k in reads)
    aa = sum(rows[k].sums.aa for k in reads)
    text = page.tooltip(page.view.index()["g:model"])
    assert "relative change" in text
    laid_out(qtbot, page, lambda: page.expand("model.layers.0.mlp.gate_proj"))
    wait_coloured(qtbot, page)
    layer1 = page.tooltip(page.view.index()["g:model.layers.1"])
    assert layer1.endswith(f"relative change {format_number(math.sqrt(dd / aa))}"), layer1
    node = next(n for n in llama_program(LAYERS).nodes if n.params == ("model.layers.0.mlp.gate_proj.weight",))
    expected = rows["model.layers.0.mlp.gate_proj.weight"].rel_l2
    assert page.tooltip(page.view.index()["n:" + node.id]).endswith(f"relative change {format_number(expected)}")
    # The checkpoint's own figures stay offered (A's weights).
    assert page.figure_index(NORM) > 0

    # A box selected selects its tensor's row; a row selected shows its node.
    click_box(qtbot, page, "n:" + node.id)
    assert view.current_row().name_a == "model.layers.0.mlp.gate_proj.weight"
    target = "model.layers.1.self_attn.v_proj.weight"
    laid_out(qtbot, page, lambda: view.select_row(next(i for i, r in enumerate(view.model.rows)
                                                       if r.name_a == target)))
    reader = page.hierarchy.graph.nodes[page.hierarchy.readers[target][0]]
    assert page.state.selected == ["n:" + reader.id]
    assert view.current_row().name_a == target  # no echo back to the table
    view.show_graph(False)
    assert view.bottom_stack.currentWidget() is view.plots


def _save_run(folder) -> list[dict[str, torch.Tensor]]:
    folder.mkdir()
    torch.manual_seed(0)
    weights = {"blocks.0.fc.weight": torch.randn(6, 4), "blocks.0.fc.bias": torch.randn(6),
               "blocks.1.fc.weight": torch.randn(6, 6), "blocks.1.fc.bias": torch.randn(6),
               "head.weight": torch.randn(3, 6)}
    saved = []
    for step in (1, 2, 3):
        weights = {k: v + 0.05 * step * torch.randn_like(v) if k.startswith("blocks.1") or step != 3 else v
                   for k, v in weights.items()}
        torch.save(weights, folder / f"step_{step}.pth")
        saved.append(dict(weights))
    return saved


def test_a_run_colours_the_graph_by_the_update_ratio_at_a_chosen_step(qtbot, window, tmp_path, monkeypatch):
    saved = _save_run(tmp_path / "run")
    handed = []

    def recorded(checkpoint, token=None, cache=None):
        handed.append(cache)
        return (yield from graph_job(checkpoint, token, cache))

    monkeypatch.setattr("ckptview.core.graph.adapter.graph_job", recorded)
    tab = open_series_tab(window, [str(tmp_path / "run")])
    qtbot.waitUntil(lambda: tab.state == "ready", timeout=120_000)
    tab.views.setCurrentWidget(tab.graph)  # the graph is read when first shown
    qtbot.waitUntil(lambda: tab.graph.page is not None and tab.graph.page.view is not None, timeout=60_000)
    page = tab.graph.page
    assert "inferred from key names and shapes, not traced" in page.source_label.text()
    assert handed == [window.graph_cache]  # a traced graph would be kept in the window's cache
    laid_out(qtbot, page, lambda: page.set_mode(ALL_OPS))
    qtbot.waitUntil(lambda: page.coloured is not None and page.coloured.figure is UPDATE
                    and page.coloured.view is page.view, timeout=30_000)
    assert [tab.graph.step_box.itemText(i) for i in range(tab.graph.step_box.count())] == [
        tab.result.label(t) for t in range(3)]
    assert tab.graph.step() == 2  # the last step read
    modules = {m.name: m for m in module_series(tab.result, ["blocks", "head"])}
    index = page.view.index()
    assert page.tooltip(index["g:blocks"]).endswith(f"update ratio {format_number(modules['blocks'].update_ratio[2])}")
    # Only blocks.1 moved at step 3: the ratio the run computes, and torch's.
    b1 = [k for k in saved[2] if k.startswith("blocks.1")]
    torch_ratio = math.sqrt(sum(float((saved[2][k].double() - saved[1][k].double()).pow(2).sum()) for k in b1)
                            / sum(float(saved[1][k].double().pow(2).sum()) for k in b1))
    laid_out(qtbot, page, lambda: page.expand("blocks"))
    wait_coloured(qtbot, page)
    text = page.tooltip(page.view.index()["n:blocks.1.fc"])  # a module of one op: that op's box
    assert text.endswith(f"update ratio {format_number(torch_ratio)}"), text
    assert page.tooltip(page.view.index()["n:blocks.0.fc"]).endswith("update ratio 0")

    # Another step: its figures, read from the run (no file is read again).
    with qtbot.waitSignal(page.overlay_ready, timeout=30_000):
        tab.graph.set_step(1)
    ratio = module_series(tab.result, ["blocks.0"])[0].update_ratio[1]
    assert page.tooltip(page.view.index()["n:blocks.0.fc"]).endswith(f"update ratio {format_number(ratio)}")
    with qtbot.waitSignal(page.overlay_ready, timeout=30_000):
        page.overlay_box.setCurrentIndex(page.figure_index(NORM))
    norm = float(saved[1]["head.weight"].double().norm())
    assert page.tooltip(page.view.index()["n:head"]).endswith(f"L2 norm {format_number(norm)}")

    # Selection both ways: a box selects its tensors in the run's tree; a tensor shows its box.
    click_box(qtbot, page, "n:head")
    assert ("tensor", "head.weight") in tab.selected()
    tab.select_tensor("blocks.1.fc.bias")  # its box is shown already: outlined and centred, nothing laid out
    reader = page.hierarchy.graph.nodes[page.hierarchy.readers["blocks.1.fc.bias"][0]]
    assert page.state.selected == ["n:" + reader.id]
    assert page.scene.marked == {page.view.index()["n:" + reader.id]: "selected"}
    assert [n for _, n in tab.selected()] == ["blocks.1.fc.bias"]


def _endless(started):
    """A graph job that reads until it is cancelled (a library's trace, as long as the test needs)."""

    def job(checkpoint, token=None, cache=None):
        started.append(token)
        while True:
            token.check()
            yield Progress(0, 0, "tracing the architecture")
            threading.Event().wait(0.02)

    return job


def test_closing_a_comparison_or_a_run_stops_the_graph_it_reads(qtbot, window, llama_file, tmp_path, monkeypatch):
    """`release()` (the window closing the tab: `Tab`) stops the Graph view's jobs with the tab's own: a
    trace's worker is killed then, not whenever Qt deletes the widget."""
    started = []
    monkeypatch.setattr("ckptview.core.graph.adapter.graph_job", _endless(started))
    path, _ = llama_file
    view = open_diff(window, path, path)
    qtbot.waitUntil(lambda: not view.busy and view.result is not None, timeout=60_000)
    host = view.show_graph(True)
    qtbot.waitUntil(lambda: len(started) == 1 and host.page.graph_slot.running, timeout=30_000)
    view.release()
    qtbot.waitUntil(lambda: started[0].cancelled and not host.page.graph_slot.running, timeout=30_000)

    _save_run(tmp_path / "run")
    tab = open_series_tab(window, [str(tmp_path / "run")])
    qtbot.waitUntil(lambda: tab.state == "ready", timeout=120_000)
    tab.views.setCurrentWidget(tab.graph)
    qtbot.waitUntil(lambda: len(started) == 2 and tab.graph.page.graph_slot.running, timeout=60_000)
    tab.release()
    qtbot.waitUntil(lambda: started[1].cancelled and not tab.graph.page.graph_slot.running, timeout=30_000)

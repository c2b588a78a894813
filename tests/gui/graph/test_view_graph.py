"""The Graph view of a checkpoint tab (issue 37): nesting, search, selection both ways, overlays, export and
a 20,000-node graph, on a synthetic Llama program (test_view_sources.py: the files the libraries write)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import torch
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from ckptview.core.graph.collapse import short_op
from ckptview.core.graph.overlay import format_number
from ckptview.gui.base.workers import wait_for_workers
from ckptview.gui.graph import GraphPage
from ckptview.gui.graph.scene import NAN_COLOR
from tests.support.graphs import layers_for, llama_program
from tests.support.graphview import LAYERS, click_box, laid_out, open_graph
from tests.support.guihelpers import wait_settled
from tests.support.layout_engines import needs_igraph


@needs_igraph
def test_view_starts_collapsed_and_expands_and_collapses_on_a_click(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0])
    assert {i.key for i in page.view.items} == {"n:input", "n:output", "g:model", "g:lm_head"}
    assert "exported program" in page.source_label.text()
    laid_out(qtbot, page, lambda: click_box(qtbot, page, "g:model", double=True))
    keys = {i.key for i in page.view.items}
    assert {"g:model.layers", "g:model.norm", "n:arange"} <= keys and "g:model" not in keys
    laid_out(qtbot, page, lambda: page.collapse("model"))
    assert "g:model" in {i.key for i in page.view.items}


@needs_igraph
def test_view_reads_the_graph_through_the_windows_cache(qtbot, window, llama_file, graph_caches):
    """The core keeps no cache of its own: the window makes one and hands it to each tab's Graph view, so a
    traced architecture is found again without reopening the user's cache file per trace."""
    open_graph(qtbot, window, llama_file[0])
    assert graph_caches == [window.graph_cache] and window.graph_cache is not None


@needs_igraph
def test_view_search_goes_to_each_match_expanding_its_module(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0])
    qtbot.keyClicks(page.search, "_softmax")
    assert page.match_label.text() == f"{LAYERS} found"
    laid_out(qtbot, page, lambda: qtbot.keyClick(page.search, Qt.Key.Key_Return))
    assert page.match_label.text() == f"1 of {LAYERS}"
    assert "model.layers.0.self_attn" in page.state.expanded
    index = page.view.index()["n:_softmax"]
    assert page.scene.marked == {index: "match"}
    view_centre = page.canvas.mapToScene(page.canvas.viewport().rect().center())
    assert page.scene.boxes[index].rect().adjusted(-200, -200, 200, 200).contains(view_centre)
    laid_out(qtbot, page, lambda: qtbot.keyClick(page.search, Qt.Key.Key_F3))
    assert page.match_label.text() == f"2 of {LAYERS}" and "n:_softmax_1" in page.view.index()
    qtbot.keyClick(page.search, Qt.Key.Key_Escape)
    assert page.search.text() == "" and page.scene.marked == {}


@needs_igraph
def test_view_a_selected_node_selects_its_tensors_in_the_tree(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: page.expand("model.layers.1.mlp.down_proj"))
    click_box(qtbot, page, "n:permute_13")
    assert short_op(page.hierarchy.node(page.hierarchy.by_id["permute_13"]).op) == "permute"
    assert [r.name for r in tab.selected_rows()] == ["model.layers.1.mlp.down_proj.weight"]
    click_box(qtbot, page, "g:model.layers.0")  # a module: every tensor its nodes read
    names = [r.name for r in tab.selected_rows()]
    assert names[0] == "model.layers.0.input_layernorm.weight" and len(names) == 9
    assert all(n.startswith("model.layers.0.") for n in names)


@needs_igraph
def test_view_a_tensor_selected_in_the_tree_shows_its_node(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: tab.select_name("model.layers.1.self_attn.k_proj.weight"))
    node = next(n for n in llama_program(LAYERS).nodes if "model.layers.1.self_attn.k_proj.weight" in n.params)
    assert page.state.selected == ["n:" + node.id]
    assert "model.layers.1.self_attn.k_proj" in page.state.expanded
    assert page.scene.marked == {page.view.index()["n:" + node.id]: "selected"}
    assert [r.name for r in tab.selected_rows()] == ["model.layers.1.self_attn.k_proj.weight"]  # no echo


@needs_igraph
def test_view_lists_the_keys_no_node_reads(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0])
    assert page.unread_button.isVisible() and page.unread_button.text() == "1 key no node reads"
    page.unread_button.click()
    assert page.unread_list.isVisible() and page.unread_list.item(0).text() == "extra.scale"


@needs_igraph
def test_overlay_legend_and_hover_give_the_figures_of_the_weights(qtbot, window, llama_file):
    path, tensors = llama_file
    tab, page = open_graph(qtbot, window, path)
    laid_out(qtbot, page, lambda: page.expand("model.layers.0.mlp"))
    with qtbot.waitSignal(page.overlay_ready, timeout=60_000):
        page.overlay_box.setCurrentIndex(page.overlay_box.findText("L2 norm"))
    index = page.view.index()
    gate = tensors["model.layers.0.mlp.gate_proj.weight"].double()
    assert f"L2 norm {format_number(float(gate.norm()))}" in page.tooltip(index["g:model.layers.0.mlp.gate_proj"])
    layer1 = [t.double() for k, t in tensors.items() if k.startswith("model.layers.1.")]
    finite = math.sqrt(sum(float(t[torch.isfinite(t)].pow(2).sum()) for t in layer1))
    assert page.tooltip(index["g:model.layers.1"]).endswith(
        f"L2 norm {format_number(finite)} (1 NaN/Inf)")
    values = [b.value for b in page.coloured.boxes if b.value is not None]
    low, high = page.legend.scale.ticks()
    assert page.legend.isVisible() and page.legend.text().startswith("L2 norm")
    assert (low, high) == (format_number(min(values)), format_number(max(values)))
    assert page.scene.fills[index["g:model.layers.1"]] == NAN_COLOR  # NaN/Inf: distinct whatever the figure
    assert page.scene.fills[index["g:model.layers.0.mlp.gate_proj"]] not in (None, NAN_COLOR)
    with qtbot.waitSignal(page.overlay_ready, timeout=60_000):
        page.overlay_box.setCurrentIndex(page.overlay_box.findText("max |x|"))
    expected = float(tensors["model.layers.0.mlp.gate_proj.weight"].abs().max())
    assert f"max |x| {format_number(expected)}" in page.tooltip(index["g:model.layers.0.mlp.gate_proj"])


@needs_igraph
def test_view_exports_svg_and_png(qtbot, window, llama_file, tmp_path):
    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: page.expand("model.layers.0"))
    svg, png = tmp_path / "g.svg", tmp_path / "g.png"
    page.export_svg(str(svg))
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert "self_attn" in svg.read_text()  # the frames' titles are text in the file
    assert page.export_png(str(png))
    image = QImage(str(png))
    assert not image.isNull() and image.width() > 100 and image.height() > 100


@needs_igraph
def test_view_of_20000_nodes_opens_and_its_layout_can_be_cancelled(qtbot):
    graph = llama_program(layers_for(20_000))
    assert len(graph.nodes) >= 19_900

    def job(checkpoint, token=None):
        yield from ()
        return graph

    page = GraphPage(None, None, job)
    qtbot.addWidget(page)
    page.resize(1000, 600)
    page.show()
    with qtbot.waitSignal(page.layout_ready, timeout=60_000):
        page.start()
    top = page.view
    page.relayout(frozenset(page.hierarchy.groups))  # every module open: ~20,000 boxes
    assert page.layout_slot.running and page.cancel_button.isVisible() or page.layout_slot.running
    page.cancel_button.click()
    assert not page.layout_slot.running and page.status.text() == "Layout cancelled."
    wait_for_workers(120_000)
    qtbot.wait(50)
    assert page.view is top  # the cancelled layout never replaced the drawing
    page.stop()


def test_view_without_a_layout_library_says_how_to_install_one(qtbot, window, llama_file, monkeypatch):
    monkeypatch.setattr("ckptview.gui.graph.page.engines", lambda: [])
    tab = window.open_paths([llama_file[0]])[0]
    wait_settled(qtbot, tab)
    page = tab.show_graph(True)
    assert "pip install 'ckptview[graph]'" in page.source_label.text()


@needs_igraph
def test_view_follows_a_change_of_palette(qtbot, window, llama_file):
    """A palette chosen while the graph is shown (light to dark) redraws it in the new colours, its marks and
    overlay kept: boxes drawn in the old Base would be white squares on a dark window."""
    from PySide6.QtGui import QColor, QPalette

    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: page.expand("model.layers.0.mlp"))
    with qtbot.waitSignal(page.overlay_ready, timeout=60_000):
        page.overlay_box.setCurrentIndex(page.overlay_box.findText("NaN/Inf count"))
    page.select_items(["g:model.layers.1"])
    dark = QPalette(page.palette())
    for role, colour in ((QPalette.ColorRole.Base, QColor(30, 30, 30)), (QPalette.ColorRole.Text, QColor(230, 230, 230)),
                         (QPalette.ColorRole.Window, QColor(45, 45, 45)), (QPalette.ColorRole.Mid, QColor(90, 90, 90))):
        dark.setColor(role, colour)
    page.setPalette(dark)
    qtbot.waitUntil(lambda: page.scene.palette_.color(QPalette.ColorRole.Base) == QColor(30, 30, 30))
    index = page.view.index()
    plain = next(i for i, item in enumerate(page.view.items) if page.scene.fills[i] is None)
    assert page.scene.boxes[plain].brush().color() == QColor(30, 30, 30) or page.view.items[plain].kind == "group"
    assert page.scene.fills[index["g:model.layers.1"]] == NAN_COLOR  # the overlay kept
    assert page.scene.marked == {index["g:model.layers.1"]: "selected"}  # and the selection


@needs_igraph
def test_every_label_fits_inside_its_box(qtbot, window, llama_file):
    """A closed module's second line ends in its "+" corner: it ran past the box's right edge."""
    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: page.expand("model.layers.0.self_attn"))
    page.scene.ensure_all_labels()
    assert page.scene.labels
    for i, label in page.scene.labels.items():
        box = page.scene.boxes[i].rect()
        assert label.sceneBoundingRect().right() <= box.right() - 2, (page.view.items[i], label.text())

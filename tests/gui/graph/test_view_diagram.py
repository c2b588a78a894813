"""The Graph view read like a diagram (issue 44): the selection made before the graph is read survives it, the
architecture first, labels said once and never drawn unreadably small, frame titles apart, one open module at a
time unless pinned, the minimap, the keyboard, Model Explorer's node data in and out, a comparison's marks, and
a module path thousands of levels deep drawn without recursion."""

from __future__ import annotations

import json

import torch
from PySide6.QtCore import Qt

from ckptview.core.graph.collapse import ALL_OPS, ARCHITECTURE
from ckptview.gui.graph.canvas import EDGE_LABELS_FROM, LABELS_FROM
from ckptview.gui.graph.scene import EDGE_LABEL_PX, LABEL_PX, MIN_TEXT_PX
from tests.support.graphs import llama_program
from tests.support.graphview import LAYERS, click_box, laid_out, open_graph, wait_coloured
from tests.support.guihelpers import wait_settled
from tests.support.layout_engines import needs_igraph

pytestmark = needs_igraph


def _reader(key: str):
    return next(n for n in llama_program(LAYERS).nodes if key in n.params)


def test_a_tensor_selected_before_ctrl_g_is_outlined_once_the_graph_is_read(qtbot, window, llama_file):
    """Finding 1: select q_proj.weight, press Ctrl+G: the request came while the graph was read and was
    dropped (the graph opened at the top with nothing outlined)."""
    tab = window.open_paths([llama_file[0]])[0]
    wait_settled(qtbot, tab)
    key = "model.layers.1.self_attn.q_proj.weight"
    tab.select_name(key)
    with qtbot.waitSignal(window.findChild(type(tab.graph_button), "graphButton").toggled, timeout=5000):
        qtbot.keyClick(tab.tree, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier)
    page = tab.graph
    assert page is not None
    qtbot.waitUntil(lambda: page.view is not None and page.layout_slot.running is False, timeout=30_000)
    node = _reader(key)
    assert page.state.selected == ["n:" + node.id]
    index = page.view.index()
    assert "n:" + node.id in index and page.scene.marked == {index["n:" + node.id]: "selected"}
    assert [r.name for r in tab.selected_rows()] == [key]


def test_the_first_view_is_the_block_diagram_and_every_op_is_one_toggle_away(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0], every_op=False)
    assert page.state.mode == ARCHITECTURE and not page.ops_button.isChecked()
    labels = [i.label for i in page.view.items]
    assert f"layers.0 × {LAYERS}" in labels  # the decoder layers, folded by their structure
    assert not {"_to_copy", "arange", "unsqueeze", "gt", "full"} & {i.title for i in page.view.items}
    assert len(page.view.items) <= 12
    laid_out(qtbot, page, lambda: page.ops_button.click())
    assert page.state.mode == ALL_OPS
    laid_out(qtbot, page, lambda: page.relayout(frozenset(page.hierarchy.groups)))
    assert len(page.view.items) == len(page.hierarchy.graph.nodes)  # every op, as read


def test_labels_are_said_once_and_never_drawn_below_a_readable_size(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: page.expand("model.layers.0.mlp"))
    page.scene.ensure_all_labels()
    for label in page.scene.labels.values():
        lines = label.text().split("\n")
        assert len(lines) == 1 or lines[0] != lines[1].split(" · ")[0], label.text()  # never "flatten / flatten"
    texts = {label.text() for label in page.scene.edge_labels}
    assert "16x28672 bfloat16" in texts or "1x16x28672 bfloat16" in texts, sorted(texts)[:10]
    placed = [(label.text(), label.sceneBoundingRect()) for label in page.scene.edge_labels]
    stacked = [(a, b) for i, (a, ra) in enumerate(placed) for b, rb in placed[i + 1:] if ra.intersects(rb)]
    assert not stacked, stacked  # a tensor two boxes read is said once; crossing edges' labels move apart
    for scale in (0.05, 0.3, 0.6, LABELS_FROM, 0.8, EDGE_LABELS_FROM, 1.0, 2.5):
        page.canvas.set_zoom(scale)
        if page.scene.label_layer.isVisible():
            assert LABEL_PX * page.canvas.scale_factor >= MIN_TEXT_PX - 1e-6
        if page.scene.edge_label_layer.isVisible():
            assert EDGE_LABEL_PX * page.canvas.scale_factor >= MIN_TEXT_PX - 1e-6
    page.canvas.fit()  # the whole drawing: text too small is hidden, not shrunk
    assert not page.scene.label_layer.isVisible() or LABEL_PX * page.canvas.scale_factor >= MIN_TEXT_PX


def test_frame_titles_never_cross(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: page.expand("model.layers.1.self_attn.q_proj"))
    page.scene.ensure_all_labels()
    rects = [title.sceneBoundingRect() for title in page.scene.titles]
    assert len(rects) >= 4  # model, layers, layers.1, self_attn (q_proj: a module of one op... or its frame)
    for a in range(len(rects)):
        for b in range(a + 1, len(rects)):
            assert not rects[a].intersects(rects[b]), (page.scene.titles[a].text(), page.scene.titles[b].text())


def test_one_module_is_open_at_a_time_unless_pinned(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: page.expand("model.layers.0.mlp"))
    laid_out(qtbot, page, lambda: page.expand("model.layers.1.self_attn"))
    assert "model.layers.0.mlp" not in page.state.expanded and "model.layers.1.self_attn" in page.state.expanded
    laid_out(qtbot, page, lambda: page.expand("model.layers.0.mlp"))
    click_box(qtbot, page, "n:silu")  # a box inside the open MLP: pin the MLP
    page.pin_button.click()
    assert page.state.pinned == {"model.layers.0.mlp"} and page.pin_button.isChecked()
    laid_out(qtbot, page, lambda: page.expand("model.layers.1.self_attn"))
    assert {"model.layers.0.mlp", "model.layers.1.self_attn"} <= page.state.expanded
    laid_out(qtbot, page, lambda: page.top_button.click())
    assert page.state.pinned == frozenset() and page.state.expanded == {""}


def test_the_keyboard_moves_between_boxes_opens_and_closes(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0])
    click_box(qtbot, page, "n:input")
    page.canvas.setFocus()
    qtbot.keyClick(page.canvas, Qt.Key.Key_Down)  # along the edge out of the input: the embedding's module
    assert page.state.selected == ["g:model"]
    assert [r.name for r in tab.selected_rows()][:1] == ["model.embed_tokens.weight"]
    laid_out(qtbot, page, lambda: qtbot.keyClick(page.canvas, Qt.Key.Key_Return))
    assert "model" in page.state.expanded
    click_box(qtbot, page, "g:model.layers")
    laid_out(qtbot, page, lambda: qtbot.keyClick(page.canvas, Qt.Key.Key_Backspace))
    assert "model" not in page.state.expanded


def test_the_minimap_shows_where_the_view_is_and_moves_it(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: page.relayout(frozenset(page.hierarchy.groups)))
    page.canvas.set_zoom(1.0)
    page.canvas.centerOn(page.scene.sceneRect().topLeft())
    qtbot.waitUntil(page.minimap.isVisible)
    before = page.canvas.mapToScene(page.canvas.viewport().rect().center())
    qtbot.mouseClick(page.minimap, Qt.MouseButton.LeftButton, pos=page.minimap.rect().center())
    after = page.canvas.mapToScene(page.canvas.viewport().rect().center())
    middle = page.scene.sceneRect().center()
    assert abs(after.y() - middle.y()) < abs(before.y() - middle.y())
    page.canvas.fit()
    qtbot.waitUntil(lambda: not page.minimap.isVisible())


def test_model_explorer_node_data_round_trips_through_the_window(qtbot, window, llama_file, tmp_path):
    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: page.expand("model.layers.0.mlp"))
    with qtbot.waitSignal(page.overlay_ready, timeout=60_000):
        page.overlay_box.setCurrentIndex(page.overlay_box.findText("max |x|"))
    shown = {page.view.items[i].key: box.value for i, box in enumerate(page.coloured.boxes)}
    path = tmp_path / "colours.json"
    with qtbot.waitSignal(page.file_slot.returned, timeout=60_000):
        assert page.export_node_data(str(path))
    data = json.loads(path.read_text())
    assert set(data) == {"results", "gradient"}
    silu_up = next(n for n in page.hierarchy.graph.nodes if n.params == ("model.layers.0.mlp.up_proj.weight",))
    assert data["results"][silu_up.id]["value"] == shown.get("n:" + silu_up.id, data["results"][silu_up.id]["value"])
    with qtbot.waitSignal(page.overlay_ready, timeout=60_000):
        page.export_node_data(str(path), read=True)
    assert page.overlay_box.currentText() == "Model Explorer data"
    index = page.view.index()
    for key, value in shown.items():
        if key.startswith("n:") and value is not None:
            assert page.coloured.boxes[index[key]].value == value
    assert page.legend.text().startswith("Model Explorer data")


def test_a_comparison_of_two_programs_outlines_what_was_added_and_reshaped(qtbot, window, tmp_path):
    from torch import nn

    from ckptview.gui.compare.tab import open_diff

    torch.manual_seed(0)
    short = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    deep = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    for name, model in (("short", short), ("deep", deep)):
        torch.export.save(torch.export.export(model.eval(), (torch.zeros(2, 8),)), tmp_path / f"{name}.pt2")
    view = open_diff(window, str(tmp_path / "short.pt2"), str(tmp_path / "deep.pt2"))
    qtbot.waitUntil(lambda: not view.busy and view.result is not None, timeout=60_000)
    host = view.show_graph(True)
    qtbot.waitUntil(lambda: host.page is not None and host.page.view is not None, timeout=60_000)
    page = host.page
    laid_out(qtbot, page, lambda: page.set_mode(ALL_OPS))
    laid_out(qtbot, page, lambda: page.relayout(frozenset(page.hierarchy.groups)))
    kinds = {page.view.items[i].key: how for i, how in page.scene.status.items()}
    assert {"added", "shape"} <= set(kinds.values())
    added = [k for k, how in kinds.items() if how == "added"]
    assert added and all(k.startswith("n:B:") for k in added)
    assert "compared: added" in page.tooltip(page.view.index()[added[0]])


def test_a_module_path_thousands_of_levels_deep_draws(qtbot, window, tmp_path):
    """Issue 43 finding 6 in the window: it said "No graph: maximum recursion depth exceeded"."""
    from safetensors.torch import save_file

    deep = ".".join(["m"] * 3000)
    path = tmp_path / "deep.safetensors"
    save_file({f"{deep}.weight": torch.zeros(2, 2), "head.weight": torch.zeros(2, 2)}, str(path))
    tab = window.open_paths([str(path)])[0]
    wait_settled(qtbot, tab)
    page = tab.show_graph(True)
    qtbot.waitUntil(lambda: page.view is not None or page.source_label.text().startswith("No graph"),
                    timeout=60_000)
    assert page.view is not None, page.source_label.text()
    tab.select_name(f"{deep}.weight")  # a chain of modules of one op: that op's box, at the top
    reader = page.hierarchy.graph.nodes[page.hierarchy.readers[f"{deep}.weight"][0]]
    assert page.state.selected == ["n:" + reader.id] and "n:" + reader.id in page.view.index()
    laid_out(qtbot, page, lambda: page.expand(deep))  # every level opened: 3,000 frames, nested
    assert len(page.view.frames) >= 2999
    page.scene.ensure_all_labels()
    assert page.scene.titles


def test_colours_follow_a_figure_in_the_architecture_view(qtbot, window, llama_file):
    tab, page = open_graph(qtbot, window, llama_file[0], every_op=False)
    with qtbot.waitSignal(page.overlay_ready, timeout=60_000):
        page.overlay_box.setCurrentIndex(page.overlay_box.findText("NaN/Inf count"))
    wait_coloured(qtbot, page)
    run = next(i for i, item in enumerate(page.view.items) if item.repeat > 1)
    assert page.coloured.boxes[run].nonfinite == 1  # the NaN of layer 1 is in the folded layers' box


def test_an_inferred_graph_offers_to_trace_your_model_code(qtbot, window, tmp_path, monkeypatch):
    """The seeds' MLP in the window: drawn from its names (dashed), then traced from mlp.py in the worker."""
    from torch import nn
    from torch.nn import functional as F

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = nn.Linear(20, 256)
            self.output = nn.Linear(256, 10)

        def forward(self, x):
            return self.output(F.relu(self.hidden(x)))

    torch.save(MLP().state_dict(), tmp_path / "mlp.params")
    (tmp_path / "mlp.py").write_text("import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n\n\n"
                                     "class MLP(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                                     "        self.hidden = nn.Linear(20, 256)\n        self.output = nn.Linear(256, 10)\n\n"
                                     "    def forward(self, x):\n        return self.output(F.relu(self.hidden(x)))\n")
    tab, page = open_graph(qtbot, window, str(tmp_path / "mlp.params"), every_op=False)
    assert page.scene.dashed and page.code_button.isVisible()
    assert "multilayer perceptron: 2 linear layers" in page.source_label.text()
    monkeypatch.setattr("ckptview.gui.graph.page.choose_model_code", lambda *_: f"{tmp_path / 'mlp.py'}:MLP")
    with qtbot.waitSignal(page.layout_ready, timeout=600_000):
        page.code_button.click()
    assert "your model code mlp.py:MLP, traced" in page.source_label.text() and not page.scene.dashed
    assert {short for short in (i.title for i in page.view.items)} >= {"linear", "relu"}
    assert not page.code_button.isVisible() and page.hierarchy.graph.unread == []

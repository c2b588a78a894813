"""The Graph view's state without Qt (`core/graph/view_state.py`): what the window renders, driven bare."""

from __future__ import annotations

from ckptview.core.graph.blocks import architecture
from ckptview.core.graph.collapse import ALL_OPS, ARCHITECTURE, Hierarchy
from ckptview.core.graph.layout import layers_of
from ckptview.core.graph.view_state import Status, ViewState, around, describe_box, step
from tests.support.graphs import llama_program


def _hierarchy(layers: int = 2) -> Hierarchy:
    hierarchy = Hierarchy(llama_program(layers))
    hierarchy.folding = architecture(hierarchy, {})
    return hierarchy


def test_keys_asked_while_loading_wait_for_the_graph() -> None:
    """Finding 1 at its root: a selection asked for before the graph is read is kept, then revealed."""
    state = ViewState()
    state.loading()
    assert state.status is Status.LOADING
    assert state.reveal_keys(["model.layers.1.self_attn.q_proj.weight"]) is None
    assert state.pending == ["model.layers.1.self_attn.q_proj.weight"]
    reveal = state.ready(_hierarchy())
    assert state.status is Status.READY and state.pending == []
    reader = next(n for n in llama_program(2).nodes if "model.layers.1.self_attn.q_proj.weight" in n.params)
    assert reveal is not None and reveal.focus == "n:" + reader.id and state.selected == [reveal.focus]
    assert {"model.layers.1", "model.layers.1.self_attn"} <= reveal.expanded


def test_the_first_view_is_the_architecture_and_one_module_opens_at_a_time() -> None:
    state = ViewState()
    state.ready(_hierarchy())
    assert state.mode == ARCHITECTURE and {"", "model", "model.layers"} <= state.expanded
    first = state.opened("model.layers.0.mlp")
    assert {"model.layers.0", "model.layers.0.mlp"} <= first
    second = state.opened("model.layers.1.self_attn")
    assert "model.layers.0.mlp" not in second and "model.layers.1.self_attn" in second
    assert state.toggle_pin("model.layers.0.mlp")
    assert {"model.layers.0.mlp", "model.layers.1.self_attn"} <= state.opened("model.layers.1.self_attn")
    state.expanded = state.opened("model.layers.1.self_attn")
    assert state.closed("model.layers.0") and state.pinned == frozenset()  # closing a module unpins inside it


def test_a_hidden_bookkeeping_op_is_shown_in_the_view_of_every_op() -> None:
    state = ViewState()
    hierarchy = _hierarchy()
    state.ready(hierarchy)
    arange = hierarchy.by_id["arange"]
    assert hierarchy.folding is not None and hierarchy.folding.hidden[arange]
    reveal = state.reveal_node(arange)
    assert state.mode == ALL_OPS and reveal.focus == "n:arange"
    assert "n:arange" in hierarchy.view(reveal.expanded).index()


def test_search_finds_and_walks_the_matches() -> None:
    state = ViewState()
    state.ready(_hierarchy())
    assert state.search("_softmax") == 2
    first = state.next_match()
    assert first is not None and state.match_key() == "n:_softmax"
    state.next_match()
    assert state.match_key() == "n:_softmax_1"
    assert state.search("") == 0 and state.match_key() is None


def test_the_keyboard_steps_along_edges_and_rows() -> None:
    hierarchy = _hierarchy()
    view = hierarchy.view(hierarchy.top())
    layer = layers_of(len(view.items), view.edges)
    boxes = [(float(i * 100), float(layer[i] * 50), 80.0, 30.0) for i in range(len(view.items))]
    index = view.index()
    below = step(view, boxes, index["n:input"], "down")
    assert (index["n:input"], below, 1) in view.edges or any(a == index["n:input"] and b == below
                                                             for a, b, _ in view.edges)
    assert step(view, boxes, below, "up") == index["n:input"]
    assert step(view, boxes, index["n:input"], "up") == index["n:input"]  # nothing above: stays
    assert around(view, index["g:model"]) is None  # at the top: nothing to close
    opened = hierarchy.view(hierarchy.expand_to(hierarchy.top(), "model.layers"))
    inner = opened.index()["g:model.layers.0"]
    assert around(opened, inner) == "model.layers"
    assert describe_box(hierarchy, opened, inner)[0] == "model.layers.0"


def test_the_graph_is_read_once_and_again_after_a_failure_or_a_cancel() -> None:
    """`GraphPage.start` reads only when `may_read`: not while reading, not once read; again after either end."""
    state = ViewState()
    assert state.status is Status.IDLE and state.may_read()
    state.loading()
    assert not state.may_read()
    state.failed("the TorchScript code would take more than 10 nodes")
    assert state.status is Status.FAILED and state.message.startswith("the TorchScript") and state.may_read()
    state.loading()
    state.cancelled()
    assert state.status is Status.CANCELLED and state.may_read()
    state.loading()
    state.ready(_hierarchy())
    assert state.status is Status.READY and not state.may_read() and state.hierarchy is not None

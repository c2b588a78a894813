"""The architecture view (issue 44, finding 2 and "Architecture first"): bookkeeping ops folded into the nodes
they serve, repeated layers found by their structure and folded "x N", each box its class or op, name once,
parameter count; the whole op graph one action away, unchanged.

The Qt-free half on a synthetic decomposed Llama program (names changed, shapes changed, to show what folds and
what does not), then the libraries' own folders: Llama, GPT-2, BERT, T5, ViT and a diffusers UNet, traced once
each into a cache of the module's own.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ckptview.core.graph import GraphNode, ModelGraph, read_graph
from ckptview.core.graph.blocks import architecture, blocks_json, first_view, hidden_nodes
from ckptview.core.graph.blocks.bookkeeping import passed_inputs
from ckptview.core.graph.cache import GraphCache
from ckptview.core.graph.collapse import GROUP, NODE, Hierarchy
from ckptview.core.read.open import open_checkpoint
from tests.support.graphs import llama_keys, llama_program


def _budget():
    from ckptview.core.budget import Budget

    return Budget.for_stored(0, "test")


def test_bookkeeping_is_hidden_and_edges_pass_through_it() -> None:
    nodes = [GraphNode("ids", "input", dtype="int64"), GraphNode("x", "input", shape=(2, 4), dtype="float32"),
             GraphNode("check", "aten._assert_tensor_metadata.default", "", ("x",)),
             GraphNode("cast", "aten._to_copy.default", "m", ("x",)),
             GraphNode("arange", "aten.arange.start", "m"),
             GraphNode("mask", "aten.le.Tensor", "m", ("arange", "ids")),
             GraphNode("view", "aten.view.default", "m", ("cast",)),
             GraphNode("size", "aten.sym_size.int", "m", ("view",)),
             GraphNode("mm", "aten.mm.default", "m", ("cast", "mask"), ("m.weight",)),
             GraphNode("out", "output", "", ("mm",))]
    graph = ModelGraph("exported-program", nodes)
    hidden = hidden_nodes(graph, _budget())
    shown = [n.id for n, h in zip(nodes, hidden, strict=True) if not h]
    assert shown == ["ids", "x", "mm", "out"]  # the check, the cast, the mask's ops, a view read by a size
    inputs = passed_inputs(graph, hidden, _budget())
    assert {nodes[i].id for i in inputs[8]} == {"x", "ids"}  # mm reads x through the cast, ids through the mask


@pytest.fixture(scope="module")
def llama():
    hierarchy = Hierarchy(llama_program(4))
    return hierarchy, architecture(hierarchy, {})


def test_repeated_layers_fold_into_one_box_of_their_class(llama) -> None:
    hierarchy, folding = llama
    assert folding.runs == {"model.layers.0": tuple(f"model.layers.{i}" for i in range(4))}
    view = hierarchy.view(first_view(hierarchy, folding), folding)
    runs = [item for item in view.items if item.repeat > 1]
    assert len(runs) == 1 and runs[0].repeat == 4 and runs[0].label == "layers.0 × 4"
    assert runs[0].instances == tuple(f"model.layers.{i}" for i in range(4))
    assert len(view.items) <= 12  # a diagram: embeddings, rotary, the layers, the norm, the head, ends
    assert not any(item.kind == NODE and item.title in ("_to_copy", "arange", "unsqueeze") for item in view.items)
    # Opening the run shows its first layer's parts; the three others stay one box after it.
    opened = hierarchy.view(first_view(hierarchy, folding) | {"model.layers.0"}, folding)
    rest = [item for item in opened.items if item.repeat > 1]
    assert [(r.key, r.repeat) for r in rest] == [("g:model.layers.1", 3)]
    assert any(path == "model.layers.0" for path, _ in opened.frames)


def test_repeats_are_found_by_structure_not_by_name() -> None:
    graph = llama_program(3)
    renamed = [dataclasses.replace(n, module=n.module.replace("layers.0", "first").replace("layers.1", "second")
                                   .replace("layers.2", "third")) for n in graph.nodes]
    hierarchy = Hierarchy(ModelGraph("exported-program", renamed))
    folding = architecture(hierarchy, {})
    assert list(folding.runs.values()) == [("model.first", "model.second", "model.third")]
    # One layer of another shape breaks the run there.
    other = [dataclasses.replace(n, shape=(9, 9)) if n.module.startswith("model.layers.2") and n.shape else n
             for n in graph.nodes]
    hierarchy = Hierarchy(ModelGraph("exported-program", other))
    assert list(architecture(hierarchy, {}).runs.values()) == [("model.layers.0", "model.layers.1")]


def test_side_by_side_modules_of_one_shape_are_no_run() -> None:
    """Three projections of one shape reading one input are parallel, not repeated layers."""
    nodes = [GraphNode("x", "input", shape=(2, 4), dtype="float32")]
    for name in ("q", "k", "v"):
        nodes.append(GraphNode(name, "aten.linear.default", f"attn.{name}", ("x",), (f"attn.{name}.weight",), (2, 4)))
    nodes.append(GraphNode("cat", "aten.cat.default", "attn", ("q", "k", "v"), shape=(2, 12)))
    hierarchy = Hierarchy(ModelGraph("exported-program", nodes))
    assert architecture(hierarchy, {}).runs == {}


def test_blocks_json_names_class_repeat_nodes_and_parameters() -> None:
    graph = llama_program(2)
    graph.classes.update({"model.layers.0": "LlamaDecoderLayer", "model.layers.1": "LlamaDecoderLayer",
                          "model": "LlamaModel"})
    shapes = {key: (4, 4) for key in llama_keys(2)}
    hierarchy = Hierarchy(graph, numel={k: 16 for k in shapes})
    blocks = blocks_json(hierarchy, architecture(hierarchy, shapes), {k: 16 for k in shapes})
    model = next(b for b in blocks if b["module"] == "model")
    layers = next(b for b in model["blocks"] if b["module"] == "model.layers")
    assert layers["class"] == "LlamaDecoderLayer" and layers["repeat"] == 2
    assert layers["instances"] == ["model.layers.0", "model.layers.1"]
    assert set(layers["nodes"]) == {n.id for n in graph.nodes if n.module.startswith("model.layers.")}
    assert layers["parameters"] == 16 * len([k for k in shapes if k.startswith("model.layers.")])
    assert {b["module"] for b in layers["blocks"]} >= {"model.layers.0.self_attn", "model.layers.0.mlp"}


def test_the_whole_op_graph_is_the_view_of_every_op(llama) -> None:
    hierarchy, _ = llama
    view = hierarchy.view(frozenset(hierarchy.groups))
    assert sorted(item.node for item in view.items) == list(range(len(hierarchy.graph.nodes)))
    assert sum(n for _, _, n in view.edges) == sum(len(n.inputs) for n in hierarchy.graph.nodes)


def test_a_box_says_its_op_and_its_name_once_and_a_one_node_module_its_op() -> None:
    nodes = [GraphNode("x", "input", shape=(2, 4)), GraphNode("flatten", "aten.flatten.using_ints", "", ("x",)),
             GraphNode("batch_norm", "aten.batch_norm.default", "features.1", ("flatten",), ("features.1.weight",)),
             GraphNode("relu_3", "aten.relu.default", "", ("batch_norm",)),
             GraphNode("add_x", "aten.add.Tensor", "", ("relu_3",))]
    hierarchy = Hierarchy(ModelGraph("exported-program", nodes), numel={"features.1.weight": 4})
    view = hierarchy.view(hierarchy.top())
    lines = {item.key: (item.label, item.detail) for item in view.items}
    assert lines["n:flatten"] == ("flatten", "") and lines["n:relu_3"] == ("relu", "")  # never "flatten / flatten"
    assert lines["n:add_x"] == ("add", "add_x")
    assert lines["n:batch_norm"] == ("batch_norm", "features.1 · 4 params")  # not "features.1 / 1 node +"


# -- the libraries' own folders ------------------------------------------------------------------------------

transformers = pytest.importorskip("transformers")


def _llama(t):
    return t.LlamaForCausalLM(t.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


LIBRARY = {
    "llama": (_llama, 3, "LlamaDecoderLayer"),
    "gpt2": (lambda t: t.GPT2LMHeadModel(t.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=3,
                                                      n_head=4)), 3, "GPT2Block"),
    "bert": (lambda t: t.BertModel(t.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=3,
                                                num_attention_heads=4, intermediate_size=64)), 3, "BertLayer"),
    "t5": (lambda t: t.T5ForConditionalGeneration(t.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64,
                                                             num_layers=3, num_heads=4)), 2, "T5Block"),
    "vit": (lambda t: t.ViTForImageClassification(t.ViTConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                                              intermediate_size=64, image_size=32, patch_size=8)),
            3, "ViTLayer"),
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    cache = GraphCache(str(tmp_path_factory.mktemp("cache") / "graphs.sqlite3"))
    yield cache
    cache.close()


def _folder(tmp_path, name):
    torch.manual_seed(0)
    if name == "unet":
        diffusers = pytest.importorskip("diffusers")
        model = diffusers.UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=3,
                                               block_out_channels=(32, 64), cross_attention_dim=32,
                                               down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                               up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
                                               attention_head_dim=8, norm_num_groups=8)
    else:
        model = LIBRARY[name][0](transformers)
    model.save_pretrained(tmp_path / name)
    return str(tmp_path / name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [*LIBRARY, "unet"])
def test_a_librarys_folder_first_shows_its_block_diagram(name, tmp_path, cache) -> None:
    folder = _folder(tmp_path, name)
    checkpoint = open_checkpoint(folder)
    try:
        graph = read_graph(checkpoint, cache=cache)
        shapes = {e.name: tuple(e.info.shape) for e in checkpoint.tensors()}
    finally:
        checkpoint.close()
    hierarchy = Hierarchy(graph, numel={k: int(torch.Size(s).numel()) for k, s in shapes.items()})
    folding = architecture(hierarchy, shapes)
    view = hierarchy.view(first_view(hierarchy, folding), folding)
    runs = [item for item in view.items if item.repeat > 1]
    if name == "unet":  # a down block's resnets repeat: folded once their block is opened
        assert "down_blocks.0.resnets.0" in folding.runs and len(folding.runs["down_blocks.0.resnets.0"]) == 3
    else:
        repeat, cls = LIBRARY[name][1], LIBRARY[name][2]
        assert any(r.repeat == repeat and r.title == cls for r in runs), [(r.label, r.title) for r in view.items]
    assert len(view.items) <= 16
    read = {k for item in view.items for k in hierarchy.keys_of(item)}
    assert read == set(graph.placed())  # every weight is in a box, counted in its parameters
    for item in view.items:
        assert item.params == sum(hierarchy.numel[k] for k in hierarchy.keys_of(item))
    # Every edge drawn carries a tensor whose shape is known: the edge's label.
    assert view.sources and all(graph.nodes[s].shape is not None for s in view.sources)
    # The whole op graph, one action away: every node, every edge, as traced.
    every = hierarchy.view(frozenset(hierarchy.groups))
    assert sorted(item.node for item in every.items if item.kind == NODE) == list(range(len(graph.nodes)))
    assert not [item for item in every.items if item.kind == GROUP]

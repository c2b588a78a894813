"""The tree's columns fit their content and Name takes what is left (issue 35, finding 1).

A sharded Hugging Face folder read `q…j`, `po…rm`, shapes `64…64`, sizes `1…B`, shards `……` at 1024x640;
at 1280x800 two ResNet conv shapes (512x256x3x3, 512x512x3x3) both read `512 × … 3 × 3` while Name had room.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from PySide6.QtCore import Qt

from ckptview.gui.checkpoint.tree_model import DEVICE, DTYPE, NAME, PARAMS, SHAPE, SHARD, SIZE
from ckptview.gui.checkpoint.tree_view import NAME_KEEPS
from tests.support import layout_checks as check
from tests.support.guihelpers import wait_settled

SHORT = (SHAPE, DTYPE, SIZE, PARAMS, DEVICE, SHARD)
SIZES = [(1024, 640), (1280, 800)]


@pytest.fixture(scope="module")
def llama_shards(tmp_path_factory) -> str:
    """Six shards with a Llama's names and shapes, and their index (as `save_pretrained` lays them out)."""
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("llama")
    shapes = {"embed_tokens.weight": (256, 64), "norm.weight": (64,)}
    for layer in range(2):
        for name, shape in (("self_attn.q_proj", (64, 64)), ("self_attn.k_proj", (32, 64)),
                            ("self_attn.v_proj", (32, 64)), ("self_attn.o_proj", (64, 64)),
                            ("mlp.gate_proj", (172, 64)), ("mlp.up_proj", (172, 64)), ("mlp.down_proj", (64, 172)),
                            ("input_layernorm", (64,)), ("post_attention_layernorm", (64,))):
            shapes[f"layers.{layer}.{name}.weight"] = shape
    names = [f"model.{n}" for n in shapes] + ["lm_head.weight"]
    shapes = {f"model.{n}": s for n, s in shapes.items()} | {"lm_head.weight": (256, 64)}
    weight_map = {}
    for k, chunk in enumerate([names[i::6] for i in range(6)], start=1):
        file = f"model-{k:05d}-of-00006.safetensors"
        save_file({n: torch.zeros(shapes[n]) for n in chunk}, str(folder / file))
        weight_map.update(dict.fromkeys(chunk, file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return str(folder)


@pytest.fixture(scope="module")
def resnet_convs(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("resnet") / "convs.pth"
    torch.save({"layer4.0.conv1.weight": torch.zeros(512, 256, 3, 3), "layer4.0.conv2.weight": torch.zeros(512, 512, 3, 3),
                "layer4.0.bn1.running_mean": torch.zeros(512), "layer4.0.bn1.num_batches_tracked": torch.tensor(0),
                "fc.weight": torch.zeros(1000, 512)}, path)
    return str(path)


def opened(qtbot, window, path, size):
    window.resize(*size)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size)
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    tab.expand_all()
    qtbot.waitUntil(lambda: tab.tree.viewport().width() > 300)
    return tab


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("case", ["llama_shards", "resnet_convs"])
def test_short_columns_are_whole_and_name_takes_the_rest(qtbot, window, request, case, size):
    tab = opened(qtbot, window, request.getfixturevalue(case), size)
    tree = tab.tree
    for _screen in range(40):  # every row, a screenful at a time
        problems = check.elided_cells(tree, SHORT, "tree")
        assert not problems, problems
        assert not check.elided_without_tooltip(tree, NAME, "tree")
        tree.verticalScrollBar().setValue(tree.verticalScrollBar().value() + tree.viewport().height() - 20)
        if tree.verticalScrollBar().value() >= tree.verticalScrollBar().maximum():
            break
    header = tree.header()
    shown = [c for c in range(header.count()) if not header.isSectionHidden(c)]
    assert sum(header.sectionSize(c) for c in shown) == tree.viewport().width()  # Name takes the rest
    assert header.sectionSize(NAME) >= NAME_KEEPS


def test_shards_are_told_apart_by_their_number_and_named_in_the_tooltip(qtbot, window, llama_shards):
    tab = opened(qtbot, window, llama_shards, (1024, 640))
    assert tab.select_name("model.layers.1.self_attn.q_proj.weight")
    index = tab.tree.selectionModel().selectedRows(SHARD)[0]
    with open(os.path.join(llama_shards, "model.safetensors.index.json")) as fh:
        shard = json.load(fh)["weight_map"]["model.layers.1.self_attn.q_proj.weight"]
    assert index.data() == f"{int(shard[6:11])} of 6"
    assert index.data(Qt.ItemDataRole.ToolTipRole).splitlines()[0] == shard


def test_a_narrow_tree_gives_way_down_to_whole_captions(qtbot, window, resnet_convs):
    tab = opened(qtbot, window, resnet_convs, (1024, 640))
    tab.splitter.setSizes([330, 700])
    qtbot.waitUntil(lambda: tab.tree.width() < 360)
    assert not check.header_problems(tab.tree, "tree")  # captions whole, even where cells are cut
    assert tab.tree.header().sectionSize(NAME) >= 60

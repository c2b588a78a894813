"""TorchScript code parsed as text covers the tensor ops of torch's own inlined graph, traced and scripted."""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn

from ckptview.core.graph import ModelGraph, read_graph
from ckptview.core.read.open import open_checkpoint


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))


class Loop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.n = 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.n):
            x = self.fc(x)
        if x.sum() > 0:
            x = x * 2
        else:
            x = -x
        return x


class Blocks(nn.Module):
    """A ModuleList in a loop, a Sequential, a list of tensors appended to, functional calls, a branch."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = []
        for layer in self.layers:
            x = layer(x)
            outs.append(x)
        a, b = torch.cat(outs, 1).chunk(2, dim=1)
        y = self.seq(a) + b
        return nn.functional.gelu(y) if y.size(0) > 1 else y


MODELS: dict[str, tuple[Any, tuple[int, ...]]] = {"mlp": (MLP, (2, 4)), "cnn": (CNN, (1, 3, 8, 8)),
                                                  "loop": (Loop, (2, 4)), "blocks": (Blocks, (2, 4))}
_LIST_EDITS = {"aten::append", "aten::extend", "aten::insert", "aten::__getitem__", "aten::list"}


def _tensor_ops(graph: Any) -> Counter[str]:
    """aten calls of torch's inlined graph that return tensors, in every block (loops and branches)."""
    found: Counter[str] = Counter()
    stack = list(graph.nodes())
    while stack:
        node = stack.pop()
        for block in node.blocks():
            stack.extend(block.nodes())
        kind = node.kind()
        if kind.startswith("aten::") and kind not in _LIST_EDITS and any(
                "Tensor" in str(o.type()) for o in node.outputs()):
            found[kind.replace("::", ".")] += 1
    return found


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("ts")
    out = {}
    for name, (cls, shape) in MODELS.items():
        model = cls().eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer warns about the data-dependent branch it bakes in
            for how, module in (("traced", torch.jit.trace(model, torch.randn(*shape))),
                                ("scripted", torch.jit.script(model))):
                path = str(folder / f"{name}_{how}.pt")
                module.save(path)
                out[f"{name}_{how}"] = path
    return out


def _graph(path: str) -> ModelGraph:
    checkpoint = open_checkpoint(path)
    try:
        return read_graph(checkpoint)
    finally:
        checkpoint.close()


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")  # the reference only
@pytest.mark.parametrize("case", [f"{m}_{h}" for m in MODELS for h in ("traced", "scripted")])
def test_torchscript_covers_the_tensor_ops_of_torchs_inlined_graph(archives: dict[str, str], case: str) -> None:
    graph = _graph(archives[case])
    ours = Counter(n.op for n in graph.nodes if n.op not in ("input", "output"))
    theirs = _tensor_ops(torch.jit.load(archives[case]).inlined_graph)
    assert theirs and ours == theirs  # the same tensor ops, as often: no op missed, none invented
    assert graph.source == "torchscript"
    assert [n.op for n in graph.nodes[:1]] == ["input"] and graph.nodes[-1].op == "output"


def test_submodules_are_inlined_in_their_paths_with_their_keys(archives: dict[str, str]) -> None:
    for how in ("traced", "scripted"):
        graph = _graph(archives[f"blocks_{how}"])
        linears = [n for n in graph.nodes if n.op == "aten.linear"]
        assert [n.module for n in linears] == ["layers.0", "layers.1", "seq.0"]
        assert [n.params for n in linears] == [(f"{p}.weight", f"{p}.bias") for p in ("layers.0", "layers.1", "seq.0")]
        assert [n.inputs for n in linears[:2]] == [("x",), ("linear",)]
        cat = next(n for n in graph.nodes if n.op == "aten.cat")
        assert cat.inputs == ("linear", "linear_1")  # the list the loop appended to
        assert graph.unread == []


def test_every_key_is_placed_or_unread_as_torchs_graph_reads_it(archives: dict[str, str]) -> None:
    scripted = _graph(archives["cnn_scripted"])
    keys = set(CNN().state_dict())
    # Scripted BatchNorm keeps its training branch (torch's graph does too): the counter is read there.
    assert set(scripted.placed()) == keys and scripted.unread == []
    assert scripted.placed()["bn.num_batches_tracked"] == ["add_"]
    traced = _graph(archives["cnn_traced"])
    assert traced.unread == ["bn.num_batches_tracked"]  # traced in eval: no node reads it
    assert set(traced.placed()) == keys - {"bn.num_batches_tracked"}
    loop = _graph(archives["loop_traced"])
    assert loop.placed()["__constants__.0"] == ["mul"]  # a tensor constant of the code, through the safe VM


def test_a_branch_merges_its_values_and_a_literal_condition_is_folded(archives: dict[str, str]) -> None:
    graph = _graph(archives["loop_scripted"])
    assert graph.nodes[-1].inputs == ("mul", "neg")  # either branch's result reaches the output
    blocks = _graph(archives["blocks_scripted"])
    assert "aten.relu_" not in {n.op for n in blocks.nodes}  # functional relu(inplace=False): one branch

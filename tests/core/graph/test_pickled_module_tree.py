"""A full `torch.save(model)` pickle's graph is its module tree with class names (issue 45, defect 4).

Its graph showed two boxes (`0`, `2`: the modules holding tensors) where its module tree holds `Linear, ReLU,
Linear` with class names, as Netron shows them. Read from the safe listing: nothing of the pickle runs.
"""

from __future__ import annotations

import torch
from torch import nn

from ckptview.core.graph import read_graph
from ckptview.core.read.open import open_checkpoint


class Net(nn.Module):
    """A module with its own parameter beside its submodules."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.enc = nn.Sequential(nn.Linear(4, 8), nn.GELU())
        self.head = nn.Linear(8, 2)


def graph_of(path):
    ckpt = open_checkpoint(str(path))
    try:
        return read_graph(ckpt)
    finally:
        ckpt.close()


def test_a_pickled_sequential_is_linear_relu_linear(tmp_path):
    path = tmp_path / "full.pt"
    torch.save(nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10)), path)
    graph = graph_of(path)
    assert graph.source == "module-tree"
    assert [(n.module, n.op, n.params) for n in graph.nodes] == [
        ("0", "torch.nn.modules.linear.Linear", ("0.weight", "0.bias")),
        ("1", "torch.nn.modules.activation.ReLU", ()),
        ("2", "torch.nn.modules.linear.Linear", ("2.weight", "2.bias"))]
    assert not graph.unread
    assert "state dict" not in graph.notes[0] and "full-model pickle" in graph.notes[0]  # not what it is


def test_nested_modules_keep_their_paths_and_a_module_its_own_parameter(tmp_path):
    path = tmp_path / "net.pt"
    torch.save(Net(), path)
    graph = graph_of(path)
    assert [(n.module, n.op.rsplit(".", 1)[-1], n.params) for n in graph.nodes] == [
        ("", "Net", ("scale",)), ("enc.0", "Linear", ("enc.0.weight", "enc.0.bias")), ("enc.1", "GELU", ()),
        ("head", "Linear", ("head.weight", "head.bias"))]
    assert len({n.id for n in graph.nodes}) == len(graph.nodes)


def test_a_state_dict_is_still_drawn_by_its_keys(tmp_path):
    path = tmp_path / "sd.pt"
    torch.save(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)).state_dict(), path)
    graph = graph_of(path)  # its keys only: inferred from names and shapes, no class, no ReLU
    assert graph.source == "inferred"
    assert [(n.module, n.op) for n in graph.nodes if n.module] == [("0", "Linear"), ("2", "Linear")]

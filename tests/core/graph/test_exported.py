"""A .pt2's graph read from its program JSON: the ops of torch's own loaded graph, every key placed."""

from __future__ import annotations

import operator

import pytest
import torch
from torch import nn

from ckptview.core.graph import ModelGraph, read_graph
from ckptview.core.read.open import open_checkpoint


class Tied(nn.Module):
    """Tied linear layers, a buffer, a tensor constant, BatchNorm in eval, ops with several outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(4, 2)
        self.fc3 = self.fc1  # tied: state_dict() names both, export keeps one placeholder
        self.register_buffer("scale", torch.full((2,), 2.0))
        self.offset = torch.ones(2)  # a plain tensor attribute: a lifted constant of the program

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.fc1(x)))
        a, b = h.chunk(2, dim=1)
        top, _ = (a * b).max(dim=1, keepdim=True)
        return self.fc2(a[:, :4] + top) * self.scale + self.offset + self.fc3(x).sum()


def _targets(graph: torch.fx.Graph) -> list[str]:
    return ["getitem" if n.target is operator.getitem else str(n.target)
            for n in graph.nodes if n.op == "call_function"]


@pytest.fixture(scope="module")
def tied_pt2(tmp_path_factory: pytest.TempPathFactory) -> str:
    torch.manual_seed(0)
    path = str(tmp_path_factory.mktemp("pt2") / "tied.pt2")
    model = Tied().eval()
    torch.export.save(torch.export.export(model, (torch.randn(3, 4),)), path)
    return path


def _graph(path: str) -> ModelGraph:
    checkpoint = open_checkpoint(path)
    try:
        return read_graph(checkpoint)
    finally:
        checkpoint.close()


def test_a_pt2_lists_exactly_the_ops_of_torchs_own_graph(tied_pt2: str) -> None:
    graph = _graph(tied_pt2)
    loaded = torch.export.load(tied_pt2)
    ops = [n.op for n in graph.nodes if n.op not in ("input", "output")]
    assert ops == _targets(loaded.graph)
    assert "getitem" in ops  # chunk and max: torch's deserializer adds one per output, so do we
    assert graph.source == "exported-program"
    # Node ids are torch's node names; inputs are the nodes torch's node takes (placeholders of state aside).
    torch_nodes = {n.name: n for n in loaded.graph.nodes}
    state = set(loaded.graph_signature.inputs_to_parameters) | set(loaded.graph_signature.inputs_to_buffers) \
        | set(loaded.graph_signature.inputs_to_lifted_tensor_constants)
    for node in graph.nodes:
        if node.op in ("input", "output"):
            continue
        fx = torch_nodes[node.id]
        assert list(node.inputs) == [a.name for a in fx.all_input_nodes if a.name not in state]
        val = fx.meta.get("val")
        if isinstance(val, torch.Tensor):
            assert node.shape == tuple(val.shape) and node.dtype == str(val.dtype).removeprefix("torch.")
    assert [n.id for n in graph.nodes if n.op == "input"] == ["x"]
    assert graph.nodes[-1].op == "output"


def test_every_state_dict_key_of_a_pt2_is_placed_on_the_nodes_that_read_it(tied_pt2: str) -> None:
    graph = _graph(tied_pt2)
    loaded = torch.export.load(tied_pt2)
    placed = graph.placed()
    sig = loaded.graph_signature
    names = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
             **{k: f"constants.{v}" for k, v in sig.inputs_to_lifted_tensor_constants.items()}}
    users = {n.name: [u.name for u in n.users] for n in loaded.graph.nodes if n.op == "placeholder"}
    for placeholder, key in names.items():
        if users[placeholder]:
            assert placed[key] == users[placeholder], key
    # The tied twin export dropped sits where its tensor is read; in eval BatchNorm reads no batch counter.
    assert placed["fc1.weight"] == placed["fc3.weight"] == ["linear", "linear_2"]
    assert graph.unread == ["bn.num_batches_tracked"]
    state_dict = set(Tied().state_dict()) | {"constants.offset"}
    assert set(placed) | set(graph.unread) == state_dict
    assert "constants.offset" in placed


def test_a_training_mode_program_reads_every_key(tmp_path) -> None:
    """Exported in training mode, BatchNorm updates its counter: then every key is placed, none unread."""
    path = str(tmp_path / "train.pt2")
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2)).train()
    torch.export.save(torch.export.export(model, (torch.randn(5, 4),)), path)
    graph = _graph(path)
    assert graph.unread == []
    assert set(graph.placed()) == set(model.state_dict())
    assert [n.op for n in graph.nodes if n.op not in ("input", "output")] == _targets(torch.export.load(path).graph)
    assert {n.module for n in graph.nodes if n.params} == {"0", "1", "3"}


def test_a_cancelled_job_stops_with_cancelled(tied_pt2: str) -> None:
    from ckptview.core.errors import Cancelled
    from ckptview.core.jobs import CancelToken

    token = CancelToken()
    token.cancel()
    checkpoint = open_checkpoint(tied_pt2)
    try:
        with pytest.raises(Cancelled):
            read_graph(checkpoint, token)
    finally:
        checkpoint.close()

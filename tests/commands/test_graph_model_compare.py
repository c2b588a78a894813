"""`graph --model`, the inferred graph and `graph --compare` on the seeds' MLP (Linear(20, 256), ReLU,
Linear(256, 10)), as its tutorial saves it: `torch.save(net.state_dict(), 'mlp.params')` (issue 44, finding 4).

No library names this architecture: without code the graph is inferred from the key names and shapes (a chain
of two linear layers, drawn dashed, said to be a guess); with `--model mlp.py:MLP` the user's code is traced in
the worker, as `run --model` runs it, and its ops are torch.export's; two checkpoints' graphs compare."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from ckptview import cli

MLP_CODE = '''
import os
from pathlib import Path
import torch
from torch import nn
from torch.nn import functional as F

with open(os.environ["MLP_MARKER"], "a") as marker:  # where the code ran
    marker.write(f"{os.getpid()}\\n")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(20, 256)
        self.output = nn.Linear(256, 10)

    def forward(self, x):
        return self.output(F.relu(self.hidden(x)))
'''


class MLP(nn.Module):
    def __init__(self, hidden: int = 256) -> None:
        super().__init__()
        self.hidden = nn.Linear(20, hidden)
        self.output = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(F.relu(self.hidden(x)))


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("seeds")
    torch.manual_seed(0)
    net = MLP()
    torch.save(net.state_dict(), folder / "mlp.params")
    tuned = {k: v + (0.01 if k.startswith("output") else 0.0) for k, v in net.state_dict().items()}
    torch.save(tuned, folder / "tuned.params")
    torch.save(MLP(128).state_dict(), folder / "narrow.params")
    (folder / "mlp.py").write_text(MLP_CODE)
    return {"mlp": str(folder / "mlp.params"), "tuned": str(folder / "tuned.params"),
            "narrow": str(folder / "narrow.params"), "code": str(folder / "mlp.py"),
            "marker": str(folder / "marker.txt")}


def _json(capsys, *args: str) -> dict:
    capsys.readouterr()
    status = cli.main(["graph", *args, "--json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    return json.loads(out.out)


def test_the_mlp_state_dict_gets_a_graph_inferred_from_its_names(seeds, capsys) -> None:
    data = _json(capsys, seeds["mlp"])
    assert data["source"] == "inferred"
    nodes = {n["id"]: n for n in data["nodes"]}
    assert [n["op"] for n in data["nodes"]] == ["input", "Linear", "Linear", "output"]
    assert nodes["hidden"]["inputs"] == ["(input)"] and nodes["output"]["inputs"] == ["hidden"]  # chained: 256 fits
    assert nodes["hidden"]["shape"] == ["N", 256] and nodes["(input)"]["shape"] == ["N", 20]
    assert nodes["hidden"]["params"] == ["hidden.weight", "hidden.bias"] and data["unread"] == []
    assert "looks like a multilayer perceptron: 2 linear layers (a guess from the key names)" in data["notes"][-1]
    assert not any("traced" in n and "not traced" not in n and "nothing traced" not in n for n in data["notes"])
    capsys.readouterr()
    assert cli.main(["graph", seeds["mlp"], "--dot"]) == 0
    dot = capsys.readouterr().out
    assert "node [shape=box, fontsize=10, style=dashed];" in dot and "edge [fontsize=8, style=dashed];" in dot
    assert '"hidden" -> "output" [label="Nx256 float32"];' in dot


@pytest.mark.slow  # a worker imports torch and traces the code
def test_model_code_is_traced_in_the_worker_and_placed_on_the_keys(seeds, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MLP_MARKER", seeds["marker"])
    data = _json(capsys, seeds["mlp"], "--model", f"{seeds['code']}:MLP")
    assert data["source"] == "model-code:mlp.py:MLP"
    program = torch.export.export(MLP().eval(), (torch.zeros(2, 20),))
    expected = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert [n["op"] for n in data["nodes"] if n["op"] not in ("input", "output")] == expected
    linears = [n for n in data["nodes"] if n["op"] == "aten.linear.default"]
    assert [n["params"] for n in linears] == [["hidden.weight", "hidden.bias"], ["output.weight", "output.bias"]]
    assert linears[0]["shape"] == [2, 256] and data["unread"] == []
    ran = Path(seeds["marker"]).read_text().split()
    assert ran and str(os.getpid()) not in ran  # the code ran in the worker, never here
    assert [(b["module"], b["class"], b["parameters"]) for b in data["blocks"]] == [
        ("hidden", "Linear", 20 * 256 + 256), ("output", "Linear", 256 * 10 + 10)]


def test_model_code_that_fails_is_one_line(seeds, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MLP_MARKER", seeds["marker"])
    (tmp_path / "broken.py").write_text("raise RuntimeError('no model here')\n")
    capsys.readouterr()
    assert cli.main(["graph", seeds["mlp"], "--model", f"{tmp_path / 'broken.py'}:MLP"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no model here" in err


def test_two_checkpoints_graphs_compare_with_each_nodes_relative_change(seeds, capsys) -> None:
    data = _json(capsys, seeds["mlp"], "--compare", seeds["tuned"])
    nodes = {n["id"]: n for n in data["nodes"]}
    a, b = torch.load(seeds["mlp"]), torch.load(seeds["tuned"])
    delta = sum(float((b[k] - a[k]).pow(2).sum()) for k in ("output.weight", "output.bias"))
    base = sum(float(a[k].pow(2).sum()) for k in ("output.weight", "output.bias"))
    assert nodes["output"]["change"] == pytest.approx((delta / base) ** 0.5, rel=1e-6)
    assert nodes["hidden"]["change"] == 0.0 and nodes["(input)"]["change"] is None
    assert {n["status"] for n in data["nodes"]} == {"same"}
    assert data["compare"] == {"same": 4, "shape": 0, "removed": 0, "added": 0}


def test_a_narrower_model_compares_changed_in_shape(seeds, capsys) -> None:
    data = _json(capsys, seeds["mlp"], "--compare", seeds["narrow"])
    status = {n["id"]: n["status"] for n in data["nodes"]}
    assert status["hidden"] == "shape" and status["output"] == "shape"
    capsys.readouterr()
    assert cli.main(["graph", seeds["mlp"], "--compare", seeds["narrow"], "--dot"]) == 0
    dot = capsys.readouterr().out
    assert '"hidden" [label="Linear\\nhidden", color="#bc4c00", penwidth=3];' in dot  # outlined: changed in shape


def test_a_deeper_model_compares_with_its_added_layers(tmp_path, capsys) -> None:
    torch.manual_seed(0)
    short = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    deep = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    for name, model in (("short", short), ("deep", deep)):
        torch.export.save(torch.export.export(model.eval(), (torch.zeros(2, 8),)), tmp_path / f"{name}.pt2")
    data = _json(capsys, str(tmp_path / "short.pt2"), "--compare", str(tmp_path / "deep.pt2"))
    added = [n for n in data["nodes"] if n["status"] == "added"]
    assert {n["module"] for n in added} == {"3", "4"} and all(n["id"].startswith("B:") for n in added)
    ids = [n["id"] for n in data["nodes"]]
    assert all(i in ids[: ids.index(n["id"])] for n in data["nodes"] for i in n["inputs"])  # still a graph

"""A hostile program or code record cannot make a graph reader work beyond what its bytes pay for.

Each bound is reached by a file made for it (a real archive with one record replaced), and each refusal is
one line, on the command line too: the work budget (`core/budget.py`) and the levels of nesting it sums, a
method that calls itself, the graph's node list. The node cap, too large to reach in a test's time, is
lowered here: the file is the same, the bound is what is tested. tests/hostile/test_graph_budget.py holds
issue 43's findings.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch
from torch import nn

from ckptview import cli
from ckptview.core.budget import FLOOR, MAX_FRAMES, BudgetExceeded
from ckptview.core.errors import CheckpointError
from ckptview.core.graph import GraphRefused, exported, read_graph
from ckptview.core.read.open import open_checkpoint
from tests.support.cli_failure import failure_stdout
from tests.support.crafted import rewrite_zip
from tests.support.graph_attacks import LINEAR, rewrite


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("bases")
    ts = str(folder / "linear.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(nn.Linear(4, 3).eval(), torch.randn(2, 4)), ts)
    pt2 = str(folder / "mlp.pt2")
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    torch.export.save(torch.export.export(model, (torch.randn(2, 4),)), pt2)
    return {"ts": ts, "pt2": pt2}


def _code(bases: dict[str, str], tmp_path, name: str, text: str) -> str:
    return rewrite(bases["ts"], str(tmp_path / f"{name}.pt"), {LINEAR: lambda _: text.encode()})


def _refused(path: str, capsys: pytest.CaptureFixture, words: str,
             error: type[CheckpointError] = GraphRefused) -> None:
    """Refused with `words` by the reader, and as one line with status 2 by `ckptview graph`."""
    checkpoint = open_checkpoint(path)
    try:
        with pytest.raises(error, match=words):
            read_graph(checkpoint)
    finally:
        checkpoint.close()
    capsys.readouterr()
    assert cli.main(["graph", path, "--json"]) == 2
    out = capsys.readouterr()
    assert failure_stdout(out.out) and out.err.count("\n") == 1 and re.search(words, out.err), out.err


def _class(body: str) -> str:
    return "class Linear(Module):\n  __parameters__ = [\"weight\", \"bias\", ]\n  weight : Tensor\n" + body


def test_a_method_that_calls_itself_is_refused(bases, tmp_path, capsys) -> None:
    path = _code(bases, tmp_path, "recursion", _class(
        "  def forward(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n"
        "    return (self).forward(torch.relu(x), )\n"))
    _refused(path, capsys, "calls itself")


def test_calls_nested_beyond_the_levels_the_stack_holds_are_refused(bases, tmp_path, capsys) -> None:
    depth = MAX_FRAMES // 2
    methods = "".join(f"  def f{i}(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n"
                      f"    return (self).f{i + 1}(x, )\n" for i in range(depth))
    methods += f"  def f{depth}(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n    return x\n"
    path = _code(bases, tmp_path, "deep_calls", _class(
        "  def forward(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n"
        "    return (self).f0(x, )\n" + methods))
    _refused(path, capsys, f"nests deeper than {MAX_FRAMES} levels in all", BudgetExceeded)


def test_calls_that_fan_out_at_every_level_stop_at_the_budget(bases, tmp_path, capsys) -> None:
    """30 levels of two calls each: 2**30 inlined calls from 2 KB of code. The walk stops at its budget."""
    levels = 30
    methods = "".join(f"  def f{i}(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n"
                      f"    return torch.add((self).f{i + 1}(x, ), (self).f{i + 1}(x, ))\n" for i in range(levels))
    methods += f"  def f{levels}(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n    return x\n"
    path = _code(bases, tmp_path, "fan_out", _class(
        "  def forward(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n"
        "    return (self).f0(x, )\n" + methods))
    _refused(path, capsys, f"the TorchScript code would take more than {FLOOR:,} units of work", BudgetExceeded)


def test_an_expression_nested_beyond_the_levels_the_stack_holds_is_refused(bases, tmp_path, capsys) -> None:
    terms = " + ".join(["x"] * (MAX_FRAMES + 50))  # left-nested: no parentheses needed
    path = _code(bases, tmp_path, "deep_expr", _class(
        "  def forward(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n"
        f"    return {terms}\n"))
    _refused(path, capsys, f"nests deeper than {MAX_FRAMES} levels in all \\(down to an expression\\)", BudgetExceeded)


def test_code_that_is_not_python_is_refused(bases, tmp_path, capsys) -> None:
    _refused(_code(bases, tmp_path, "not_python", "class Linear(Module:\n  ???\n"), capsys, "is not Python syntax")
    _refused(_code(bases, tmp_path, "no_forward", _class("  def other(self, x):\n    return x\n")), capsys,
             r"no code for __torch__\.torch\.nn\.modules\.linear\.(___torch_mangle_\d+\.)?Linear\.forward")


def test_a_program_of_more_nodes_than_the_cap_is_refused(bases, capsys, monkeypatch) -> None:
    monkeypatch.setattr(exported, "MAX_GRAPH_NODES", 2)
    _refused(bases["pt2"], capsys, "serialized program holds 3 nodes, more than the 2")


def test_an_argument_nested_deep_is_read_without_recursion(bases, tmp_path) -> None:
    """As deep as JSON holds (its parser refuses deeper): read with an explicit stack, each value charged."""
    def deepen(data: bytes) -> bytes:
        program = json.loads(data)
        node = program["graph_module"]["graph"]["nodes"][0]
        arg = node["inputs"][0]["arg"]
        for _ in range(400):
            arg = {"as_tensors": [arg]}
        node["inputs"][0]["arg"] = arg
        return json.dumps(program).encode()

    path = rewrite_zip(bases["pt2"], str(tmp_path / "deep_arg.pt2"), {"models/model.json": deepen})
    checkpoint = open_checkpoint(path)
    try:
        graph = read_graph(checkpoint)
    finally:
        checkpoint.close()
    assert graph.nodes[1].inputs == ("input",)  # the value at the bottom still reaches its node


def test_a_program_whose_graph_is_not_a_graph_is_one_line(bases, tmp_path, capsys) -> None:
    def broken(data: bytes) -> bytes:
        program = json.loads(data)
        program["graph_module"]["graph"]["nodes"] = {"not": "a list"}
        return json.dumps(program).encode()

    path = rewrite_zip(bases["pt2"], str(tmp_path / "broken.pt2"), {"models/model.json": broken})
    checkpoint = open_checkpoint(path)
    with pytest.raises(CheckpointError, match="graph nodes are not a list"):
        read_graph(checkpoint)
    checkpoint.close()
    assert cli.main(["graph", path]) == 2
    assert capsys.readouterr().err.count("\n") == 1

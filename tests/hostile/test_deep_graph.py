"""A module path 3,000 levels deep (issue 43, finding 6): `graph --dot` ended in RecursionError and the window
said "No graph: maximum recursion depth exceeded". Nesting by module path (`collapse`), the architecture's
blocks and their signatures (`blocks`), DOT clusters (`dot`) and frames laid out by dot now walk with explicit
stacks: each runs here under a recursion limit far below the depth, from a 12.8 KB `.pt2` and a 6 KB
safetensors file, and `blocks` and DOT clusters nest at most 64 levels."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager

import pytest
import torch
from torch import nn

from ckptview import cli
from ckptview.core.graph import read_graph
from ckptview.core.graph.blocks import architecture, blocks_json, first_view
from ckptview.core.graph.collapse import Hierarchy
from ckptview.core.graph.dot import MAX_CLUSTER_DEPTH, to_dot
from ckptview.core.graph.layout import dot_source, item_size
from ckptview.core.read.open import open_checkpoint
from tests.support.crafted import rewrite_zip

LEVELS = 3_000


@contextmanager
def shallow_stack(limit: int = 250):
    """Whatever the interpreter allows, nothing here may recurse once per level."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("deep_graph")
    deep = ".".join(["m"] * LEVELS)
    st = str(folder / "deep.safetensors")
    save_file({f"{deep}.weight": torch.zeros(2, 2), "head.weight": torch.zeros(2, 2)}, st)
    base = str(folder / "mlp.pt2")
    torch.export.save(torch.export.export(nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval(), (torch.randn(2, 4),)),
                      base)
    stack = ",".join(["L__self__", deep.replace("m", "layer"), "torch.nn.modules.linear.Linear"])

    def deepen(data: bytes) -> bytes:
        program = json.loads(data)
        for node in program["graph_module"]["graph"]["nodes"]:
            node.setdefault("metadata", {})["nn_module_stack"] = stack
        return json.dumps(program).encode()

    pt2 = rewrite_zip(base, str(folder / "deep.pt2"), {"models/model.json": deepen})
    return {"safetensors": st, "pt2": pt2}


@pytest.mark.parametrize("kind", ["safetensors", "pt2"])
def test_graph_dot_and_json_draw_a_path_3000_levels_deep(files, kind, capsys) -> None:
    for output in ("--dot", "--json"):
        assert cli.main(["graph", files[kind], output]) == 0, capsys.readouterr().err
        out = capsys.readouterr()
        assert "RecursionError" not in out.err and out.err == ""
        if output == "--dot":
            opened = depth = 0
            for line in out.out.splitlines():
                depth += line.strip().startswith("subgraph cluster_") - (line.strip() == "}")
                opened = max(opened, depth)
            assert 0 < opened <= MAX_CLUSTER_DEPTH
        else:
            blocks, depth = json.loads(out.out)["blocks"], 0
            while blocks:
                depth += 1
                blocks = [b for block in blocks for b in block["blocks"]]
            assert 0 < depth <= 64


@pytest.mark.parametrize("kind", ["safetensors", "pt2"])
def test_the_windows_graph_of_a_deep_path_nests_lays_out_and_folds_without_recursion(files, kind) -> None:
    checkpoint = open_checkpoint(files[kind])
    try:
        graph = read_graph(checkpoint)
    finally:
        checkpoint.close()
    deepest = max((n.module for n in graph.nodes), key=len)
    assert deepest.count(".") >= LEVELS - 1
    with shallow_stack():
        hierarchy = Hierarchy(graph)
        folding = architecture(hierarchy, {})
        first_view(hierarchy, folding)
        view = hierarchy.view(hierarchy.expand_to(hierarchy.top(), deepest))
        arch_view = hierarchy.view(hierarchy.expand_to(hierarchy.top(), deepest), folding)
        blocks_json(hierarchy, folding, {})
        to_dot(graph)
        text = dot_source(view, list(range(len(view.edges))), [item_size(i) for i in view.items])
    assert len(view.frames) >= LEVELS - 1 and len(arch_view.frames) >= LEVELS - 1
    assert text.count("subgraph cluster_") == len([f for f in view.frames])


def test_past_the_work_budget_a_graph_is_one_line(files, capsys, monkeypatch) -> None:
    """Nesting, folding and DOT charge the one work budget: a file whose graph costs more than its bytes pay
    for (the floor lowered here) is refused in one line naming the work, never an internal error."""
    from ckptview.core.budget import Budget

    real = Budget.for_stored.__func__

    def small(cls, stored, subject, **kwargs):
        return real(cls, stored, subject, **{**kwargs, "per_byte": 0, "floor": 2_000})

    monkeypatch.setattr(Budget, "for_stored", classmethod(small))
    assert cli.main(["graph", files["safetensors"], "--json"]) == 2  # nesting 3,000 levels: past 2,000 units
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "units of work" in err and "internal error" not in err, err
    assert cli.main(["graph", files["safetensors"], "--dot"]) == 0  # DOT nests 64 levels at most: within it

"""Issue 43's findings on the graph readers: a few KB of TorchScript code or `.pt2` JSON that asked for hours,
gigabytes or the interpreter's stack now cost what their bytes pay for (`core/budget.py`), and running out is
one line naming what was too large.

Each file is a real `torch.jit.script` / `torch.export.save` archive with one record edited
(`tests/support/graph_attacks.py`), run through `ckptview graph --json` (and `info` for `.pt2`) in a child
process under RLIMIT_CPU and RLIMIT_AS: its CPU seconds and peak memory are measured, never wall time. Before
the budget, each of these ran past the CPU limit, grew by hundreds of MB or died of RecursionError.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - torch's own alias
from torch import nn

from ckptview.core.budget import FLOOR, MAX_FRAMES, BudgetExceeded
from ckptview.core.errors import Cancelled
from ckptview.core.graph import read_graph
from ckptview.core.jobs import CancelToken
from ckptview.core.read.open import open_checkpoint
from tests.support import graph_attacks
from tests.support.bounded import Outcome, run_bounded
from tests.support.cli_failure import failure_stdout

pytestmark = pytest.mark.slow

CPU = 20.0
"""CPU seconds any of these files may cost a command (the floor of the budget is a second or two)."""
PEAK = 400 << 20
"""Peak memory of the child (the interpreter and ckptview take ~30 MB; the budget's floor ~64 MB more)."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("graph_budget")


def _bounded(*args: str) -> Outcome:
    outcome = run_bounded(list(args), cpu=60)
    assert outcome.status >= 0, f"killed: {outcome.describe()}"
    assert outcome.cpu <= CPU and outcome.peak <= PEAK, outcome.describe()
    assert "internal error" not in outcome.err, outcome.describe()
    return outcome


def _refused(outcome: Outcome, *words: str) -> str:
    """One line on stderr, status 2, naming `words`."""
    # nothing but the --json failure object on stdout, where --json was asked for
    assert outcome.status == 2 and (outcome.out == "" or failure_stdout(outcome.out)), outcome.describe()
    line = outcome.err.strip()
    assert outcome.err.count("\n") == 1 and line.startswith("ckptview: "), outcome.describe()
    for word in words:
        assert word in line, line
    return line


def test_lists_doubled_thirty_times_are_read_once_each(folder: Path) -> None:
    """Finding 1: 30 lines of `aK = [aJ, aJ]` (2.4 KB) flattened 2**31 items; each list is read once now."""
    path = graph_attacks.doubling_lists(folder)
    graph = json.loads(_bounded("graph", path, "--json").out)
    cat = next(n for n in graph["nodes"] if n["op"] == "aten.cat")
    assert cat["inputs"] == ["x"]  # every item of the last list is the input: one edge


def test_edges_are_charged_a_node_of_millions_of_inputs_is_refused(folder: Path) -> None:
    """Finding 2: 2**13 relu nodes appended to one list, concatenated 2**10 times: 8.4 million edges (120 MB
    of --json before) from 2.5 KB. Each edge is charged."""
    path = graph_attacks.many_edges(folder)
    _refused(_bounded("graph", path, "--json"), "the TorchScript code would take more than", "nodes and edges")


def test_an_if_costs_the_names_its_branches_bind(folder: Path) -> None:
    """Finding 3: 20,000 names bound by one statement, then 5,000 `if`s: copied per `if`, 200 million copies.
    Each branch binds one name: the graph is drawn, its cost the names bound."""
    path = graph_attacks.names_per_if(folder)
    graph = json.loads(_bounded("graph", path, "--json").out)
    ops = Counter(n["op"] for n in graph["nodes"])
    assert ops["aten.relu"] == 5_000 and ops["aten.chunk"] == 1 and ops["aten.add"] == 1


def test_nesting_is_summed_across_calls_blocks_and_expressions(folder: Path) -> None:
    """Finding 4: 60 nested calls + 90 nested ifs + a 190-deep expression, each under the old caps: an
    internal RecursionError. Levels of every kind are summed against one bound."""
    path = graph_attacks.deep_nesting(folder)
    _refused(_bounded("graph", path, "--json"), f"nests deeper than {MAX_FRAMES} levels in all")


def test_a_code_record_is_charged_as_it_inflates(folder: Path) -> None:
    """Finding 5: a 10 KB archive whose code record inflates to 4 MB (ast.parse of it peaks at ~1 GB): charged
    by the tokens it would parse while it inflates, stopped there."""
    path = graph_attacks.inflated_code(folder)
    _refused(_bounded("graph", path, "--json"), "the TorchScript code would take more than", "tokens of code parsed")


def test_a_program_record_is_charged_as_it_inflates(folder: Path) -> None:
    """Finding 5: a 36 KB `.pt2` whose model.json inflates to 30 MB of JSON values (`info` peaked at 800 MiB)."""
    path = graph_attacks.inflated_program(folder)
    for command in ("info", "graph"):
        _refused(_bounded(command, path), "JSON of record 'models/model.json'", "KiB")


def test_symbolic_sizes_shared_by_many_nodes_are_parsed_once(folder: Path) -> None:
    """Finding 7: 200 nodes and 200 inputs name one value of 300 symbolic sizes: parsed once each, not per node
    (minutes before, for `info` and `graph` alike)."""
    path = graph_attacks.shared_symbolic_sizes(folder)
    _bounded("info", path)
    graph = json.loads(_bounded("graph", path, "--json").out)
    shared = [n for n in graph["nodes"] if n["shape"] is not None and len(n["shape"]) == 300]
    assert len(shared) == 200 and all(isinstance(s, str) and "s29" in s for s in shared[0]["shape"])


def test_cancel_reaches_the_walk(folder: Path) -> None:
    """The window's Cancel: a walk that would run to its budget (2**30 calls from 2 KB) stops at the token."""
    path = graph_attacks.script(folder, "fan_out", "".join(
        f"  def f{i}(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n"
        f"    return torch.add((self).f{i + 1}(x, ), (self).f{i + 1}(x, ))\n" for i in range(30)) +
        "  def f30(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n    return x\n"
        "  def forward(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n"
        "    return (self).f0(x, )\n")
    checkpoint = open_checkpoint(path)
    try:
        with pytest.raises(BudgetExceeded, match=f"more than {FLOOR:,} units"):
            read_graph(checkpoint)
        token = CancelToken()
        token.cancel()
        with pytest.raises(Cancelled):
            read_graph(checkpoint, token)
    finally:
        checkpoint.close()


class _RootRelu(nn.Module):
    """`F.relu` called by the top module: torch compiles `if inplace: relu_ else: relu` into its graph and keeps
    both blocks there (only a callee's graph is constant-folded before it is inlined)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.act = nn.Linear(4, 4), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.fc(x))
        z = F.dropout(y, 0.1, self.training)
        return self.act(F.relu(z, inplace=False)) + F.gelu(y)


class _Wrapped(nn.Module):
    """The same module one level down: its branches are folded, the top's `F.relu` is not."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = _RootRelu()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.inner(x))


def _torch_ops(path: str) -> Counter[str]:
    from tests.core.graph.test_torchscript import _tensor_ops

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _tensor_ops(torch.jit.load(path).inlined_graph)


@pytest.mark.parametrize("cls", [_RootRelu, _Wrapped])
def test_branches_torch_keeps_are_kept(cls: type[nn.Module], folder: Path) -> None:
    """Issue 44's finding 6: the op census of a scripted module equals torch's inlined graph, `relu_` included."""
    path = str(folder / f"{cls.__name__}.pt")
    torch.manual_seed(0)
    torch.jit.script(cls().eval()).save(path)
    checkpoint = open_checkpoint(path)
    try:
        graph = read_graph(checkpoint)
    finally:
        checkpoint.close()
    ours = Counter(n.op for n in graph.nodes if n.op not in ("input", "output"))
    theirs = _torch_ops(path)
    assert theirs["aten.relu_"] >= 1 and ours == theirs


def test_views_of_one_storage_are_listed_within_the_budget(tmp_path: Path) -> None:
    """20,000 views of one storage in a 1.5 MB file: `info` built 400 million names of the others (3.2 GB, 8 s
    of CPU). The sharing is kept once per storage, and a listing whose pairs the file's bytes do not pay for
    is refused in one line; a few hundred views list as before."""
    storage = torch.zeros(4)
    many, few = tmp_path / "views.pt", tmp_path / "few_views.pt"
    torch.save({f"t{i}": storage[:2] for i in range(20_000)}, many)
    torch.save({f"t{i}": storage[:2] for i in range(300)}, few)
    for command in (["info", str(many)], ["info", str(many), "--json"]):
        _refused(_bounded(*command), "names of tensors sharing a storage")
    listed = json.loads(_bounded("info", str(few), "--json").out)
    assert len(listed["tensors"][0]["shares_storage_with"]) == 299

"""Fuzzing the work a file declares (issue 43): random TorchScript code, `.pt2` program JSON and JSON configs,
each run through a command in a child process under rlimits, its CPU seconds and peak memory checked against
the bytes it holds. Shared by tests/hostile/test_fuzz_work.py (a bounded run) and benchmarks/fuzz.py (long).

The inputs are real archives with one record replaced (`graph_attacks`): the code of the scripted top module,
the exported program's `models/model.json` (written deflated, so a few KB may inflate a thousandfold), or a
`trainer_state.json` in a training folder. The code and JSON are drawn from shapes that cost work out of
proportion to their size when a reader is careless: lists doubled, calls fanned out, names bound wide,
branches and expressions nested deep, lists appended to themselves, sizes shared by many nodes, values nested
deep, long attribute chains. The property: the command draws or refuses in one line, never an internal error,
within `cpu_bound(size)` CPU seconds and `memory_bound(size)` bytes of peak memory.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.support import graph_attacks
from tests.support.bounded import Outcome, run_bounded

BASE_CPU = 20.0
"""CPU seconds any file may take (interpreter start-up, the budget's floor on a loaded 2-core machine)."""
CPU_PER_MB = 60.0
"""CPU seconds a megabyte may cost (the issue's bound: a minute for a file under 1 MB)."""
BASE_MEMORY = 400 << 20
"""Peak bytes any file may take (the interpreter, ckptview, the budget's floor)."""
MEMORY_PER_BYTE = 1024
"""Peak bytes a stored byte may cost (the issue's bound: 1 GiB for a file under 1 MB)."""
KINDS = ("torchscript", "program", "config")


def cpu_bound(size: int) -> float:
    return BASE_CPU + CPU_PER_MB * size / (1 << 20)


def memory_bound(size: int) -> int:
    return BASE_MEMORY + MEMORY_PER_BYTE * size


# -- TorchScript code ---------------------------------------------------------------------------------------

_SELF = "self: __torch__.torch.nn.modules.linear.Linear"
small = st.integers(1, 12)
wide = st.sampled_from([1, 2, 10, 100, 1_000, 5_000])
deep = st.sampled_from([1, 5, 50, 150, 190, 300])


def _statement(kind: str, n: int) -> list[str]:
    """Lines of one statement shape (names `x`, `l`, `a0..` exist; `f1`.. are methods)."""
    if kind == "double":
        return ["a0 = [x, x]", *(f"a{k} = [a{k - 1}, a{k - 1}]" for k in range(1, n)), f"x = torch.cat(a{n - 1})"]
    if kind == "append_self":
        return ["_0 = torch.append(l, l)", *["_0 = torch.extend(l, l)"] * n, "x = torch.cat(l)"]
    if kind == "wide_bind":
        return [", ".join(f"w{i}" for i in range(max(n, 2))) + " = torch.chunk(x, 2)", "x = torch.add(w0, w1)"]
    if kind == "wide_list":
        return ["b = [" + ", ".join("x" for _ in range(n)) + "]", "x = torch.cat(b)"]
    if kind == "deep_expr":
        return ["x = " + " + ".join(["x"] * max(n, 1))]
    if kind == "deep_if":
        return [("  " * k) + "if bool(x):" for k in range(min(n, 90))] + ["  " * min(n, 90) + "x = torch.relu(x)"]
    if kind == "ifs":
        return [line for k in range(n) for line in ("if bool(x):", f"  y{k % 5} = torch.relu(x)", "else:",
                                                     f"  y{k % 5} = x")]
    if kind == "chain":
        return ["z = x" + ".T" * n]
    if kind == "call":
        return ["x = (self).f1(x, l, )"]
    if kind == "loop":
        return ["for i in range(10):", "  x = torch.relu(x)", "  _1 = torch.append(l, x)"]
    return ["x = torch.relu(x)"]


statements = st.tuples(st.sampled_from(["double", "append_self", "wide_bind", "wide_list", "deep_expr", "deep_if",
                                        "ifs", "chain", "call", "loop", "op"]),
                       st.one_of(small, wide, deep))
methods = st.lists(st.lists(statements, min_size=1, max_size=6), min_size=1, max_size=8)
fan = st.sampled_from([1, 2, 3])


@st.composite
def script_codes(draw: st.DrawFn) -> str:
    """The code of class `Linear`: `forward` and methods `f1..fN`, each calling the next `fan` times."""
    bodies = draw(methods)
    copies = draw(fan)
    text = ""
    for i, body in enumerate(bodies):
        name = "forward" if i == 0 else f"f{i}"
        params = ", x: Tensor" if i == 0 else ", x: Tensor, l: List[Tensor]"
        lines = ["l = annotate(List[Tensor], [])"] if i == 0 else []
        for kind, n in body:
            lines += _statement(kind, n)
        if i + 1 < len(bodies):
            lines += [f"x = (self).f{i + 1}(x, l, )"] * copies
        lines.append("return x")
        text += f"  def {name}({_SELF}{params}) -> Tensor:\n" + "".join(f"    {line}\n" for line in lines)
    return text


# -- .pt2 program JSON -----------------------------------------------------------------------------------

program_mutations = st.lists(st.tuples(
    st.sampled_from(["repeat_nodes", "nest_arg", "wide_inputs", "shared_sizes", "deep_value", "long_strings",
                     "many_outputs", "module_stack"]),
    st.one_of(small, wide, deep)), min_size=1, max_size=4)


def mutate_program(data: bytes, mutations: list[tuple[str, int]]) -> bytes:
    """The program JSON with each mutation applied (each a shape that multiplies a careless reader's work)."""
    program = json.loads(data)
    graph = program["graph_module"]["graph"]
    nodes = graph["nodes"]
    first = nodes[0]
    for kind, n in mutations:
        if kind == "repeat_nodes":
            graph["nodes"] = nodes = nodes + [first] * n
        elif kind == "nest_arg":
            arg = first["inputs"][0]["arg"]
            for _ in range(min(n, 300)):  # one path down (two would be 2**n paths to write)
                arg = {"as_tensors": [arg, {"as_tensor": {"name": "x"}}]}
            first = {**first, "inputs": [{**first["inputs"][0], "arg": arg}]}
            nodes.append(first)
        elif kind == "wide_inputs":
            nodes.append({**first, "inputs": [first["inputs"][0]] * n})
        elif kind == "shared_sizes":
            name = next(iter(graph["tensor_values"]))
            expr = "Add(" + ", ".join(f"Symbol('s{i}', positive=True)" for i in range(min(n, 60))) + ")"
            graph["tensor_values"][name]["sizes"] = [{"as_expr": {"expr_str": expr, "hint": None}}] * n
            nodes += [{**first, "outputs": [{"as_tensor": {"name": name}}]}] * n
        elif kind == "deep_value":
            value: Any = []
            for _ in range(min(n, 900)):
                value = [value]
            program["padding"] = value
        elif kind == "long_strings":
            program["padding_text"] = ["x" * 1000] * n
        elif kind == "many_outputs":
            nodes.append({**first, "outputs": [{"as_tensors": [{"name": f"o{i}"} for i in range(n)]}]})
        elif kind == "module_stack":
            meta = dict(first.get("metadata") or {})
            meta["nn_module_stack"] = ";".join(f"k{i},{'m.' * min(n, 50)}x,torch.nn.Linear" for i in range(n))
            nodes.append({**first, "metadata": meta})
    return json.dumps(program).encode()


# -- configs ---------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=8), st.dictionaries(st.text(max_size=10), inner, max_size=8)),
    max_leaves=40)
config_shapes = st.tuples(json_values, st.sampled_from(["plain", "deep", "wide", "shared"]), st.one_of(wide, deep))


def config_text(shape: tuple[Any, str, int]) -> bytes:
    """A trainer_state.json: a random value, nested deep, repeated wide, or a list of many small objects."""
    value, kind, n = shape
    if kind == "deep":
        for _ in range(min(n, 5_000)):
            value = {"a": value}
    elif kind == "wide":
        value = [value] * n
    elif kind == "shared":
        value = {"log_history": [{"loss": 0.5, "step": i, "extra": value} for i in range(n)]}
    try:
        return json.dumps(value).encode()
    except RecursionError:  # deeper than json.dumps writes: write it by hand
        return (b'{"a":' * min(n, 5_000)) + b"null" + (b"}" * min(n, 5_000))


# -- building and checking -------------------------------------------------------------------------------

def build(kind: str, drawn: Any, folder: Path, name: str) -> tuple[str, list[str]]:
    """The file (or folder) for a drawn example, and the commands to run on it."""
    if kind == "torchscript":
        return graph_attacks.script(folder, name, drawn), ["graph"]
    if kind == "program":
        path = graph_attacks.rewrite(graph_attacks.exported_base(folder), str(folder / f"{name}.pt2"),
                                     {graph_attacks.MODEL_JSON: lambda data: mutate_program(data, drawn)},
                                     (graph_attacks.MODEL_JSON,))
        return path, ["info", "graph"]
    step = folder / name
    step.mkdir(parents=True, exist_ok=True)
    (step / "trainer_state.json").write_bytes(config_text(drawn))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch

        torch.save({"step": 1}, str(step / "scheduler.pt"))
    return str(step), ["info"]


def stored(path: str) -> int:
    """The bytes a file or folder holds."""
    p = Path(path)
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def check(path: str, command: str) -> Outcome:
    """`ckptview COMMAND PATH` in a bounded child: one line or a result, within the bounds of its bytes."""
    size = stored(path)
    cpu = cpu_bound(size)
    outcome = run_bounded([command, path, *(["--json"] if command == "graph" else [])], cpu=int(cpu * 2) + 5)
    where = f"{command} {Path(path).name} ({size:,} bytes): {outcome.describe()}"
    assert outcome.status in (0, 2), where
    assert "internal error" not in outcome.err and "Traceback" not in outcome.err, where
    if outcome.status == 2:
        assert outcome.err.count("\n") == 1 and outcome.err.startswith("ckptview: "), where
    assert outcome.cpu <= cpu, f"over {cpu:.0f} s of CPU: {where}"
    assert outcome.peak <= memory_bound(size), f"over {memory_bound(size) >> 20} MiB: {where}"
    return outcome

"""Hostile graphs made from real torch output: a `torch.jit.script`ed archive whose code record is edited, a
`torch.export.save`d `.pt2` whose `models/model.json` is edited. Each is a few KB and asks a graph reader for
far more work than its bytes pay for (issue 43's findings); the tests check that it is refused in one line, or
drawn, in CPU time and memory proportional to its bytes.

The TorchScript archives are `torch.jit.script(nn.Linear(4, 3))` saved, with the code of class `Linear` (the
top module's class) replaced; `compress` writes the edited record deflated, as torch writes code records.
"""

from __future__ import annotations

import json
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

LINEAR = "code/__torch__/torch/nn/modules/linear.py"
MODEL_JSON = "models/model.json"
_SELF = "self: __torch__.torch.nn.modules.linear.Linear"
_HEAD = ("class Linear(Module):\n  __parameters__ = [\"weight\", \"bias\", ]\n  __buffers__ = []\n"
         "  weight : Tensor\n  bias : Tensor\n  training : bool\n")


def rewrite(src: str, dst: str, replace: dict[str, Callable[[bytes], bytes]], deflate: tuple[str, ...] = ()) -> str:
    """A copy of the torch zip `src` with the records named (below its root folder) passed through `replace`;
    the records in `deflate` written deflated (CRCs valid), the rest as they were."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            tail = key = info.filename.split("/", 1)[1]
            if _is_linear_code(tail):
                key = LINEAR  # torch mangles the record's name (`linear/___torch_mangle_3.py`) in a busy process
            data = zin.read(info)
            if key in replace:
                data = replace[key](data)
            how = zipfile.ZIP_DEFLATED if key in deflate else info.compress_type
            zout.writestr(zipfile.ZipInfo(info.filename, info.date_time), data, compress_type=how, compresslevel=9)
    return dst


def _is_linear_code(tail: str) -> bool:
    """Whether a record is the code of class `Linear`, under its own name or a mangled one."""
    return tail == LINEAR or (tail.startswith(LINEAR[:-3] + "/") and tail.endswith(".py"))


def scripted_base(folder: Path, features: int = 4) -> str:
    """A real scripted archive: `torch.jit.script(nn.Linear(features, 3))` saved (its weight pays for work)."""
    path = folder / f"scripted_linear_{features}.pt"
    if not path.exists():
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.script(nn.Linear(features, 3).eval()).save(str(path))
    return str(path)


def exported_base(folder: Path) -> str:
    """A real `.pt2`: a two-layer MLP exported and saved."""
    path = folder / "mlp.pt2"
    if not path.exists():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
        torch.export.save(torch.export.export(model, (torch.randn(2, 4),)), str(path))
    return str(path)


def script(folder: Path, name: str, methods: str, compress: bool = True, features: int = 4) -> str:
    """The scripted base with class `Linear`'s code replaced by `methods` (its `def`s, indented two spaces)."""
    text = (_HEAD + methods).encode()
    return rewrite(scripted_base(folder, features), str(folder / f"{name}.pt"), {LINEAR: lambda _: text},
                   (LINEAR,) if compress else ())


def _method(name: str, params: str, body: list[str]) -> str:
    return f"  def {name}({_SELF}{params}) -> Tensor:\n" + "".join(f"    {line}\n" for line in body)


def doubling_lists(folder: Path, levels: int = 30) -> str:
    """Finding 1: `a{k} = [a{k-1}, a{k-1}]` thirty times, then one op over the last list: 2**31 items if
    flattened without a memo, from ~1.9 KB."""
    body = ["a0 = [x, x]", *(f"a{k} = [a{k - 1}, a{k - 1}]" for k in range(1, levels)), f"return torch.cat(a{levels - 1})"]
    return script(folder, "doubling_lists", _method("forward", ", x: Tensor", body))


def many_edges(folder: Path, leaves: int = 13, uses: int = 10) -> str:
    """Finding 2: 2**leaves calls append a distinct relu node each to one list, then 2**uses calls concatenate
    the list: ~8.4 million edges into ~1,000 nodes, from a few KB."""
    methods = _method("forward", ", x: Tensor", ["l = annotate(List[Tensor], [])", "_0 = (self).f0(x, l, )",
                                                  "return (self).g0(l, )"])
    for i in range(leaves):
        methods += _method(f"f{i}", ", x: Tensor, l: List[Tensor]",
                           [f"_0 = (self).f{i + 1}(x, l, )", f"_1 = (self).f{i + 1}(x, l, )", "return x"])
    methods += _method(f"f{leaves}", ", x: Tensor, l: List[Tensor]", ["_0 = torch.append(l, torch.relu(x))",
                                                                     "return x"])
    for i in range(uses):
        methods += _method(f"g{i}", ", l: List[Tensor]",
                           [f"_0 = (self).g{i + 1}(l, )", f"_1 = (self).g{i + 1}(l, )", "return torch.add(_0, _1)"])
    methods += _method(f"g{uses}", ", l: List[Tensor]", ["return torch.cat(l)"])
    return script(folder, "many_edges", methods)


def names_per_if(folder: Path, names: int = 20_000, ifs: int = 5_000) -> str:
    """Finding 3: one statement binds 20,000 names, then 5,000 `if`s: an evaluator that copies its names per
    `if` does 200 million copies (the archive is ~150 KB: its code ~90 KB deflated, a 16,384-float weight)."""
    targets = ", ".join(f"n{i}" for i in range(names))
    body = [f"{targets} = torch.chunk(x, 2)"]
    for i in range(ifs):
        body += [f"if bool(n{i}):", f"  y{i % 7} = torch.relu(n{i})", "else:", f"  y{i % 7} = n{i}"]
    body.append("return torch.add(y0, y1)")
    return script(folder, "names_per_if", _method("forward", ", x: Tensor", body), features=5_461)


def deep_nesting(folder: Path, calls: int = 60, ifs: int = 90, expression: int = 190) -> str:
    """Finding 4: 60 nested calls, then 90 nested `if`s, then a 190-deep expression: each under the old caps
    (64 calls, 200 levels of syntax), together past the interpreter's stack."""
    methods = _method("forward", ", x: Tensor", ["return (self).f0(x, )"])
    for i in range(calls):
        methods += _method(f"f{i}", ", x: Tensor", [f"return (self).f{i + 1}(x, )"])
    inner = [("  " * k) + f"if bool(x{k % 3}):" for k in range(ifs)]
    inner.append("  " * ifs + "return " + " + ".join(["x"] * expression))
    methods += _method(f"f{calls}", ", x: Tensor", ["x0 = x", "x1 = x", "x2 = x", *inner, "return x"])
    return script(folder, "deep_nesting", methods)


def inflated_code(folder: Path, megabytes: int = 4) -> str:
    """Finding 5: a code record that inflates to 4 MB from ~5 KB of deflate (`ast.parse` of it peaks at GBs)."""
    filler = "    _0 = x\n" * (megabytes * (1 << 20) // 11)
    methods = _method("forward", ", x: Tensor", ["return x"]) + _method("other", ", x: Tensor", [])
    return script(folder, "inflated_code", methods + filler + "    return x\n")


def inflated_program(folder: Path, megabytes: int = 30) -> str:
    """Finding 5: a `.pt2` whose model.json inflates to 30 MB of JSON values from ~34 KB (its parse holds GBs)."""

    def pad(data: bytes) -> bytes:
        program = json.loads(data)
        program["padding"] = "@"
        text = json.dumps(program)
        return text.replace('"@"', "[" + "[]," * (megabytes * (1 << 20) // 3) + "[]]").encode()

    return rewrite(exported_base(folder), str(folder / "inflated_program.pt2"), {MODEL_JSON: pad}, (MODEL_JSON,))


def shared_symbolic_sizes(folder: Path, nodes: int = 200, sizes: int = 300) -> str:
    """Finding 7: 200 nodes and 200 inputs share one value whose 300 sizes are long symbolic expressions:
    parsed again per node, that is 120,000 parses; from a few KB (model.json deflated)."""
    expr = "Add(" + ", ".join(f"Mul(Integer({i}), Symbol('s{i}', positive=True, integer=True))"
                             for i in range(30)) + ")"

    def share(data: bytes) -> bytes:
        program = json.loads(data)
        graph = program["graph_module"]["graph"]
        graph["tensor_values"]["shared"] = {**next(iter(graph["tensor_values"].values())),
                                            "sizes": [{"as_expr": {"expr_str": expr, "hint": None}}] * sizes}
        node = graph["nodes"][0]
        graph["nodes"] = [*graph["nodes"], *({**node, "outputs": [{"as_tensor": {"name": "shared"}}]}
                                               for _ in range(nodes))]
        program["graph_module"]["signature"]["input_specs"] += [
            {"user_input": {"arg": {"as_tensor": {"name": "shared"}}}}] * nodes
        return json.dumps(program).encode()

    return rewrite(exported_base(folder), str(folder / "shared_sizes.pt2"), {MODEL_JSON: share}, (MODEL_JSON,))

"""A TorchScript archive's `code/` records as Python syntax trees: parsed, never compiled or run.

TorchScript serializes every class and function it compiled as Python source under `code/`, one record per
qualified prefix: `__torch__.torch.nn.modules.linear.___torch_mangle_4.Linear` is class `Linear` of
`code/__torch__/torch/nn/modules/linear/___torch_mangle_4.py`. A record is read (CRC-checked, charged as it
inflates) and parsed with `ast` the first time a definition in it is asked for; nothing is imported, compiled
or run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ckptview.core.budget import Budget, BudgetExceeded, source_units
from ckptview.core.errors import CheckpointError
from ckptview.core.graph.limits import GraphRefused
from ckptview.core.read.formats.torch_zip import ZipArchive


@dataclass
class ClassCode:
    """A class of the archive's code: its methods and the constants its body declares (`x : Final[int] = 4`)."""

    qualname: str
    methods: dict[str, ast.FunctionDef] = field(default_factory=dict)
    constants: dict[str, ast.expr] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)  # attribute -> the qualified class it names


class ScriptCode:
    """The definitions of one archive's code records, parsed on demand; every read and parse charged to `budget`.

    A record is charged while it is read or inflated, by what `ast.parse` will build from it (`source_units`:
    each token), so a few KB that inflate to megabytes of code stop at what the file pays for, before any of
    it is parsed."""

    def __init__(self, archive: ZipArchive, budget: Budget) -> None:
        self.archive, self.budget = archive, budget
        self._modules: dict[str, dict[str, ast.stmt] | None] = {}
        self._classes: dict[str, ClassCode | None] = {}

    def _record(self, prefix: str) -> dict[str, ast.stmt] | None:
        """{top-level name: definition} of the record for a qualified prefix (`__torch__.a.b`), None if absent."""
        if prefix in self._modules:
            return self._modules[prefix]
        name = "code/" + prefix.replace(".", "/") + ".py"
        if self.archive.member(name) is None:
            self._modules[prefix] = None
            return None
        try:
            data = self.archive.read_small(name, budget=self.budget, units=source_units, what="tokens of code parsed")
        except BudgetExceeded:
            raise
        except CheckpointError as exc:
            raise GraphRefused(f"TorchScript code record '{name[:120]}': {exc}") from None
        try:
            tree = ast.parse(data.decode("utf-8", "replace"), filename=name, mode="exec")
        except SyntaxError as exc:
            raise GraphRefused(f"TorchScript code record '{name[:120]}' is not Python syntax: {exc.msg} "
                               f"(line {exc.lineno})") from None
        except (ValueError, RecursionError, MemoryError) as exc:
            raise GraphRefused(f"TorchScript code record '{name[:120]}' cannot be parsed: "
                               f"{type(exc).__name__}") from None
        self.budget.charge(len(tree.body) + 1, "definitions listed")
        found: dict[str, ast.stmt] = {stmt.name: stmt for stmt in tree.body
                                      if isinstance(stmt, (ast.ClassDef, ast.FunctionDef))}
        self._modules[prefix] = found
        return found

    def _definition(self, qualname: str) -> ast.stmt | None:
        prefix, _, name = qualname.rpartition(".")
        if not prefix or not qualname.startswith("__torch__"):
            return None
        record = self._record(prefix)
        return None if record is None else record.get(name)

    def cls(self, qualname: str) -> ClassCode | None:
        """The class `qualname` of the archive's code, None when no record defines it."""
        if qualname in self._classes:
            return self._classes[qualname]
        node = self._definition(qualname)
        found = None
        if isinstance(node, ast.ClassDef):
            found = ClassCode(qualname)
            self.budget.charge(len(node.body) + 1, "definitions listed")
            for stmt in node.body:
                if isinstance(stmt, ast.FunctionDef):
                    found.methods[stmt.name] = stmt
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    if stmt.value is not None and _is_final(stmt.annotation):
                        found.constants[stmt.target.id] = stmt.value
                    elif (dotted := dotted_name(stmt.annotation)) is not None and dotted.startswith("__torch__."):
                        found.annotations[stmt.target.id] = dotted
        self._classes[qualname] = found
        return found

    def function(self, qualname: str) -> ast.FunctionDef | None:
        """The free function `qualname` (`__torch__.torch.nn.functional.relu`), None when none is defined."""
        node = self._definition(qualname)
        return node if isinstance(node, ast.FunctionDef) else None


def dotted_name(node: ast.expr) -> str | None:
    """`a.b.c` of a chain of attributes over a name, else None (iterative: a chain may be long)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):  # bounded: one node each of a syntax tree charged when parsed
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _is_final(annotation: ast.expr) -> bool:
    return isinstance(annotation, ast.Subscript) and dotted_name(annotation.value) in ("Final", "typing.Final")

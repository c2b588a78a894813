"""The architecture rule "no loop over what a file declares runs outside the budget", as an AST check.

A loop's cost cannot be read off its source in general; this checks the loops whose cost is not bounded by
something already built and paid for, in every reader and parser module (core/read, core/graph, minus the
modules named in `EXEMPT` with their reasons):

- every `while` loop (a parser over bytes, a walk with a stack, a retry): its body charges the budget
  (`.charge(`, `.enter(`, `.frame(`), or its line says why it is bounded (a comment with "charged" or
  "bounded": "bounded: each opcode reads at least one byte");
- every loop nested in another loop of the same function (work that multiplies): the inner or the outer
  body charges, or one of their lines says why;
- every function that calls itself (recursion as deep as the input): it enters a level of the budget
  (`.enter(` / `.frame(`), or its `def` line says why it is bounded.

A single `for` over a list, dict or string already in memory is not checked: its length was paid for when
it was parsed or built (JSON values, pickle opcodes, header entries and tree nodes are charged there).
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

CHARGES = frozenset({"charge", "enter", "frame", "affords"})
REASONS = ("charged", "bounded")
LOOPS = (ast.For, ast.While, ast.AsyncFor, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
SCOPE = ("core/read", "core/graph")
EXEMPT = {
    "core/read/values": "reads a tensor's bytes (a view's span, chunks of a region): bounded by the bytes the "
                        "view covers, which `repeats` bounds by the bytes stored",
    "core/read/bytes/files.py": "the byte layer: positioned reads of a range asked for, in bounded steps",
    "core/read/bytes/fs.py": "the byte layer: where files are (a listing capped by MAX_FOLDER_FILES)",
    "core/read/bytes/sources.py": "the byte layer: a storage's bytes, read or inflated for a range asked for "
                                  "(`read_all` charges its pieces)",
    "core/read/bytes/remote": "the byte layer over HTTP: requests, blocks and deadlines, not what a file declares",
    "core/read/folder_contents.py": "a folder's listing for a message (MAX_SNIFFED entries, a constant)",
    "core/graph/collapse.py": "draws a graph already built and charged (its nodes and edges were paid for)",
    "core/graph/layout.py": "lays out a view of a graph already built and charged",
    "core/graph/dot.py": "writes a graph already built and charged",
    "core/graph/overlay.py": "figures of the tensors a built graph's boxes read",
    "core/graph/adapter.py": "jobs over a built graph for the window",
    "core/graph/cache.py": "the SQLite cache of graphs already built",
    "core/graph/model.py": "a graph's JSON form, read back bounded by MAX_NODES and MAX_LIST",
    "core/graph/module_tree.py": "the checkpoint's module tree, whose nodes the open charged",
    "core/graph/library.py": "a library's graph, traced in the worker process under its own limits",
}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def modules(src: Path) -> list[Path]:
    """The reader and parser modules the rule covers."""
    out = []
    for scope in SCOPE:
        for path in sorted((src / scope).rglob("*.py")):
            rel = path.relative_to(src).as_posix()
            if not any(rel == e or rel.startswith(e + "/") for e in EXEMPT):
                out.append(path)
    return out


def _comments(text: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string
    return found


def _charges(node: ast.AST) -> bool:
    """Whether `node`'s body calls something that charges the budget."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in CHARGES:
                return True
    return False


class _Checker(ast.NodeVisitor):
    def __init__(self, rel: str, comments: dict[int, str]) -> None:
        self.rel, self.comments = rel, comments
        self.findings: list[Finding] = []
        self.loops: list[ast.AST] = []
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self.classes: list[str] = []

    def _reasoned(self, node: ast.AST) -> bool:
        line = getattr(node, "lineno", 0)
        return any(word in self.comments.get(line, "") for word in REASONS)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = self.loops
        self.loops = []  # loops of an enclosing function do not multiply this one's (it may run once)
        self.functions.append(node)
        if self._recurses(node) and not _charges(node) and not self._reasoned(node):
            self.findings.append(Finding(self.rel, node.lineno, f"{node.name} calls itself without entering a "
                                                               "level of the budget"))
        self.generic_visit(node)
        self.functions.pop()
        self.loops = outer

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def _recurses(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                func = sub.func
                if isinstance(func, ast.Name) and func.id == node.name and not self.classes:
                    return True
                if isinstance(func, ast.Attribute) and func.attr == node.name and isinstance(func.value, ast.Name) \
                        and func.value.id in ("self", "cls") and self.classes:
                    return True
        return False

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, LOOPS) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._loop(node)
            self.loops.append(node)
            super().generic_visit(node)
            self.loops.pop()
        else:
            super().generic_visit(node)

    def _loop(self, node: ast.AST) -> None:
        if self._reasoned(node) or _charges(node):
            return
        if isinstance(node, ast.While):
            self.findings.append(Finding(self.rel, node.lineno, "a while loop that neither charges the budget nor "
                                                                "says why it is bounded"))
        elif self.loops and not any(self._reasoned(o) or _charges(o) for o in self.loops):
            self.findings.append(Finding(self.rel, node.lineno, "a loop inside a loop: neither charges the budget "
                                                                "nor says why it is bounded"))

    def visit_For(self, node: ast.For) -> None:
        self.generic_visit(node)

    visit_While = visit_AsyncFor = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_For


def findings(src: Path) -> list[Finding]:
    """Every loop and recursion of the covered modules that breaks the rule."""
    out: list[Finding] = []
    for path in modules(src):
        text = path.read_text()
        checker = _Checker(path.relative_to(src).as_posix(), _comments(text))
        checker.visit(ast.parse(text))
        out += checker.findings
    return out

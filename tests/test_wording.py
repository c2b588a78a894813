"""Words shown to a person agree with their numbers (issue 45, defect 8): `1 keys`, `1 tensors`, `1 checkpoints`.

Every f-string that puts a count before a plural noun goes through `core.units.plural` (or says why not
below). Read from the source with `ast`, so a new message is held to it the day it is written.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.paths import SRC

NOUNS = {"keys", "tensors", "checkpoints", "entries", "files", "modules", "parameters", "values", "nodes", "items",
         "rows", "steps", "shards", "globals", "warnings", "elements", "chunks", "layers", "names", "groups",
         "buffers", "records", "storages", "columns", "tabs", "ops", "findings", "runs", "errors", "matches",
         "problems", "lines", "kinds", "samples", "weights", "states", "points", "requests", "pieces", "tags",
         "ranks", "batches", "epochs"}
# (module, the count's expression): why a plural noun after it is always right.
EXEMPT = {
    ("core/export/plan.py", "len(renames)"): "said only when more than one",
    ("core/graph/exported.py", "len(nodes)"): "a refusal: more than the cap",
    ("core/graph/model.py", "len(raw)"): "a refusal: more than the cap",
    ("core/graph/module_tree.py", "len(modules)"): "a refusal: more than the cap",
    ("core/read/formats/safetensors_file.py", "len(piece)"): "a refusal: more than the cap",
    ("core/inspect/grouping.py", "len(self.nodes)"): "a repr for developers",
    ("core/inspect/optimizer.py", "found.states"): "a search's states: thousands",
    ("core/read/pickle/vm.py", "self.copy_budget"): "a refusal: more than the budget",
    ("core/read/formats/torch_zip.py", "what"): "a verb: 'record X runs past'",
    ("core/run/config_guard.py", "field"): "a verb: 'X names Y'",
    ("core/run/lightning.py", "self.name"): "a verb: 'X names class Y'",
    ("gui/checkpoint/tree_model.py", "len(shards)"): "said only for more than one chunk",
    ("core/read/pickle/to_tree.py", "count - 1 if count > max_nodes else MAX_REPEATED_NODES"): "past a limit",
    ("core/read/pickle/to_tree.py", "max_nodes if count > max_nodes else MAX_REPEATED_NODES"): "past a limit",
    ("commands/info.py", "human_count(params)"): "a rounded count ('7.9 K'), never one",
    ("core/read/formats/gguf_header.py", "'x'.join(map(str, reversed(dims)))"): "a shape ('4096x32000'), not a count",
    ("core/run/declared_sizes.py", "_shown(layers)"): "a refusal: more layers than the checkpoint holds",
}


def counted_plurals(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, count expression, noun) of each `{count} nouns` in an f-string."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        for value, after in zip(node.values, node.values[1:], strict=False):
            if isinstance(value, ast.FormattedValue) and isinstance(after, ast.Constant) \
                    and isinstance(after.value, str):
                word = re.match(r"\s+(\w+)", after.value)
                expr = ast.unparse(value.value)
                if word and word.group(1) in NOUNS and not re.fullmatch(r"[A-Z_][A-Z0-9_.]*", expr):
                    found.append((node.lineno, expr, word.group(1)))
    return found


def test_every_count_before_a_plural_goes_through_plural():
    package = Path(SRC)
    assert (package / "cli.py").is_file()  # the package itself, not an empty folder
    problems = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        for line, expr, noun in counted_plurals(ast.parse(path.read_text(encoding="utf-8"))):
            if (where, expr) not in EXEMPT:
                problems.append(f"{where}:{line}: {{{expr}}} {noun} reads '1 {noun}' for one: plural({expr}, ...)")
    assert not problems, "\n".join(problems)


def test_the_guard_finds_what_it_is_for():
    bad = ast.parse('n = 1\ntext = f"{n} keys and {len(x):,} checkpoints"\nok = f"{MAX_NODES:,} nodes"')
    assert [(e, w) for _, e, w in counted_plurals(bad)] == [("n", "keys"), ("len(x)", "checkpoints")]


def test_irregular_plurals_are_spelled_out():
    """`plural(n, "entry")` read "21 entrys": a noun whose plural is not noun + "s" names it."""
    problems = []
    for path in sorted(Path(SRC).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "plural" and len(node.args) == 2 \
                    and not node.keywords and isinstance(node.args[1], ast.Constant):
                noun = str(node.args[1].value)
                if re.search(r"([^aeo]y|s|x|ch|sh)$", noun):
                    problems.append(f"{path.name}:{node.lineno}: plural(..., {noun!r}) needs its plural")
    assert not problems, "\n".join(problems)

"""Layering promises: the core never imports Qt; nothing in src loads a pickle that can execute."""

from __future__ import annotations

import ast
import functools
import inspect
import io
import re
import tokenize

from tests.support.paths import SRC


@functools.cache
def _text(path) -> str:
    """A module's source, read once for every rule."""
    return path.read_text()


@functools.cache
def _tree(path) -> ast.Module:
    """A module's syntax tree, parsed once for every rule (rules only read it)."""
    return ast.parse(_text(path))


def _exempt(relative: str, name: str | None = None):
    """A module a rule exempts (or the module that owns a rule), under src/ckptview: it must exist, and `name`
    must be defined at its top level (a class, a function or an assignment), so an exemption does not
    outlive what it exempts and a rule does not silently point at a module that moved."""
    path = SRC / relative
    assert path.is_file(), f"stale exemption: {relative} does not exist"
    if name is not None:
        top = {n.name for n in _tree(path).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        top |= {t.id for n in _tree(path).body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        assert name.split(".")[0] in top, f"stale exemption: {relative} defines no {name}"
    return path


def test_a_stale_exemption_fails_its_rule():
    """The exemption check itself: a module that is gone, or a name its module does not define, is refused."""
    import pytest

    for relative, name in (("core/read/files.py", None), ("core/units.py", "no_such_function")):
        with pytest.raises(AssertionError, match="stale exemption"):
            _exempt(relative, name)
    assert _exempt("core/units.py", "MISSING") == SRC / "core" / "units.py"


def test_core_never_imports_qt():
    pattern = re.compile(r"^\s*(from|import)\s+(PySide6|PyQt\d|pyqtgraph|shiboken6)", re.M)
    offenders = [str(p) for p in (SRC / "core").rglob("*.py") if pattern.search(_text(p))]
    assert offenders == []


def test_no_executing_loads_outside_the_trusted_worker():
    pattern = re.compile(r"pickle\.loads?\(|weights_only=False")
    offenders = []
    for path in SRC.rglob("*.py"):
        tokens = tokenize.generate_tokens(io.StringIO(_text(path)).readline)
        code = " ".join(t.string for t in tokens if t.type not in (tokenize.STRING, tokenize.COMMENT))
        offenders += [f"{path.name}: {m.group(0)}" for m in pattern.finditer(code.replace(" ", ""))]
    assert offenders == []


def test_the_window_package_holds_only_qt_code():
    """Logic without Qt belongs to the core, where the command line can use it too."""
    qt = re.compile(r"^\s*(from|import)\s+(PySide6|pyqtgraph|shiboken6)", re.M)
    offenders = [str(p.relative_to(SRC)) for p in (SRC / "gui").rglob("*.py") if p.name != "__init__.py" and not qt.search(_text(p))]
    assert offenders == []


def test_one_module_changes_the_collector():
    """The process's collector state (freeze, disable, collect) is changed by core/gc_policy.py only; the
    window's collector (gui/base/gc_guard.py) and everything else go through its API."""
    pattern = re.compile(r"^\s*(import gc\b|from gc import)", re.M)
    allowed = {_exempt("core/gc_policy.py")}
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p not in allowed and pattern.search(_text(p))]
    assert offenders == []


def test_tabs_reach_their_window_only_through_its_typed_interface():
    """A checkpoint tab asks its window through `TabHost` (gui/checkpoint/host.py), whose members mypy checks
    against MainWindow; a getattr on the window would be a member nobody declared."""
    pattern = re.compile(r"\b(getattr|hasattr)\(\s*(self\.)?_?(window_?|host)\s*,")
    offenders = []
    for path in (SRC / "gui").rglob("*.py"):
        tokens = tokenize.generate_tokens(io.StringIO(_text(path)).readline)
        code = " ".join(t.string for t in tokens if t.type not in (tokenize.STRING, tokenize.COMMENT))
        offenders += [f"{path.name}: {m.group(0)}" for m in pattern.finditer(code.replace(" ", ""))]
    assert offenders == []


def test_no_thread_local_carries_context_in_the_read_layer():
    """Readers and reads get their context explicitly (`ReaderContext`, a walk's `ReadAhead`, a request's
    deadline on its timeout): a thread-local (or a ContextVar, one by another name) makes what a read does
    depend on which thread runs it, and hides from a maintainer what the read depends on."""
    pattern = re.compile(r"threading\.local|\blocal\(\)|contextvars|ContextVar")
    offenders = []
    for path in (SRC / "core" / "read").rglob("*.py"):
        tokens = tokenize.generate_tokens(io.StringIO(_text(path)).readline)
        code = " ".join(t.string for t in tokens if t.type not in (tokenize.STRING, tokenize.COMMENT))
        offenders += [f"{path.relative_to(SRC)}: {m.group(0)}" for m in pattern.finditer(code.replace(" ", ""))]
    assert offenders == []


def test_readers_are_registered_with_their_declared_priority():
    """The registry lists every reader module, highest declared priority first (no getattr defaults)."""
    from ckptview.core.read.formats import readers

    found = readers()
    helpers = {"__init__", "safetensors_header", "gguf_header"}  # a reader's header parser, beside it
    for helper in helpers:
        _exempt(f"core/read/formats/{helper}.py")
    modules = {p.stem for p in (SRC / "core" / "read" / "formats").glob("*.py")} - helpers
    assert {r.__name__.rsplit(".", 1)[-1] for r in found} == modules  # type: ignore[attr-defined]
    assert [r.PRIORITY for r in found] == sorted((r.PRIORITY for r in found), reverse=True)
    assert all(isinstance(r.NAME, str) and r.NAME for r in found)
    # The interface: a typed Source (what the open found) and an explicit context, never a bare path.
    for reader in found:
        sniff, opener = inspect.signature(reader.sniff), inspect.signature(reader.open)
        assert list(sniff.parameters) == ["source"] and list(opener.parameters) == ["source", "ctx"], reader
        assert sniff.parameters["source"].annotation == "Source", reader
        assert opener.parameters["source"].annotation == "Source", reader


def test_readers_open_files_as_the_open_found_them():
    """A reader opens its source through `source.file_map()` / `source.open_file()`, and a folder's files
    with the identity the open took (`Source.child_identity`, DCP's `opened_as`): a `FileMap(path)` or
    `open_regular(path)` without one in a reader would read whatever file the path names by then."""

    allowed = {
        ("torch_zip.py", "ZipArchive.__init__"),  # `fmap or FileMap(path)`: for callers outside the readers
        ("training_folder.py", "_json_node"),  # a JSON side file: no identity is taken for it
    }
    for module, where in allowed:
        _exempt(f"core/read/formats/{module}", where)
    offenders = []
    for path in (SRC / "core" / "read" / "formats").glob("*.py"):
        for top in _tree(path).body:
            funcs = [(f"{top.name}.{f.name}", f) for f in top.body if isinstance(f, ast.FunctionDef)] \
                if isinstance(top, ast.ClassDef) else [(top.name, top)] if isinstance(top, ast.FunctionDef) else []
            for where, func in funcs:
                for node in ast.walk(func):
                    if not (isinstance(node, ast.Call) and len(node.args) + len(node.keywords) < 2):
                        continue
                    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                    if name in ("FileMap", "open_regular") and (path.name, where) not in allowed:
                        offenders.append(f"{path.name}:{node.lineno} {where}")
    assert sorted(set(offenders)) == []


def test_files_are_read_only_through_the_byte_layer():
    """Every read of a file in the core goes through `core/read/bytes/files.py` (`open_regular`, `FileMap`): it
    never blocks on a FIFO, refuses special files, checks identities. A plain `open()` for reading elsewhere
    is a second way in (a FIFO named config.json once hung the run's worker and fed it)."""

    offenders = []
    for path in (SRC / "core").rglob("*.py"):
        for node in ast.walk(_tree(path)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open"):
                continue
            mode = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "mode"), ast.Constant("r"))
            writes = isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wxa")
            if not writes:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == []


# --- The shape of the code: imports flow one way, folders stay small, names do not stutter -----------------
# Each rule below is the "Done when" of issue 36; docs/architecture.md says why each holds.

def _module_name(path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_in(node, importer: str, package: str, modules: set[str], where: str = "module"):
    """(imported ckptview module, line, where) of every import below `node` (see `_import_graph`)."""

    for child in ast.iter_child_nodes(node):
        inner = where
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = "function"
        elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and where == "module":
            inner = "type"
        if isinstance(child, ast.Import):
            names = [a.name for a in child.names]
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                up = package.split(".")[: len(package.split(".")) - child.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in child.names]
        else:
            yield from _imports_in(child, importer, package, modules, inner)
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != importer:
                yield name, child.lineno, where


def _import_graph():
    """Every import of a ckptview module by a ckptview module, as the AST has it: (importer, imported,
    line, where) with `where` "function" inside a def or lambda, "type" under `if TYPE_CHECKING:`,
    else "module". `from pkg import mod` counts as an import of `pkg.mod`."""

    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    modules = set(files)
    edges = []
    for importer, path in files.items():
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for imported, line, where in _imports_in(_tree(path), importer, package, modules):
            edges.append((importer, imported, line, where))
    return modules, edges


def _strongly_connected(modules, edges) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (iterative: no recursion limit)."""
    graph = {m: sorted({b for a, b, *_ in edges if a == m}) for m in sorted(modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            for j in range(i, len(graph[node])):
                nxt = graph[node][j]
                if nxt not in index:
                    work += [(node, j + 1), (nxt, 0)]
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return found


def test_tarjan_finds_a_cycle_and_only_cycles():
    """The cycle finder itself: a loop of three is one component, a chain is none."""
    edges = [("a", "b", 1, "module"), ("b", "c", 1, "function"), ("c", "a", 1, "type"), ("c", "d", 1, "module")]
    assert _strongly_connected({"a", "b", "c", "d"}, edges) == [["a", "b", "c"]]
    assert _strongly_connected({"a", "b", "c", "d"}, edges[:2] + edges[3:]) == []


def test_no_import_cycle_among_modules():
    """Imports flow one way: no strongly connected component in the graph of every import (inside
    functions and under TYPE_CHECKING too, where a cycle would otherwise hide)."""
    modules, edges = _import_graph()
    assert _strongly_connected(modules, edges) == []


def test_no_ckptview_module_is_imported_inside_a_function():
    """A function-level import of a ckptview module hides a dependency (usually a cycle): code moves
    instead. Only heavy or optional third-party libraries (numpy, torch, pyqtgraph, transformers) are
    imported inside functions, so that the window appears before they load."""
    _, edges = _import_graph()
    assert sorted(f"{a}:{line} imports {b}" for a, b, line, where in edges if where == "function") == []


def _top_level_names(path) -> tuple[set[str], list[str] | None]:
    """The names a module defines at its top level (not those it imports), and its `__all__` if any."""

    tree = _tree(path)
    defined: set[str] = set()
    exported = None
    body = list(tree.body)
    while body:
        node = body.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            body += node.body + node.orelse + [n for h in getattr(node, "handlers", []) for n in h.body]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                if isinstance(target, ast.Name) and target.id == "__all__":
                    exported = list(ast.literal_eval(node.value))
    return defined, exported


def test_names_are_imported_from_where_they_live():
    """`from ckptview.x import name` names what x defines, or what package x names in its `__all__` (its
    public API): never a name x only imports (a re-export that hides where the code lives)."""

    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    offenders = []
    for importer, path in files.items():
        for node in ast.walk(_tree(path)):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in files):
                continue
            defined, exported = _top_level_names(files[node.module])
            package = files[node.module].name == "__init__.py"
            for alias in node.names:
                if f"{node.module}.{alias.name}" in files or alias.name in defined:
                    continue
                if package and exported is not None and alias.name in exported:
                    continue
                offenders.append(f"{importer}:{node.lineno} {node.module}.{alias.name}")
    assert offenders == []


def test_no_module_imports_a_private_name_of_another():
    """A `_name` is its module's own; what another module needs is public (and so part of an interface)."""

    offenders = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ckptview"):
                offenders += [f"{_module_name(path)}:{node.lineno} {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert offenders == []


def test_modules_define_no_aliases_of_old_names():
    """No `old = new` kept for callers: a module-level assignment of a bare name to another name it
    imported or defined (`_finite = finite_json`), or an import under an alias that only renames a
    function of the core (`drain as run_job`)."""

    offenders = []
    for path in SRC.rglob("*.py"):
        tree = _tree(path)
        callables = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                callables.update(a.asname or a.name for a in node.names)
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Tuple)):
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                if values and all(isinstance(v, ast.Name) and v.id in callables and v.id[0].islower() for v in values):
                    offenders.append(f"{_module_name(path)}:{node.lineno} {ast.unparse(node)}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ckptview"):
                offenders += [f"{_module_name(path)}:{node.lineno} {a.name} as {a.asname}" for a in node.names
                              if a.asname and a.asname != a.name and a.name[0].islower() and a.asname[0] != "_"
                              and f"{node.module}.{a.name}" not in {_module_name(p) for p in SRC.rglob("*.py")}]
    assert offenders == []


def _imported_roots(path) -> set[str]:
    """The top-level names of everything a module imports, anywhere in it (functions included)."""

    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_worker_imports_torch():
    """torch (and the libraries that run models) load only in the worker process, whose modules are
    core/worker/: everything else reads checkpoints without it."""
    worker = SRC / "core" / "worker"
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if worker not in p.parents and _imported_roots(p) & {"torch", "transformers", "diffusers", "timm",
                                                                       "torchvision", "lightning", "pytorch_lightning"}]
    assert offenders == []


def test_nothing_imports_the_worker():
    """core/worker/ is a process of its own, started by module name (core/run/child.py): no other module
    imports it (its modules run torch and model code), so nothing of the child runs in a parent."""
    _, edges = _import_graph()
    offenders = [f"{a}:{line}" for a, b, line, _ in edges
                 if not a.startswith("ckptview.core.worker") and b.startswith("ckptview.core.worker")]
    assert offenders == []


def test_only_the_workers_module_starts_threads_in_the_window():
    """GUI jobs go through `JobSlot` (gui/base/workers.py, over superqt's workers): no other module of gui/
    builds a worker, a runnable, a thread or a pool of its own, or imports superqt's thread helpers."""

    makers = {"GeneratorWorker", "FunctionWorker", "WorkerBase", "create_worker", "thread_worker",
              "new_worker_qthread", "QThreadPool", "QRunnable", "QThread", "Thread", "ThreadPoolExecutor"}
    allowed = _exempt("gui/base/workers.py")
    offenders = []
    for path in (SRC / "gui").rglob("*.py"):
        if path == allowed:
            continue
        for node in ast.walk(_tree(path)):
            named = node.func if isinstance(node, ast.Call) else None
            name = named.attr if isinstance(named, ast.Attribute) else getattr(named, "id", None)
            if name in makers and name != "QThread":  # QThread.currentThread() asks, it starts nothing
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} {name}(...)")
            if isinstance(node, ast.ClassDef):
                bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
                offenders += [f"{path.relative_to(SRC)}:{node.lineno} class {node.name}({b})" for b in bases & makers]
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("superqt.utils", "concurrent")):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} from {node.module} import ...")
    assert offenders == []


def test_the_window_declares_what_it_asks_of_tabs_and_panels():
    """The main tabs share the `Tab` protocol, panels that follow the selection `SupportsSelection`; the
    window and the side panels never probe a widget with getattr/hasattr or call a method by its name."""

    from ckptview.gui.base.tab import Tab
    from ckptview.gui.checkpoint.host import SupportsSelection
    from ckptview.gui.checkpoint.tab import CheckpointTab
    from ckptview.gui.compare.tab import CompareTab
    from ckptview.gui.series.tab import SeriesTab

    assert all(issubclass(kind, Tab) for kind in (CheckpointTab, CompareTab, SeriesTab))
    from ckptview.gui.app.main_window import PANELS

    followers = {p.title for p in PANELS if isinstance(p.factory, type) and issubclass(p.factory, SupportsSelection)}
    assert {"Statistics", "Heat-map", "Values", "Spectrum"} <= followers
    offenders = []
    for path in (SRC / "gui" / "app" / "main_window.py", SRC / "gui" / "checkpoint" / "side_panels.py",
                 SRC / "gui" / "export" / "dialog.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def _package_folders():
    return [SRC, *sorted(p for p in SRC.rglob("*") if p.is_dir() and (p / "__init__.py").exists())]


def test_no_folder_holds_more_than_twenty_modules():
    """A folder past twenty modules hides features in it: split it into folders that name them."""
    crowded = {str(d.relative_to(SRC.parent)): n for d in _package_folders()
               if (n := len([p for p in d.glob("*.py") if p.name != "__init__.py"])) > 20}
    assert crowded == {}


def test_no_family_of_modules_shares_a_name_prefix():
    """Four modules or more named `series_*` are a folder named `series`: a prefix stands for a folder."""
    from collections import Counter

    families = {}
    for d in _package_folders():
        prefixes = Counter(p.stem.split("_")[0] for p in d.glob("*.py") if p.name != "__init__.py")
        families.update({f"{d.relative_to(SRC.parent)}/{prefix}_*": n for prefix, n in prefixes.items() if n >= 4})
    assert families == {}


def test_no_module_repeats_its_folders_name():
    """`run/run_loading.py` says "run" twice: in a feature's folder, a module is named for its part only."""
    stutters = [str(p.relative_to(SRC.parent)) for d in _package_folders() for p in d.glob("*.py")
                if p.name != "__init__.py" and d.name in p.stem.split("_")]
    assert stutters == []


def test_every_package_names_its_public_api():
    """Each package's `__init__.py` lists its public API in `__all__` (every name bound there), and no
    module imports from a package it is inside (the package's API is for other packages; from inside it
    would run the package's imports before the module's own)."""

    missing, unbound, inward = [], [], []
    for init in SRC.rglob("__init__.py"):
        package = _module_name(init)
        tree = _tree(init)
        defined, exported = _top_level_names(init)
        # A package's names are imported at its top, or (lazily, `lazy_loader.attach`) under TYPE_CHECKING.
        body = tree.body + [n for b in tree.body if isinstance(b, ast.If) and "TYPE_CHECKING" in ast.unparse(b.test)
                            for n in b.body]
        bound = defined | {a.asname or a.name for n in body if isinstance(n, ast.ImportFrom) for a in n.names}
        if exported is None:
            missing.append(package)
        else:
            unbound += [f"{package}.{name}" for name in exported if name not in bound]
    for path in SRC.rglob("*.py"):
        importer = _module_name(path)
        for node in ast.walk(_tree(path)):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and importer.startswith(node.module + ".")):
                continue
            defined, _ = _top_level_names(SRC.parent / node.module.replace(".", "/") / "__init__.py")
            inward += [f"{importer}:{node.lineno} from {node.module} import {a.name}" for a in node.names
                       if a.name not in defined  # what the package re-exports from its modules, not its own
                       and not (SRC.parent / node.module.replace(".", "/") / a.name).exists()
                       and not (SRC.parent / node.module.replace(".", "/") / f"{a.name}.py").exists()]
    assert (missing, unbound, inward) == ([], [], [])


# Module-level state a function changes, and why each is process-wide on purpose ("path:NAME": reason).
AMBIENT = {
    "core/gc_policy.py:_main_depth": "the collector's switches are the process's (docs/architecture.md)",
    "core/gc_policy.py:_park_requested": "the collector's switches are the process's",
    "core/gc_policy.py:_was_enabled": "the collector's switches are the process's",
    "core/gc_policy.py:_workers_building": "the collector's switches are the process's",
    "commands/__init__.py:_kept": "what a command keeps until its process exits (`keep_until_exit`)",
    "core/read/bytes/remote/cache.py:CACHE": "the remote block cache's one 64 MiB bound; blocks keyed by file",
    "core/read/bytes/location.py:_HELD": "weak: a held `Location`, found by its shown URL only while its "
                                         "holder (an open's session, a tab) lives, so no token outlives it",
    "core/worker/build_guard.py:_state": "the worker process's audit hook (one per process, one job each)",
    "core/worker/lifeline.py:_own": "the scratch folder the worker process removes as it leaves",
    "gui/base/gc_guard.py:_guard": "the window's collector, one per QApplication",
    "gui/base/palette.py:_current": "the window's theme, one per QApplication",
    "gui/base/palette.py:_events": "the theme's change signal, one per QApplication",
    "gui/base/palette.py:_system_palette": "the desktop's palette, read once per QApplication",
    "gui/base/plots.py:_NOTES": "an empty plot's note, weakly keyed by the plot (gone with it)",
    "gui/base/workers.py:_notifier": "file events on the GUI thread, one per QApplication",
    "gui/base/workers.py:_waiting_pool": "the pool of jobs that wait on another process, one per QApplication",
    "gui/panels/run.py:_probed_devices": "devices probed once per window session (a probe starts a process)",
}
_MUTATORS = {"append", "extend", "add", "update", "pop", "clear", "setdefault", "insert", "remove", "discard",
             "popitem", "sort", "reverse", "move_to_end", "appendleft", "popleft", "extendleft", "rotate"}


def _changed_root(node) -> str | None:
    """The name at the root of what `node` changes (`NAME[k] = `, `NAME.a = `, `NAME.append(...)`)."""
    target = None
    if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)):
        target = node.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
        target = node.func.value
    while isinstance(target, (ast.Subscript, ast.Attribute)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _self_changing_classes(paths) -> set[str]:
    """Classes with a method past `__init__` that changes the instance (`self.a = `, `self.a[k] = `,
    `self.a.append(...)`): an instance of one made at module level is state."""
    found = set()
    for path in paths:
        for cls in (n for n in ast.walk(_tree(path)) if isinstance(n, ast.ClassDef)):
            for method in cls.body:
                if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.name not in (
                        "__init__", "__post_init__", "__new__") and any(
                        _changed_root(n) == "self" for n in ast.walk(method)):
                    found.add(cls.name)
    return found


def ambient_state(src) -> dict[str, int]:
    """{"path:NAME": line} of module-level state: a module-level name that a function of its module rebinds
    (`global`) or changes in place (`NAME[k] = `, `NAME.a = `, `NAME.append/update/pop/...(...)`), or an
    instance made at module level of a class that changes itself. A function that binds the name locally
    (a parameter, an assignment) is not changing the module's; `functools.cache` is not found (a function's
    own memo of what its arguments give)."""
    paths = sorted(src.rglob("*.py"))
    changing = _self_changing_classes(paths)
    found: dict[str, int] = {}
    for path in paths:
        tree = _tree(path)
        module = {}
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                        module[name] = node.lineno
                        call = node.value if isinstance(node.value, ast.Call) else None
                        if call is not None and getattr(call.func, "id", None) in changing:
                            found[f"{path.relative_to(src).as_posix()}:{name}"] = node.lineno
        for func in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            args = func.args
            declared = {n for g in ast.walk(func) if isinstance(g, ast.Global) for n in g.names}
            local = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg] if a}
            local |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            for node in ast.walk(func):
                name = node.id if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) \
                    and node.id in declared else _changed_root(node)
                if name in module and (name in declared or name not in local):
                    found.setdefault(f"{path.relative_to(src).as_posix()}:{name}", node.lineno)
    return found


def test_module_state_is_only_what_the_allowlist_names():
    """State is passed, never ambient: the window or the command makes the workspace, each checkpoint's
    Analysis, the remote sessions and options and the caches, and hands them down (no `window_workspace()`,
    `shared_cache()`, registry of sessions by URL or singleton made on first use), so two windows, or two
    tests, in one process share nothing they did not share on purpose (the parameter orders a library told
    once lived in `hf_order`'s module-level `_cache`). Every module-level name a function changes is found,
    whatever its name, and each one left is in `AMBIENT` with why it is the process's; an entry that names
    nothing found goes too."""
    found = ambient_state(SRC)
    assert (sorted(set(found) - set(AMBIENT)), sorted(set(AMBIENT) - set(found))) == ([], [])


def test_the_ambient_state_finder_finds_what_functions_change(tmp_path):
    """The finder itself: a rebound global, an item set, a container appended to, an attribute set and a
    self-changing instance are found; a local of the same name, a constant read and a cached function not."""
    (tmp_path / "m.py").write_text(
        "import functools\n"
        "A = None\nB = {}\nC = []\nD = object()\nE = {}\nF = (1, 2)\n"
        "class Box:\n    def put(self, x):\n        self.x = x\n"
        "class Frozen:\n    def __init__(self):\n        self.x = 1\n"
        "G = Box()\nH = Frozen()\n"
        "def f():\n    global A\n    A = 1\n    B['k'] = 1\n    C.append(1)\n    D.attr = 2\n"
        "def g(E):\n    E['k'] = 1\n    return F[0]\n"
        "@functools.cache\ndef h(x):\n    return x\n")
    assert set(ambient_state(tmp_path)) == {f"m.py:{n}" for n in "ABCDG"}


def test_the_architecture_page_names_every_package():
    """docs/architecture.md maps the code: every package of src has its row there."""
    page = (SRC.parents[1] / "docs" / "architecture.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in page.splitlines() if line.startswith("| `ckptview")}
    packages = {_module_name(p) for p in SRC.rglob("__init__.py")}
    assert sorted(packages - rows) == []


def test_the_architecture_page_names_every_module():
    """docs/architecture.md's row of each package names each of its modules in backticks (`open.py` or
    `open`), so a maintainer finds every module on the map and a new one gets its words there; a `.py` the
    row names is a module that exists."""
    page = (SRC.parents[1] / "docs" / "architecture.md").read_text()
    rows = {}
    for line in page.splitlines():
        if line.startswith("| `ckptview"):
            cells = line.split("|")
            rows[cells[1].strip().strip("`")] = set(re.findall(r"`([^`]+)`", "|".join(cells[2:])))
    unnamed, stale = [], []
    for path in SRC.rglob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        package = _module_name(path).rpartition(".")[0]
        if not {path.stem, path.name} & rows.get(package, set()):
            unnamed.append(f"{package}: {path.stem}")
    for package, names in rows.items():
        folder = SRC.parent / package.replace(".", "/")
        stale += [f"{package}: {n}" for n in names if re.fullmatch(r"\w+\.py", n) and not (folder / n).exists()]
    assert (sorted(unnamed), sorted(stale)) == ([], [])


# Modules that may define a formatter of figures (a function whose result is one number formatted).
FORMATTERS = {"core/units.py": "the formatters: `figure`, `number`, `percent`, `human_bytes`, `count_text`, ..."}
_PRECISION = re.compile(r"(\.\d*)?[eEfFgGn%]$|\.\d+$")


def _formats_a_number(node) -> bool:
    """`node` is one number formatted with a precision: `f"{x:.5g}"`, `format(x, ".3f")`, `"%.2f" % x`,
    `"{:.1%}".format(x)` (a thousands separator alone, `{n:,}`, is an integer written in a sentence)."""
    if isinstance(node, ast.JoinedStr):
        parts = [v for v in node.values if not (isinstance(v, ast.Constant) and not v.value.strip(" %"))]
        spec = parts[0].format_spec if len(parts) == 1 and isinstance(parts[0], ast.FormattedValue) else None
        return spec is not None and bool(_PRECISION.search(ast.unparse(spec)[2:-1]))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "format":
        return len(node.args) > 1
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        text = node.func.value.value if isinstance(node.func.value, ast.Constant) else None
        return isinstance(text, str) and bool(re.fullmatch(r"\{:[^}]*[eEfFgG%]\}", text))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
        return isinstance(node.left.value, str) and bool(re.fullmatch(r"%[-+ #0]*\d*(\.\d+)?[eEfFgG]", node.left.value))
    return False


def number_formatters(src) -> list[str]:
    """"path:line name" of each function or lambda whose result is one number formatted (what a formatter
    is, whatever its name), outside the modules `FORMATTERS` allows."""
    found = []
    for path in sorted(src.rglob("*.py")):
        relative = path.relative_to(src).as_posix()
        if relative in FORMATTERS:
            continue
        for func in ast.walk(_tree(path)):
            if isinstance(func, ast.Lambda):
                results = [func.body]
            elif isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                results = [r.value for r in ast.walk(func) if isinstance(r, ast.Return) and r.value is not None]
            else:
                continue
            results += [v for r in list(results) if isinstance(r, ast.IfExp) for v in (r.body, r.orelse)]
            if any(_formats_a_number(r) for r in results):
                found.append(f"{relative}:{func.lineno} {getattr(func, 'name', 'lambda')}")
    return found


def test_figures_are_formatted_in_one_module():
    """A figure a person reads alone (a cell, a tooltip's value, a status line's number) is formatted by
    core/units.py (`figure`, `number`, `percent`, `human_bytes`, `count_text`, ...), the one module in
    `FORMATTERS`: no other module has a function whose result is one number formatted, whatever its name. A
    figure inside a sentence (an error's `{n:,} bytes`, a label's `{alpha:.3g}`) is written in place with
    its format spec. A figure there is none of shows the one marker, `units.MISSING`, never a dash of a
    module's own."""

    from ckptview.core.units import MISSING

    for relative in FORMATTERS:
        _exempt(relative)
    markers = {"-", "—", "–", "n/a", "N/A", MISSING}
    offenders = number_formatters(SRC)
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).as_posix() in FORMATTERS:
            continue
        for node in ast.walk(_tree(path)):
            shown = []  # expressions whose value is what a cell or a line shows
            if isinstance(node, ast.IfExp):
                shown = [node.body, node.orelse]
            elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
                shown = node.values[-1:]
            elif isinstance(node, ast.Return) and node.value is not None:
                shown = [node.value]
            elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                shown = node.args[:1] if name in ("QTableWidgetItem", "setText", "setItem") else []
            offenders += [f"{path.relative_to(SRC)}:{node.lineno} {e.value!r}" for e in shown
                          if isinstance(e, ast.Constant) and e.value in markers]
    assert offenders == []


def test_the_formatter_finder_finds_formatters_by_what_they_return(tmp_path):
    """The finder itself: functions and lambdas returning one formatted number are found, whatever their
    names; a sentence with a figure in it and an integer with separators are not."""
    (tmp_path / "m.py").write_text(
        "def a(x):\n    return f'{x:.5g}'\n"
        "def b(x):\n    return format(x, '.3f')\n"
        "c = lambda x: '%.2f' % x\n"
        "def d(x):\n    return f'{x:.1f}%' if x else 'none'\n"
        "def e(x):\n    return '{:.1%}'.format(x)\n"
        "def ok1(n):\n    return f'{n:,}'\n"
        "def ok2(n, what):\n    return f'read {n:.3g} bytes of {what}'\n")
    assert sorted(f.split()[-1] for f in number_formatters(tmp_path)) == ["a", "b", "d", "e", "lambda"]


# Functions that step a job's generator themselves, and why `jobs.drain` does not do for them.
STEPPERS = {
    "core/jobs.py:drain": "runs a job to its end from outside a generator (commands, plain-function forms)",
    "core/jobs.py:relay": "a job's values transformed as they pass, sends and throws handed on",
    "core/read/bytes/files.py:run": "as `yield from`, with the read-ahead active around each step",
    "core/figures/analysis.py:_lead": "a job whose progress other callers waiting on the same figure follow",
    "core/series/timeline.py:_iter_series": "one tensor's failure becomes its error; the run goes on",
    "core/series/executor.py:_finish": "a summary fed piece by piece from a box, not a job",
    "gui/base/workers.py:work": "`JobSlot`'s worker: Cancel checked and each value emitted to the window",
    "gui/compare/tab.py:_coalesced": "a comparison's progress coalesced for the window as it passes",
}


def test_a_job_is_run_to_its_end_by_drain():
    """`jobs.drain` runs a job's generator to its end and returns its value; a function that steps one
    itself (`next` or `send`, its value taken from `StopIteration`) is a relay or a driver with a reason in
    `STEPPERS`, and every entry there still steps one."""
    found = set()
    for path in SRC.rglob("*.py"):
        for func in ast.walk(_tree(path)):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            inner = [n for n in ast.walk(func) if n is not func and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            nested = {id(n) for f in inner for n in ast.walk(f)}
            if any(isinstance(h, ast.ExceptHandler) and h.type is not None and "StopIteration" in ast.unparse(h.type)
                   and id(h) not in nested for h in ast.walk(func)):
                found.add(f"{path.relative_to(SRC).as_posix()}:{func.name}")
    assert (sorted(found - set(STEPPERS)), sorted(set(STEPPERS) - found)) == ([], [])


def test_settings_are_read_from_the_environment_once_in_cli():
    """ckptview's own settings (CKPTVIEW_*: remote defaults, the single-instance name) are read by cli.py
    alone, once, and handed down (`RemoteOptions`, `args.server_name`); the core reads no environment
    variable but the platform's folder conventions (XDG_*), and passes the environment whole to the
    child processes it starts."""

    def environ(node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    offenders = []
    for path in SRC.rglob("*.py"):
        tree = _tree(path)
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        if path != _exempt("cli.py"):
            offenders += [f"{path.relative_to(SRC)}:{n.lineno} {n.value}" for n in ast.walk(tree)
                          if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
                          and n.value.startswith("CKPTVIEW_")]
        if SRC / "core" not in path.parents:
            continue
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args and (
                    (node.func.attr == "get" and environ(node.func.value)) or node.func.attr == "getenv"):
                key = node.args[0]
            elif isinstance(node, ast.Subscript) and environ(node.value):
                key = node.slice
            elif isinstance(node, ast.Compare) and any(environ(c) for c in node.comparators):
                key = node.left
            if key is not None and not (isinstance(key, ast.Constant) and str(key.value).startswith("XDG_")):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} {ast.unparse(node)[:60]}")
    assert offenders == []


def test_local_or_remote_is_decided_once_per_open():
    """`open_checkpoint` decides whether a path is a URL, once, and its `Source` carries the file system it
    reads through (`source.fs`); code outside an open that is given a path chooses once too
    (`bytes/fs.py`'s `filesystem`). No reader, pickle or value module asks again, and no function of the
    byte layer's local files does."""

    deciders = {_exempt("core/read/open.py"), _exempt("core/read/bytes/fs.py"),
                _exempt("core/read/bytes/location.py", "locate")}
    remote = SRC / "core" / "read" / "bytes" / "remote"
    offenders = []
    for path in (SRC / "core" / "read").rglob("*.py"):
        if path in deciders or remote in path.parents:
            continue
        tree = _tree(path)
        defined = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "is_url"]  # files.py's own
        for node in ast.walk(tree):
            if any(node in ast.walk(d) for d in defined):
                continue
            name = node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else \
                getattr(getattr(node, "func", None), "id", None)
            if isinstance(node, ast.Call) and name == "is_url":
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} is_url(...)")
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and node.left.value == "://":
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} '://' in ...")
    assert offenders == []


# Modules outside the byte layer that may call `is_url` themselves, each with its reason (none: they ask
# `locate(path).is_remote`, the `Location` that also keeps a URL's token to itself).
IS_URL_CALLERS: dict[str, str] = {}


def test_is_url_is_called_only_in_the_byte_layer():
    """Whether a path is a URL is the byte layer's question (`files.is_url`, under core/read/bytes/); code
    elsewhere asks the path's `Location` (`locate(path).is_remote`), or is in `IS_URL_CALLERS` with why."""
    layer = SRC / "core" / "read" / "bytes"
    allowed = {_exempt(relative) for relative in IS_URL_CALLERS}
    offenders = []
    for path in SRC.rglob("*.py"):
        if layer in path.parents or path in allowed:
            continue
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name == "is_url":
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} is_url(...)")
    assert offenders == []


def test_a_run_result_is_worded_in_one_place():
    """`core/run/result.py`'s `result_lines` is the one rendering of a `RunResult` (the CLI prints it, the
    run panel shows it above its table): no other module words a result's load, latency or memory."""

    fields = {"load_seconds", "latency_ms", "peak_memory_bytes", "peak_memory_kind"}
    offenders = []
    for path in SRC.rglob("*.py"):
        if path == _exempt("core/run/result.py", "result_lines") or SRC / "core" / "worker" in path.parents:
            continue
        offenders += [f"{path.relative_to(SRC)}:{n.lineno} .{n.attr}" for n in ast.walk(_tree(path))
                      if isinstance(n, ast.Attribute) and n.attr in fields]
    assert offenders == []


def test_lazy_package_apis_give_what_their_type_imports_name():
    """A package whose API is imported on first use (`lazy_loader.attach`) gives, for every name of its
    `__all__`, the very object its TYPE_CHECKING import names (what mypy checks is what runs), and lists
    nothing it does not give."""
    import importlib

    wrong = []
    for init in (SRC / "core").rglob("__init__.py"):
        tree = _tree(init)
        lazy = [b for b in tree.body if isinstance(b, ast.If) and "TYPE_CHECKING" in ast.unparse(b.test)]
        if not lazy or "lazy_loader.attach" not in _text(init):
            continue
        package = importlib.import_module(_module_name(init))
        for node in lazy[0].body:
            if isinstance(node, ast.ImportFrom) and node.module:
                source = importlib.import_module(node.module)
                wrong += [f"{package.__name__}.{a.name}" for a in node.names
                          if getattr(package, a.name, None) is not getattr(source, a.name)]
        wrong += [f"{package.__name__}.{name} (not given)" for name in package.__all__ if not hasattr(package, name)]
    assert wrong == []


def test_a_command_imports_only_the_features_it_uses():
    """`ckptview info` on a local file loads the readers and what it shows, never a forward pass's machinery,
    a series, a comparison, an export or a graph (a package's API is imported on first use, so one module of
    `core.run` does not bring the others): the command's start-up is what it needs."""
    import json
    import subprocess
    import sys

    probe = ("import json, sys\nfrom ckptview.cli import main\nassert main(['info', sys.argv[1], '--json']) == 0\n"
             "sys.stderr.write(json.dumps(sorted(m for m in sys.modules if m.startswith(('ckptview', 'torch')))))")
    example = SRC / "resources" / "example.pth"
    out = subprocess.run([sys.executable, "-c", probe, str(example)], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stderr.strip().splitlines()[-1])
    assert "ckptview.core.read.open" in loaded  # the probe saw the command run
    unwanted = ("ckptview.core.run.request", "ckptview.core.run.architectures", "ckptview.core.run.result",
                "ckptview.core.series.", "ckptview.core.compare.", "ckptview.core.export.", "ckptview.core.graph.",
                "ckptview.gui", "torch")
    assert [m for m in loaded if m.startswith(unwanted)] == []


def test_no_loop_over_what_a_file_declares_runs_outside_the_budget():
    """Readers and parsers (core/read, core/graph, minus the byte layer and the drawing of built graphs, each
    exempt with its reason in tests/support/budget_rule.py) charge the one work budget: every `while` loop,
    every loop inside a loop and every function that calls itself charges it (`charge`, `enter`, `frame`,
    `affords`) or says on its line why it is bounded. docs/architecture.md states the rule."""
    from tests.support import budget_rule

    assert [e for e in budget_rule.EXEMPT if not (SRC / e).exists()] == []  # no exemption outlives its module
    assert [str(f) for f in budget_rule.findings(SRC)] == []


def test_the_budget_rule_finds_uncharged_loops_and_recursion(tmp_path):
    """The rule itself: an uncharged while, loop in a loop and recursion are found; charged or reasoned ones
    are not."""
    from tests.support import budget_rule

    folder = tmp_path / "core" / "read"
    folder.mkdir(parents=True)
    (folder / "bad.py").write_text(
        "def scan(data):\n    pos = 0\n    while pos < len(data):\n        pos += 1\n"
        "def pairs(a):\n    for x in a:\n        for y in a:\n            print(x, y)\n"
        "def walk(node):\n    return [walk(c) for c in node]\n")
    (folder / "good.py").write_text(
        "def scan(data, budget):\n    pos = 0\n    while pos < len(data):\n        budget.charge(1)\n        pos += 1\n"
        "def pairs(a):\n    for x in a:  # bounded: a is three items\n        for y in a:\n            print(x, y)\n"
        "class W:\n    def walk(self, node, budget):\n        budget.enter('a node')\n"
        "        return [self.walk(c, budget) for c in node]\n")
    found = sorted((f.path, f.line) for f in budget_rule.findings(tmp_path))
    assert found == [("core/read/bad.py", 3), ("core/read/bad.py", 7), ("core/read/bad.py", 9)], found


# Strings of the core that name a flag and are no message: each with why it may.
_FLAG_STRINGS_ALLOWED = {
    ("core/run/result.py", "--model"): "architecture.source of user-given model code, a value of the --json "
                                       "contract since it was added; result_lines words it",
}
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
_COMMAND = re.compile(r"\bckptview (?:info|diff|export|run|devices|series|graph)\b")


def _message_strings(tree: ast.Module):
    """(line, text) of every string constant and f-string literal part of a module that is no docstring (a
    string standing as a statement documents the code before or around it)."""
    docs = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def test_no_core_message_names_a_flag_or_a_command():
    """The core words for no front end (issue 47): a fix is a `core.message.Hint`, worded as a flag by
    `commands/wording.py` and as a button or field by `gui/base/wording.py`; no core string says `--trust`
    or `ckptview series DIR`."""
    core = SRC / "core"
    offenders, allowed = [], set()
    for path in sorted(core.rglob("*.py")):
        where = str(path.relative_to(SRC))
        for line, text in _message_strings(_tree(path)):
            if _FLAG.search(text) or _COMMAND.search(text):
                if (where, text) in _FLAG_STRINGS_ALLOWED:
                    allowed.add((where, text))
                else:
                    offenders.append(f"{where}:{line} {text[:100]!r}")
    assert offenders == []
    assert allowed == set(_FLAG_STRINGS_ALLOWED), "an allowed string is gone: drop it from the list"

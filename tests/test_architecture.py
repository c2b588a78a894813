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


def test_core_never_imports_qt():
    pattern = re.compile(r"^\s*(from|import)\s+(PySide6|PyQt\d|pyqtgraph|shiboken6)", re.M)
    offenders = [str(p) for p in (SRC / "core").rglob("*.py") if pattern.search(_text(p))]
    assert offenders == []


def test_no_executing_loads_outside_the_trusted_worker():
    pattern = re.compile(r"pickle\.loads?\(|weights_only=False")
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name == "entry.py" and path.parent.name == "worker":  # runs only after the user trusts the file, in its own process
            continue
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
    allowed = {SRC / "core" / "gc_policy.py"}
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
        if path == SRC / "core" / "read" / "files.py":
            continue
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
    allowed = SRC / "gui" / "base" / "workers.py"
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


def test_the_core_keeps_no_workspace_analysis_or_session_of_its_own():
    """The window or the command makes the workspace, each checkpoint's Analysis, the remote sessions and
    options and the caches, and hands them down (no `window_workspace()`, `shared_analysis()`,
    `shared_cache()` or registry of sessions by URL): two windows, or two tests, in one process share
    nothing they did not share on purpose. No function of the core rebinds a module's global either (a
    singleton made on first use), but the collector's switches of core/gc_policy.py, which are the process's."""

    owned = {"Workspace", "Analysis", "Session", "Holdings", "RemoteFS", "GraphCache", "SeriesCache", "LiveRun"}
    offenders = []
    for path in (SRC / "core").rglob("*.py"):
        if path != SRC / "core" / "gc_policy.py":
            offenders += [f"{path.relative_to(SRC)}:{n.lineno} global {', '.join(n.names)}"
                          for n in ast.walk(_tree(path)) if isinstance(n, ast.Global)]
        for node in _tree(path).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            calls = [n for n in ast.walk(value) if isinstance(n, ast.Call)] if value is not None else []
            made = {c.func.id if isinstance(c.func, ast.Name) else getattr(c.func, "attr", "") for c in calls}
            annotation = ast.unparse(node.annotation) if isinstance(node, ast.AnnAssign) else ""
            if made & owned or any(name in annotation for name in owned):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} {ast.unparse(node)[:60]}")
    assert offenders == []


def test_the_core_keeps_no_cache_or_registry_of_its_own_at_module_level():
    """A module-level dict, set or list named a cache or a registry is state a caller did not hand down: the
    parameter orders a library told (`hf_order`) once lived in `_cache` and `_registry`, shared by every
    window and test of a process. Caches are made by the caller (`ParamOrderCache`, `GraphCache`, ...);
    the one process-wide cache left on purpose is the remote block cache's bound (docs/architecture.md)."""
    import ast

    allowed = {"core/read/bytes/remote/cache.py:CACHE"}
    containers = {"dict", "set", "list", "OrderedDict", "defaultdict", "WeakValueDictionary", "WeakKeyDictionary"}
    offenders = []
    for path in (SRC / "core").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            made = (isinstance(value, (ast.Dict, ast.Set, ast.List))
                    or isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", ""))
                    in containers | {"BlockCache"})
            for name in names:
                where = f"{path.relative_to(SRC).as_posix()}:{name}"
                if made and ("cache" in name.lower() or "registry" in name.lower()) and where not in allowed:
                    offenders.append(where)
    assert offenders == []


def test_the_architecture_page_names_every_package():
    """docs/architecture.md maps the code: every package of src has its row there."""
    page = (SRC.parents[1] / "docs" / "architecture.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in page.splitlines() if line.startswith("| `ckptview")}
    packages = {_module_name(p) for p in SRC.rglob("__init__.py")}
    assert sorted(packages - rows) == []


def test_figures_are_formatted_in_one_module():
    """Every figure a person reads is formatted by core/units.py (`figure`, `number`, `percent`,
    `human_bytes`, ...), and a figure there is none of shows its one marker, `units.MISSING`: no module
    keeps a private number formatter of its own, or writes a missing figure as a dash of its own."""

    from ckptview.core.units import MISSING

    markers = {"-", "—", "–", "n/a", "N/A", MISSING}
    formatters = {"_fmt", "_num", "_g", "_pct", "_bytes", "_human", "_gib", "_format_number"}
    offenders = []
    for path in SRC.rglob("*.py"):
        if path == SRC / "core" / "units.py":
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef) and node.name in formatters:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} def {node.name}")
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
        if path != SRC / "cli.py":
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

    deciders = {SRC / "core" / "read" / "open.py", SRC / "core" / "read" / "bytes" / "fs.py"}
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


def test_a_run_result_is_worded_in_one_place():
    """`core/run/result.py`'s `result_lines` is the one rendering of a `RunResult` (the CLI prints it, the
    run panel shows it above its table): no other module words a result's load, latency or memory."""

    fields = {"load_seconds", "latency_ms", "peak_memory_bytes", "peak_memory_kind"}
    offenders = []
    for path in SRC.rglob("*.py"):
        if path == SRC / "core" / "run" / "result.py" or SRC / "core" / "worker" in path.parents:
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

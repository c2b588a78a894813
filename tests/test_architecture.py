"""Layering promises: the core never imports Qt; nothing in src loads a pickle that can execute."""

from __future__ import annotations

import inspect
import io
import re
import tokenize

from tests.support.paths import SRC


def test_core_never_imports_qt():
    pattern = re.compile(r"^\s*(from|import)\s+(PySide6|PyQt\d|pyqtgraph|shiboken6)", re.M)
    offenders = [str(p) for p in (SRC / "core").rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_no_executing_loads_outside_the_trusted_worker():
    pattern = re.compile(r"pickle\.loads?\(|weights_only=False")
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name == "entry.py" and path.parent.name == "worker":  # runs only after the user trusts the file, in its own process
            continue
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        code = " ".join(t.string for t in tokens if t.type not in (tokenize.STRING, tokenize.COMMENT))
        offenders += [f"{path.name}: {m.group(0)}" for m in pattern.finditer(code.replace(" ", ""))]
    assert offenders == []


def test_the_window_package_holds_only_qt_code():
    """Logic without Qt belongs to the core, where the command line can use it too."""
    qt = re.compile(r"^\s*(from|import)\s+(PySide6|pyqtgraph|shiboken6)", re.M)
    offenders = [str(p.relative_to(SRC)) for p in (SRC / "gui").rglob("*.py") if p.name != "__init__.py" and not qt.search(p.read_text())]
    assert offenders == []


def test_one_module_changes_the_collector():
    """The process's collector state (freeze, disable, collect) is changed by core/gc_policy.py only; the
    window's collector (gui/base/gc_guard.py) and everything else go through its API."""
    pattern = re.compile(r"^\s*(import gc\b|from gc import)", re.M)
    allowed = {SRC / "core" / "gc_policy.py"}
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p not in allowed and pattern.search(p.read_text())]
    assert offenders == []


def test_tabs_reach_their_window_only_through_its_typed_interface():
    """A checkpoint tab asks its window through `TabHost` (gui/checkpoint/host.py), whose members mypy checks
    against MainWindow; a getattr on the window would be a member nobody declared."""
    pattern = re.compile(r"\b(getattr|hasattr)\(\s*(self\.)?_?(window_?|host)\s*,")
    offenders = []
    for path in (SRC / "gui").rglob("*.py"):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
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
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        code = " ".join(t.string for t in tokens if t.type not in (tokenize.STRING, tokenize.COMMENT))
        offenders += [f"{path.relative_to(SRC)}: {m.group(0)}" for m in pattern.finditer(code.replace(" ", ""))]
    assert offenders == []


def test_readers_are_registered_with_their_declared_priority():
    """The registry lists every reader module, highest declared priority first (no getattr defaults)."""
    from ckptview.core.read.formats import readers

    found = readers()
    modules = {p.stem for p in (SRC / "core" / "read" / "formats").glob("*.py")} - {"__init__", "safetensors_header"}
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
    import ast

    allowed = {
        ("torch_zip.py", "ZipArchive.__init__"),  # `fmap or FileMap(path)`: for callers outside the readers
        ("training_folder.py", "_json_node"),  # a JSON side file: no identity is taken for it
    }
    offenders = []
    for path in (SRC / "core" / "read" / "formats").glob("*.py"):
        for top in ast.parse(path.read_text()).body:
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
    import ast

    offenders = []
    for path in (SRC / "core").rglob("*.py"):
        if path == SRC / "core" / "read" / "files.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open"):
                continue
            mode = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "mode"), ast.Constant("r"))
            writes = isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wxa")
            if not writes:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == []

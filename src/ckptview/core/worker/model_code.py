"""The user's model code in the run worker: import `package.module:factory` or `path/file.py:Class`.

Only the worker process imports this module's targets; the classes a file defines are listed without
importing it by `core.model_classes`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

from ckptview.core.run.protocol import WorkerError


class _FolderFinder(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: finds top-level modules in one folder, only `names` (None: any), only when
    nothing installed has them."""

    def __init__(self, folder: str, names: set[str] | None) -> None:
        self.folder = folder
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if path is not None or (self.names is not None and fullname not in self.names):
            return None  # submodules are found through their package's own __path__
        return importlib.machinery.PathFinder.find_spec(fullname, [self.folder])


@contextlib.contextmanager
def _fallback_folder(folder: str, names: set[str] | None) -> Iterator[None]:
    finder = _FolderFinder(folder, names)
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def allow_caller_imports(req: dict[str, Any]) -> None:
    """Let the caller's folder answer only the top-level modules the user named, after the installed ones.

    Those are the module of a `package.module:factory` spec and, for a trusted full pickle (main or
    second file), the modules of the classes it names. The folder is never put on sys.path.
    """
    folder = req.get("cwd")
    if not folder or not os.path.isdir(folder):
        return
    names: set[str] = set()
    spec = req.get("model") or ""
    target = spec.rpartition(":")[0]
    if target and not target.endswith(".py"):
        names.add(target.split(".")[0])
    consent = req.get("consent") or {}
    for role in ("main", "compare"):
        for finding in (consent.get(role) or []) if isinstance(consent, dict) else []:
            if isinstance(finding, str) and not finding.startswith("unreadable pickle "):
                names.add(finding.split(".")[0])
    names -= set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
    if names:
        sys.meta_path.append(_FolderFinder(folder, names))


def build_user_model(spec: str, kwargs: dict[str, Any], caller_dir: str | None = None) -> Any:
    """Import `package.module:factory` or `path/file.py:Name` and call it with `kwargs`.

    While the user's module is imported, its folder (the file's, or for a module spec the caller's
    folder when the module is found there) answers the imports nothing installed answers.
    """
    return call_user_model(spec, import_user_object(spec, caller_dir), kwargs)


def call_user_model(spec: str, factory: Any, kwargs: dict[str, Any]) -> Any:
    """`factory(**kwargs)`, checked to be an nn.Module, in eval mode."""
    import torch

    model = factory(**kwargs)
    if not isinstance(model, torch.nn.Module):
        raise WorkerError(f"model spec '{spec}' returned a {type(model).__name__}, not an nn.Module",
                          kind="input")
    return model.eval()


def import_user_object(spec: str, caller_dir: str | None = None) -> Any:
    """The object a `package.module:factory` or `path/file.py:Name` spec names (its module imported)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise WorkerError(f"model spec '{spec}' must be package.module:factory or path/to/file.py:ClassName",
                          kind="input")
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise WorkerError(f"model file not found: {target}", kind="input")
        name = "ckptview_user_model_" + os.path.splitext(os.path.basename(target))[0]
        module_spec = importlib.util.spec_from_file_location(name, target)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        # While the file runs, its own folder answers the imports nothing installed answers (its sibling
        # modules); a json.py or torch.py beside it never shadows the real one, and the folder is gone after.
        with _fallback_folder(os.path.dirname(os.path.abspath(target)), None):
            module_spec.loader.exec_module(module)
    else:
        found = importlib.util.find_spec(target.split(".")[0])
        origin = getattr(found, "origin", None) or ""
        here = caller_dir and os.path.abspath(origin).startswith(os.path.join(os.path.abspath(caller_dir), ""))
        with _fallback_folder(caller_dir, None) if here and caller_dir else contextlib.nullcontext():
            module = importlib.import_module(target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise WorkerError(f"model spec '{spec}': {target} has no '{attr}'", kind="input")
        obj = getattr(obj, part)
    return obj

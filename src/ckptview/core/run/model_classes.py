"""The classes a model file defines, read with `ast` and never imported (the Run panel's Browse button)."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from ckptview.core.errors import CheckpointError
from ckptview.core.read.bytes.files import open_regular

MAX_SOURCE_BYTES = 16 << 20  # a model file larger than this is not parsed


class ModelCodeError(ValueError):
    """The file cannot be read or parsed as Python; the message says why, in one line."""


@dataclass(frozen=True)
class ModelClass:
    """A top-level class of a model file: its name, line, and whether it derives from an nn.Module."""

    name: str
    line: int
    is_module: bool


def classes_in_file(path: str) -> list[ModelClass]:
    """Top-level classes of a Python file in source order; nothing in the file runs."""
    try:
        size = os.path.getsize(path)
        if size > MAX_SOURCE_BYTES:
            raise ModelCodeError(f"{os.path.basename(path)} is {size} bytes: too large for model code")
        with open_regular(path) as fh:  # a FIFO is refused, never waited on
            source = fh.read(MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        raise ModelCodeError(f"cannot read {path}: {exc.strerror or exc}") from None
    except CheckpointError as exc:
        raise ModelCodeError(f"cannot read {path}: {exc}") from None
    try:
        tree = ast.parse(source, filename=os.path.basename(path))
    except SyntaxError as exc:
        raise ModelCodeError(f"{os.path.basename(path)} is not valid Python: {exc.msg} (line {exc.lineno})") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ModelCodeError(f"{os.path.basename(path)} cannot be parsed: {type(exc).__name__}") from None
    defs = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    modules: set[str] = set()
    changed = True
    while changed:  # a class is a module when a base is nn.Module or a module class of the same file
        changed = False
        for node in defs:
            if node.name not in modules and any(_is_module_base(b, modules) for b in node.bases):
                modules.add(node.name)
                changed = True
    return [ModelClass(node.name, node.lineno, node.name in modules) for node in defs]


def _is_module_base(base: ast.expr, local_modules: set[str]) -> bool:
    """`nn.Module`, `torch.nn.Module`, `Module`, `pl.LightningModule`, ... or a local module class."""
    name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
    return name.endswith("Module") or name in local_modules

"""Shared by every pickle-based format: run the safe VM with torch's emulations, then build the tree."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Node, OpenFiles
from ckptview.core.read.pickle.fast import fast_unpickle
from ckptview.core.read.pickle.to_tree import MAX_DEPTH, DepthLimit, build_tree
from ckptview.core.read.pickle.torch_globals import EMULATORS, is_safe_global, resolve_constant
from ckptview.core.read.pickle.vm import unpickle

# Tests switch it off to compare both paths on the same files.
FAST_PATH = True


def load_torch_pickle(
    data: bytes | memoryview,
    persistent_load: Callable[[Any], Any] | None,
    *,
    what: str = "data.pkl",
    pos: int = 0,
    budget: Budget | None = None,
) -> tuple[Any, list[str], int]:
    """Unpickle torch-written data safely: (inert object, globals referenced, end position); charged to
    `budget` (one of the pickle's own bytes when none is given).

    The restricted C unpickler (`fast_pickle`) reads it when it can vouch for the pickle; otherwise,
    or when `FAST_PATH` is off, the reference VM does (its errors are the ones reported).
    """
    if FAST_PATH:
        fast = fast_unpickle(data, emulators=EMULATORS, persistent_load=persistent_load,
                             resolve_global=resolve_constant, pos=pos, budget=budget)
        if fast is not None:
            return fast
    return unpickle(data, emulators=EMULATORS, persistent_load=persistent_load,
                    resolve_global=resolve_constant, what=what, pos=pos, budget=budget)


def unsafe_of(globals_seen: list[str], *, torchscript: bool = False) -> list[str]:
    """The referenced globals outside the known-safe set, in order of first reference."""
    return [g for g in globals_seen if not is_safe_global(g, torchscript=torchscript)]


def make_checkpoint(path: str, fmt: str, file_size: int, obj: Any, globals_seen: list[str], budget: Budget,
                    files: Iterable[Any] = (), **metadata: Any) -> Checkpoint:
    """A Checkpoint over the tree of `obj` (its nodes charged to `budget`), owning the `files` the reader
    opened, with safety findings and broken-entry warnings."""
    cut: list[DepthLimit] = []
    root: Node = build_tree(obj, budget, cut=cut)
    ckpt = Checkpoint(path=path, format=fmt, file_size=file_size, root=root, files=OpenFiles(list(files)),
                      globals=list(globals_seen), unsafe_globals=unsafe_of(globals_seen, torchscript=fmt == "torchscript"),
                      metadata=dict(metadata))
    if ckpt.unsafe_globals:
        ckpt.warnings.append(
            "file references globals outside the safe set (nothing was run): " + ", ".join(ckpt.unsafe_globals))
    if cut:
        ckpt.warnings.append(f"containers nested deeper than {MAX_DEPTH} levels are cut from the tree")
    for entry in ckpt.tensors():  # the tree's tensors, charged as it was built
        if entry.info.broken:
            ckpt.warnings.append(f"tensor '{entry.name}' is broken: {entry.info.broken}")
    return ckpt

"""Size facts of a checkpoint for its summary: parameters and bytes by dtype, tied weights counted once."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from ckptview.core import dtypes
from ckptview.core.checkpoint import Checkpoint, TensorEntry, TensorInfo
from ckptview.core.inspect.roles import tensor_role


class SizeFacts(NamedTuple):
    """The size facts the summary header shows."""
    parameters: int  # elements of the distinct parameters outside optimizer state (as torch counts them)
    bytes_by_dtype: list[tuple[str, int]]  # (dtype, logical bytes) over the distinct tensors, largest first
    buffers: int = 0  # elements of the distinct buffers and integer counters outside optimizer state


def _distinct(checkpoint: Checkpoint) -> list[TensorEntry]:
    # Tied weights (`lm_head.weight is embed.weight`) are one tensor saved under two names: count once.
    # Most storages back one view, so only a second view of a storage costs a key: a set of a million
    # (storage, offset, shape, stride) tuples took a third of a second to free, in one go, holding the GIL.
    first: dict[int, TensorInfo] = {}  # id(storage) -> its first view, or id(info) of a tensor without one
    views: set[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = set()
    out = []
    for entry in checkpoint.tensors():
        info = entry.info
        key = id(info.storage) if info.storage is not None else id(info)
        seen = first.get(key)
        if seen is None:
            first[key] = info
        elif seen is info or info.storage is None:
            continue
        else:
            view = (info.offset, info.shape, info.stride)
            if view == (seen.offset, seen.shape, seen.stride) or (key, *view) in views:
                continue
            views.add((key, *view))
        out.append(entry)
    return out


def size_facts(checkpoint: Checkpoint) -> SizeFacts:
    """The facts in one pass over the distinct tensors (O(tensors): computed off the GUI thread).

    Parameters are counted as ``sum(p.numel() for p in model.parameters())`` counts them, buffers apart,
    by the rules of `roles` (what a pickled module says, integer dtypes, known buffer names).
    """
    total = buffers = 0
    sizes: Counter[str] = Counter()
    itemsizes: dict[str, int] = {}
    heads: dict[object, bool] = {}  # top-level key -> names optimizer state ("optimizer", "optim_state", ...)
    numels: dict[int, tuple[tuple[int, ...], int]] = {}  # id(shape) -> (shape kept alive, its element count)
    for entry in _distinct(checkpoint):
        info = entry.info
        shape, dtype = info.shape, info.dtype
        known = numels.get(id(shape))
        if known is None or known[0] is not shape:
            known = numels[id(shape)] = (shape, info.numel)
        size = itemsizes.get(dtype)
        if size is None:
            size = itemsizes[dtype] = dtypes.itemsize(dtype)
        sizes[dtype] += known[1] * size  # TensorInfo.nbytes
        path = entry.path
        if path:
            optimizer = heads.get(path[0])
            if optimizer is None:
                optimizer = heads[path[0]] = "optim" in str(path[0]).lower()
            if optimizer:
                continue
        if tensor_role(info, path) == "parameter":
            total += known[1]
        else:
            buffers += known[1]
    return SizeFacts(total, sizes.most_common(), buffers)

"""Size facts of a checkpoint for its summary: parameters and bytes by dtype, tied weights counted once."""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

from ckptview.core import dtypes
from ckptview.core.model import Checkpoint, TensorEntry


class SizeFacts(NamedTuple):
    """The size facts the summary header shows."""
    parameters: int  # elements of the distinct tensors outside optimizer state
    bytes_by_dtype: list[tuple[str, int]]  # (dtype, logical bytes) over the distinct tensors, largest first


def _distinct(checkpoint: Checkpoint) -> list[TensorEntry]:
    """The tensors with tied weights counted once (`lm_head.weight is embed.weight`: one tensor saved
    under two names): a view is (storage, offset, shape, stride); a tensor without storage is its own."""
    # id(storage) -> the first view's (offset, shape, stride), or the set of them once a second one shows:
    # most storages have one view, and their shapes and strides are never hashed.
    seen: dict[int, Any] = {}
    out = []
    for entry in checkpoint.tensors():
        info = entry.info
        storage = info.storage
        if storage is None:
            out.append(entry)
            continue
        view = (info.offset, info.shape, info.stride)
        known = seen.get(id(storage))
        if known is None:
            seen[id(storage)] = view
        elif type(known) is set:
            if view in known:
                continue
            known.add(view)
        elif known == view:
            continue
        else:
            seen[id(storage)] = {known, view}
        out.append(entry)
    return out


def _in_optimizer(key: object, cache: dict[object, bool]) -> bool:
    """Whether a top-level key names optimizer state ("optimizer", "optim_state", ...)."""
    found = cache.get(key)
    if found is None:
        found = cache[key] = "optim" in str(key).lower()
    return found


def parameter_count(checkpoint: Checkpoint) -> int:
    """Elements of the distinct tensors outside optimizer state (the moments would count the model twice)."""
    return size_facts(checkpoint).parameters


def bytes_by_dtype(checkpoint: Checkpoint) -> list[tuple[str, int]]:
    """(dtype, logical bytes) over the distinct tensors, largest first."""
    return size_facts(checkpoint).bytes_by_dtype


def size_facts(checkpoint: Checkpoint) -> SizeFacts:
    """Both facts in one pass over the distinct tensors (O(tensors): computed off the GUI thread)."""
    total = 0
    sizes: Counter[str] = Counter()
    heads: dict[object, bool] = {}
    numels: dict[int, tuple[tuple[int, ...], int]] = {}  # id(shape) -> (shape kept alive, its element count)
    for entry in _distinct(checkpoint):
        info = entry.info
        known = numels.get(id(info.shape))
        if known is None or known[0] is not info.shape:
            known = numels[id(info.shape)] = (info.shape, info.numel)
        sizes[info.dtype] += known[1] * dtypes.itemsize(info.dtype)  # TensorInfo.nbytes
        if not (entry.path and _in_optimizer(entry.path[0], heads)):
            total += known[1]
    return SizeFacts(total, sizes.most_common())

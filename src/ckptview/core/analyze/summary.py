"""Size facts of a checkpoint for its summary: parameters and bytes by dtype, tied weights counted once."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from ckptview.core.model import Checkpoint, TensorEntry


class SizeFacts(NamedTuple):
    """The size facts the summary header shows."""
    parameters: int  # elements of the distinct tensors outside optimizer state
    bytes_by_dtype: list[tuple[str, int]]  # (dtype, logical bytes) over the distinct tensors, largest first


def _distinct(checkpoint: Checkpoint) -> list[TensorEntry]:
    # Tied weights (`lm_head.weight is embed.weight`) are one tensor saved under two names: count once.
    seen: set[object] = set()  # (storage, offset, shape, stride), or id() of a tensor without storage
    out = []
    for entry in checkpoint.tensors():
        info = entry.info
        key = (id(info.storage), info.offset, info.shape, info.stride) if info.storage is not None else id(info)
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out


def parameter_count(checkpoint: Checkpoint) -> int:
    """Elements of the distinct tensors outside optimizer state (the moments would count the model twice)."""
    total = 0
    for entry in _distinct(checkpoint):
        head = str(entry.path[0]).lower() if entry.path else ""
        if "optim" not in head:
            total += entry.info.numel
    return total


def bytes_by_dtype(checkpoint: Checkpoint) -> list[tuple[str, int]]:
    """(dtype, logical bytes) over the distinct tensors, largest first."""
    sizes: Counter[str] = Counter()
    for entry in _distinct(checkpoint):
        sizes[entry.info.dtype] += entry.info.nbytes
    return sizes.most_common()


def size_facts(checkpoint: Checkpoint) -> SizeFacts:
    """Both facts in one pass over the distinct tensors (O(tensors): computed off the GUI thread)."""
    return SizeFacts(parameter_count(checkpoint), bytes_by_dtype(checkpoint))

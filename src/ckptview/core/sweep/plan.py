"""Whole-checkpoint work cut into tasks sized by the bytes they read (Qt-free).

A task reads whole tensors, in the checkpoint's order, until it holds its share of the bytes; a tensor
larger than a share, stored plainly in one file, is cut into blocks of whole chunks (`Piece.start`,
`Piece.stop`), each read by a task of its own. A block's chunks are the very chunks one pass over the
whole tensor reads (the same element boundaries), so its partial figures merge into the figures of one
pass (`figures.stats.merge_partials`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.read.values.repeats import repeats
from ckptview.core.sweep.source import stored_plainly

MIN_TASK_BYTES = 16 << 20  # a task reads at least this much (each opens the checkpoint for itself)
TASKS_PER_SLOT = 4  # tasks per worker thread: a slow worker, or a large tensor, leaves the others work


@dataclass(frozen=True)
class Piece:
    """What a task reads of one tensor: all of it, or the elements [start, stop) of its C-order values."""

    index: int  # in the checkpoint's `tensors()` order
    name: str
    start: int = 0
    stop: int | None = None  # None: the whole tensor

    @property
    def whole(self) -> bool:
        return self.stop is None


@dataclass(frozen=True)
class Work:
    """One tensor to read: its place, the bytes it reads, and whether it may be cut into blocks."""

    index: int
    name: str
    nbytes: int
    numel: int = 0  # elements, when it may be cut (else 0)


def task_bytes(total: int, slots: int) -> int:
    """The bytes one task reads: a share of `total` giving each of `slots` workers several tasks."""
    return max(MIN_TASK_BYTES, math.ceil(total / max(1, slots * TASKS_PER_SLOT)))


def blockable(info: TensorInfo) -> bool:
    """Whether `info` may be read in blocks: C-contiguous values stored plainly in one file, each read once."""
    return repeats(info) is None and stored_plainly(info)


def cut(work: Sequence[Work], share: int, chunk_elems: int) -> list[tuple[Piece, ...]]:
    """`work` as tasks of at most about `share` bytes each: tensors grouped in order (a group closed before
    it would pass the share), those larger than a share cut into blocks of whole `chunk_elems` chunks when
    they may be (else a task of their own)."""
    tasks: list[tuple[Piece, ...]] = []
    group: list[Piece] = []
    held = 0
    for item in work:
        if item.numel and item.nbytes > share and item.numel > chunk_elems:
            chunks = math.ceil(item.numel / chunk_elems)
            blocks = min(chunks, math.ceil(item.nbytes / share))
            bounds = [round(k * chunks / blocks) * chunk_elems for k in range(blocks + 1)]
            for start, stop in zip(bounds, bounds[1:], strict=False):
                tasks.append((Piece(item.index, item.name, start, min(stop, item.numel)),))
            continue
        if group and held + item.nbytes > share:
            tasks.append(tuple(group))
            group, held = [], 0
        group.append(Piece(item.index, item.name))
        held += item.nbytes
        if held >= share:
            tasks.append(tuple(group))
            group, held = [], 0
    if group:
        tasks.append(tuple(group))
    return tasks

"""What a module's figures are over: its floating-point parameters and buffers, the counters apart (Qt-free).

A module (a container of the file, or a group of dotted keys: ``layer1.0.bn1``) is summarised as torch would
summarise its floating-point tensors: ``torch.cat([t.flatten() for t in floats])``. Its counters (integer
tensors such as ``num_batches_tracked``, one-element step counters such as Adam's ``step``: see
`roles.is_count`) are summarised apart, on their own line: a step counter at 1,000 is no weight's value.
The window's statistics panel and ``info --json --stats`` (``"modules"``) use this one split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ckptview.core.checkpoint import Node, TensorInfo
from ckptview.core.figures.stats import TensorStats, merge_stats
from ckptview.core.inspect.grouping import Row
from ckptview.core.inspect.roles import is_count


def split(nodes: Iterable[Node]) -> tuple[list[TensorInfo], list[tuple[str, TensorInfo]]]:
    """(tensors the figures are over, (name, tensor) of the counters) of the tensor nodes among `nodes`."""
    figures: list[TensorInfo] = []
    counters: list[tuple[str, TensorInfo]] = []
    for node in nodes:
        if node.kind != "tensor" or node.tensor is None:
            continue
        path = node.path
        if is_count(node.tensor, path):
            counters.append((node.name, node.tensor))
        else:
            figures.append(node.tensor)
    return figures, counters


@dataclass
class ModuleFigures:
    """One module's figures: over its floating-point tensors, and over its counters apart."""

    path: str
    tensors: int  # floating-point tensors the figures are over
    stats: TensorStats | None  # None when none of them is readable
    counters: int
    counter_stats: TensorStats | None


_Sums = tuple[int, TensorStats | None, int, TensorStats | None]  # figures' count and merge, counters' same
_NONE: _Sums = (0, None, 0, None)


def _merged(parts: list[TensorStats | None]) -> TensorStats | None:
    found = [p for p in parts if p is not None]
    if not found:
        return None
    return found[0] if len(found) == 1 else merge_stats(found)


def module_figures(top: Row, stats_of: Callable[[TensorInfo], TensorStats | None],
                   keep: Callable[[TensorInfo], bool] | None = None) -> Iterator[ModuleFigures]:
    """Every module of the display tree (containers and dotted-key groups holding tensors, not the file's
    root) in display order, with the figures of its tensors split as `split` does (only those `keep` keeps).

    Each module is merged from its children's merges, bottom-up (a row at a time: 100,000 tensors in modules
    nested five deep are merged 100,000 times, not 500,000); the merge is exact up to rounding, as
    `merge_stats` of all the tensors would be.
    """
    order = list(top.walk())  # display order; reversed, every row comes after its children
    sums: dict[int, _Sums] = {}  # id(row) -> its sums, until its parent has taken them
    modules: dict[int, _Sums] = {}  # id(row) -> the sums of each module row, for its own line
    for row in reversed(order):
        node = row.node
        if node is not None and node.kind == "tensor":
            info = node.tensor
            if info is not None and info.part_of is not None:  # a quantized weight's part: the weight stands for it
                continue
            if info is None or (keep is not None and not keep(info)):
                sums[id(row)] = _NONE
            elif is_count(info, node.path):
                sums[id(row)] = (0, None, 1, stats_of(info))
            else:
                sums[id(row)] = (1, stats_of(info), 0, None)
            continue
        below = [sums.pop(id(child), _NONE) for child in row.children]
        figures, counters = sum(b[0] for b in below), sum(b[2] for b in below)
        mine = sums[id(row)] = (figures, _merged([b[1] for b in below]) if figures else None,
                                counters, _merged([b[3] for b in below]) if counters else None)
        if row is not top and (figures or counters):
            modules[id(row)] = mine
    for row in order:
        found = modules.get(id(row))
        if found is not None:
            yield ModuleFigures(row.name, found[0], found[1], found[2], found[3])

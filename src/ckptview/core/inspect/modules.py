"""What a module's figures are over: its floating-point parameters and buffers, the counters apart (Qt-free).

A module (a container of the file, or a group of dotted keys: ``layer1.0.bn1``) is summarised as torch would
summarise its floating-point tensors: ``torch.cat([t.flatten() for t in floats])``. Its counters (integer
tensors such as ``num_batches_tracked``, one-element step counters such as Adam's ``step``: see
`roles.is_count`) are summarised apart, on their own line: a step counter at 1,000 is no weight's value.
The window's statistics panel and ``info --json --stats`` (``"modules"``) use this one split.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ckptview.core.checkpoint import Node, TensorInfo
from ckptview.core.inspect.grouping import Row
from ckptview.core.inspect.roles import is_count


@dataclass
class ModuleParts:
    """The tensors below one module: those its figures are over, and its counters."""

    path: str
    figures: list[TensorInfo]
    counters: list[tuple[str, TensorInfo]]  # (contract name, tensor)


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


def module_parts(top: Row) -> Iterator[ModuleParts]:
    """Every module of the display tree (containers and dotted-key groups holding tensors, not the file's
    root), in display order, with its tensors split."""
    for row in top.walk():
        if row is top or row.tensors == 0 or (row.node is not None and row.node.kind == "tensor"):
            continue
        nodes = (r.node for r in row.walk() if r.node is not None and r.node.kind == "tensor")
        figures, counters = split(nodes)
        yield ModuleParts(row.name, figures, counters)

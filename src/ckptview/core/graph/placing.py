"""Which checkpoint keys a graph's nodes read: tied weights, wrapper prefixes, and the keys no node reads."""

from __future__ import annotations

from collections.abc import Iterable

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint
from ckptview.core.graph.model import GraphNode, ModelGraph


def aliases(checkpoint: Checkpoint, budget: Budget) -> dict[str, list[str]]:
    """{key: the other keys that are the same tensor}: one storage, one view (shape, stride, offset, dtype).

    Tied weights (an LM head over its embedding) are saved as two names over one storage; a view of a
    storage at another offset is another tensor, not an alias."""
    sharing = checkpoint.sharing()
    if not sharing:
        return {}
    by_name = {entry.name: entry.info for entry in checkpoint.tensors() if entry.name in sharing}
    out: dict[str, list[str]] = {}
    for name, others in sharing.items():
        budget.charge(len(others) + 1, "tensors sharing storage compared")
        info = by_name.get(name)
        if info is None:
            continue
        view = (info.dtype, info.shape, info.stride, info.offset)
        twins = [o for o in others if (t := by_name.get(o)) is not None and (t.dtype, t.shape, t.stride, t.offset) == view]
        if twins:
            out[name] = twins
    return out


def unread_keys(graph: ModelGraph, keys: Iterable[str]) -> list[str]:
    """The keys among `keys` that no node of `graph` reads, in the order given."""
    read = {key for node in graph.nodes for key in node.params}
    return [key for key in dict.fromkeys(keys) if key not in read]


def with_params(node: GraphNode, params: Iterable[str]) -> GraphNode:
    """`node` reading `params` instead of its own."""
    return GraphNode(node.id, node.op, node.module, node.inputs, tuple(params), node.shape, node.dtype)

"""Two checkpoints' graphs compared: nodes matched by place, added, removed or changed in shape, and each node's
relative change ||B - A|| / ||A|| over the weights it reads.

Nodes are matched by where they are, never by id (ids shift when a layer is inserted): the k-th node of one op
in one module of A is the k-th node of that op in that module of B. A matched node whose output shape or whose
weights' shapes differ is `shape`; one A has and B lacks is `removed`; one B has and A lacks is `added`. The
merged graph holds A's nodes, then B's added ones (their inputs named by A's ids where matched), so it is one
graph every front end draws. The change per node combines the comparison's sums of the keys it reads as the
window's overlay does (`overlay.combine`): a module's change is its tensors' taken together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.graph.model import GraphNode, ModelGraph
from ckptview.core.graph.overlay import CHANGE, KeyFigures, combine

SAME, SHAPE, REMOVED, ADDED = "same", "shape", "removed", "added"
ADDED_PREFIX = "B:"  # the id of a node only B has, in the merged graph


@dataclass
class GraphComparison:
    """The merged graph, each node's status and relative change (None: it reads nothing compared)."""

    graph: ModelGraph
    status: dict[str, str] = field(default_factory=dict)  # merged node id -> SAME | SHAPE | REMOVED | ADDED
    change: dict[str, float | None] = field(default_factory=dict)  # merged node id -> ||B - A|| / ||A||

    def counts(self) -> dict[str, int]:
        """How many nodes of each status."""
        out = {SAME: 0, SHAPE: 0, REMOVED: 0, ADDED: 0}
        for status in self.status.values():
            out[status] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        """The merged graph as `graph A --compare B --json` prints it: every node with its `change` and `status`."""
        data = self.graph.to_json()
        for node in data["nodes"]:
            node["change"] = self.change.get(node["id"])
            node["status"] = self.status.get(node["id"], SAME)
        data["compare"] = self.counts()
        return data


def _places(graph: ModelGraph, budget: Budget) -> dict[tuple[str, str, int], GraphNode]:
    seen: dict[tuple[str, str], int] = {}
    out: dict[tuple[str, str, int], GraphNode] = {}
    for node in graph.nodes:
        budget.charge(1, "nodes matched")
        k = seen.get((node.module, node.op), 0)
        seen[(node.module, node.op)] = k + 1
        out[(node.module, node.op, k)] = node
    return out


def compare_graphs(a: ModelGraph, b: ModelGraph, shapes_a: Mapping[str, tuple[int, ...]] | None = None,
                   shapes_b: Mapping[str, tuple[int, ...]] | None = None, pairs: Mapping[str, KeyFigures] | None = None,
                   budget: Budget | None = None) -> GraphComparison:
    """A's graph and B's compared (see the module's docstring); `shapes_*`: each checkpoint's key -> shape;
    `pairs`: the comparison's figures by A's key (`overlay.pair_figures`)."""
    budget = budget or Budget.for_stored(0, "the graphs' comparison")
    shapes_a, shapes_b, pairs = shapes_a or {}, shapes_b or {}, pairs or {}
    places_a, places_b = _places(a, budget), _places(b, budget)
    at_a = {node.id: place for place, node in places_a.items()}
    matched: dict[str, str] = {}  # B's id -> A's id
    status: dict[str, str] = {}
    for place, node in places_a.items():  # bounded: each node once, its keys read (charged when built)
        other = places_b.get(place)
        if other is None:
            status[node.id] = REMOVED
            continue
        matched[other.id] = node.id
        weights_a = [shapes_a.get(k) for k in node.params]
        weights_b = [shapes_b.get(k) for k in other.params]
        differs = node.shape != other.shape or (weights_a != weights_b and all(weights_a) and all(weights_b))
        status[node.id] = SHAPE if differs else SAME
    nodes = list(a.nodes)
    taken = set(at_a)
    for node in b.nodes:
        budget.charge(1 + len(node.inputs), "nodes merged")
        if node.id in matched:
            continue
        new_id = ADDED_PREFIX + node.id
        while new_id in taken:  # charged: a prefix per id an earlier node took
            budget.charge(1 + len(new_id), "node ids made unique")
            new_id = ADDED_PREFIX + new_id
        taken.add(new_id)
        matched[node.id] = new_id
        inputs = tuple(matched[i] for i in node.inputs if i in matched)
        nodes.append(GraphNode(new_id, node.op, node.module, inputs, node.params, node.shape, node.dtype))
        status[new_id] = ADDED
    merged = ModelGraph(a.source, nodes, list(a.unread), list(a.notes), {**b.classes, **a.classes})
    change = {node.id: combine(CHANGE, _known(node.params, pairs)).value if status[node.id] != ADDED else None
              for node in nodes}
    return GraphComparison(merged, status, change)


def _known(keys: Iterable[str], pairs: Mapping[str, KeyFigures]) -> list[KeyFigures]:
    return [pairs[k] for k in keys if k in pairs]

"""Repeated modules found by their structure, and the architecture view's blocks in order.

Two sibling modules are instances of one repeated block when their subgraphs are the same: the same ops in the
same order with the same output shapes and dtypes, the same weights' shapes, the same edges inside them, and
the same child modules recursively; never by their names (`layers.0` and `layers.1` are not compared as
names). Each module's signature is a hash over its own nodes and its children's signatures, computed bottom-up
once (linear in the graph's nodes and edges). A run is two or more consecutive siblings of one signature
where each instance feeds the next (a chain, as decoder layers are; three parallel projections of one shape
are not a run).

`architecture()` gives the `Folding` a view draws with (`Hierarchy.view(expanded, folding)`), `first_view()`
the modules the first view opens (a paper's diagram: embeddings, the layers folded "x N", the head), and
`blocks_json()` the `blocks` of `graph --json`.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Mapping
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.graph.blocks.bookkeeping import hidden_nodes, passed_inputs
from ckptview.core.graph.collapse import Folding, Hierarchy
from ckptview.core.graph.model import ModelGraph

FIRST_VIEW_BOXES = 12  # boxes the first view opens modules up to (a run folded "x N" counts as one)
MAX_BLOCK_DEPTH = 64  # blocks nested in `graph --json` at most; deeper modules are part of the block there

Shapes = Mapping[str, tuple[int, ...]]


def _under(module: str, path: str) -> bool:
    return not path or module == path or module.startswith(path + ".")


def signatures(hierarchy: Hierarchy, shapes: Shapes, budget: Budget) -> dict[str, str]:
    """{module path: the hash of its subgraph's structure} (see the module's docstring)."""
    graph: ModelGraph = hierarchy.graph
    nodes = graph.nodes
    by_id = hierarchy.by_id
    out: dict[str, str] = {}
    for group in hierarchy.bottom_up():  # children before their parent
        budget.charge(1 + len(group.nodes) + len(group.children), "modules compared")
        parts: list[Any] = []
        for i in group.nodes:
            node = nodes[i]
            inputs: list[Any] = []
            for source in node.inputs:
                budget.charge(1, "edges compared")
                j = by_id.get(source, -1)
                if j >= 0 and _under(nodes[j].module, group.path):
                    inputs.append(i - j)
                else:
                    inputs.append(None if j < 0 else [nodes[j].shape, nodes[j].dtype])
            weights = [[key.rpartition(".")[2], shapes.get(key)] for key in node.params]
            parts.append([node.op, node.shape, node.dtype, weights, inputs])
        prefix = len(group.path) + 1 if group.path else 0
        parts.append([[child[prefix:], out[child]] for child in group.children])
        text = json.dumps(parts, default=str, separators=(",", ":"))
        budget.charge(len(text) // 64, "modules compared")
        out[group.path] = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    return out


def _feeds(hierarchy: Hierarchy, inputs: list[tuple[int, ...]], earlier: str, later: str, budget: Budget) -> bool:
    """Whether a node inside module `later` reads an output of a node inside module `earlier`."""
    nodes = hierarchy.graph.nodes
    for i in hierarchy.below(later):
        for j in inputs[i]:
            budget.charge(1, "runs checked")
            if _under(nodes[j].module, earlier):
                return True
    return False


def runs_of(hierarchy: Hierarchy, sigs: Mapping[str, str], inputs: list[tuple[int, ...]],
            budget: Budget) -> dict[str, tuple[str, ...]]:
    """{first instance: every instance} for each run of consecutive siblings of one signature, each feeding
    the next."""
    runs: dict[str, tuple[str, ...]] = {}
    for group in hierarchy.groups.values():
        children = group.children
        k = 0
        while k < len(children):  # bounded: each child once, as a run's first or in a run (`_feeds` charges)
            run = [children[k]]
            while (k + len(run) < len(children) and sigs[children[k + len(run)]] == sigs[run[0]]  # bounded: k moves past
                   and _feeds(hierarchy, inputs, run[-1], children[k + len(run)], budget)):
                run.append(children[k + len(run)])
            if len(run) >= 2:
                runs[run[0]] = tuple(run)
            k += len(run)
    return runs


def architecture(hierarchy: Hierarchy, shapes: Shapes, budget: Budget | None = None) -> Folding:
    """What the architecture view of `hierarchy` folds: bookkeeping hidden, repeated runs, shown counts."""
    budget = budget or hierarchy.budget("its architecture")
    graph = hierarchy.graph
    hidden = hidden_nodes(graph, budget, hierarchy.by_id)
    inputs = passed_inputs(graph, hidden, budget, hierarchy.by_id)
    shown: dict[str, int] = {}
    for group in hierarchy.bottom_up():
        count = sum(1 for i in group.nodes if not hidden[i]) + sum(shown[c] for c in group.children)  # bounded: once each
        shown[group.path] = count
    sigs = signatures(hierarchy, shapes, budget)
    runs = runs_of(hierarchy, sigs, inputs, budget)
    return Folding(hidden, inputs, runs, shown, dict(graph.classes))


def _entries(hierarchy: Hierarchy, folding: Folding, path: str) -> int:
    """How many boxes module `path` shows when opened (a run counts once)."""
    group = hierarchy.groups[path]
    count = sum(1 for i in group.nodes if not folding.hidden[i])
    k = 0
    while k < len(group.children):  # bounded: each child of a built module once
        child = group.children[k]
        run = folding.run_of(child)
        k += len(run) if run else 1
        count += 1 if folding.shown.get(child, 0) else 0
    return count


def first_view(hierarchy: Hierarchy, folding: Folding, limit: int = FIRST_VIEW_BOXES) -> frozenset[str]:
    """The modules the architecture view opens first: wrappers always (a module that shows one box, or one
    run, costs nothing), then the largest module made of modules while the boxes shown stay within `limit`
    (a layer norm's or a projection's own ops wait for a click: a paper draws them as one box)."""
    opened = {""}
    boxes = _entries(hierarchy, folding, "")
    instances = {p for run in folding.runs.values() for p in run}
    heap: list[tuple[int, str]] = []

    def offer(path: str) -> None:
        for child in hierarchy.groups[path].children:
            if child not in instances and folding.shown.get(child, 0) > 1 and hierarchy.groups[child].children:
                heapq.heappush(heap, (-folding.shown[child], child))

    offer("")
    while heap:  # bounded: each module of the built graph pushed once
        _, path = heapq.heappop(heap)
        added = _entries(hierarchy, folding, path) - 1
        if added <= 0 or boxes + added <= limit:
            opened.add(path)
            boxes += added
            offer(path)
    return frozenset(opened)


def blocks_json(hierarchy: Hierarchy, folding: Folding, numel: Mapping[str, int],
                budget: Budget | None = None) -> list[dict[str, Any]]:
    """The `blocks` of `graph --json`: the top module's blocks in order, each with its class, its repeat
    count, its nodes' ids, its parameter count and its own blocks (a run's: its first instance's)."""
    budget = budget or hierarchy.budget("its blocks")
    nodes = hierarchy.graph.nodes
    top: list[dict[str, Any]] = []
    stack: list[tuple[str, list[dict[str, Any]], int]] = [("", top, 0)]
    while stack:
        path, into, depth = stack.pop()
        group = hierarchy.groups[path]
        k = 0
        while k < len(group.children):
            child = group.children[k]
            run = folding.run_of(child) or (child,)
            k += len(run)
            container = len(run) == 1 and _only_run(hierarchy, folding, child)
            instances = folding.run_of(hierarchy.groups[child].children[0]) if container else run
            assert instances is not None
            ids: list[str] = []
            keys: dict[str, None] = {}
            for instance in (instances if not container else (child,)):
                for i in hierarchy.below(instance):
                    budget.charge(1 + len(nodes[i].params), "blocks listed")
                    ids.append(nodes[i].id)
                    keys.update(dict.fromkeys(nodes[i].params))
            first = instances[0]
            block: dict[str, Any] = {
                "module": child, "class": folding.classes.get(first) or hierarchy.graph.classes.get(first) or None,
                "repeat": len(instances), "nodes": ids, "parameters": sum(numel.get(key, 0) for key in keys),
                "blocks": []}
            if len(instances) > 1:
                block["instances"] = list(instances)
            into.append(block)
            if depth + 1 < MAX_BLOCK_DEPTH:
                stack.append((first, block["blocks"], depth + 1))
    return top


def _only_run(hierarchy: Hierarchy, folding: Folding, path: str) -> bool:
    """Whether module `path` holds one run and nothing else that is shown (a ModuleList of layers)."""
    group = hierarchy.groups[path]
    if not group.children or any(not folding.hidden[i] for i in group.nodes):
        return False
    run = folding.run_of(group.children[0])
    return run is not None and list(run) == group.children

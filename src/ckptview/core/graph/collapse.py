"""A graph's nodes nested by module path, and what a view shows for a set of expanded modules.

`Hierarchy` groups the nodes of a `ModelGraph` by their module path (`model.layers.3.mlp` is inside
`model.layers.3`, inside `model.layers`, inside `model`). A view (`Hierarchy.view(expanded)`) shows every
collapsed module as one box holding its inner node count, and the nodes of expanded modules one by one;
edges between what is shown are aggregated (one edge per pair, with the number of edges it stands for).
Everything here is linear in the graph's size and Qt-free; the window lays the view out in a worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ckptview.core.graph.model import GraphNode, ModelGraph

GROUP, NODE = "group", "node"


@dataclass
class Group:
    """One module path of the graph: its child modules, the nodes placed directly in it, and the count of all
    nodes below it."""

    path: str  # "" for the top
    parent: str | None
    children: list[str] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)  # indices into ModelGraph.nodes
    total: int = 0


@dataclass(frozen=True)
class Item:
    """One box of a view: a collapsed module (`kind` GROUP) or one node (`kind` NODE)."""

    key: str  # "g:<module path>" or "n:<node id>": stable across views, so selection and caches follow
    kind: str
    label: str  # what the box says on its first line
    detail: str  # its second line: the op, or "<count> nodes"
    path: str  # module path (a group's own; a node's module)
    node: int = -1  # index into ModelGraph.nodes (NODE only)
    count: int = 1  # nodes it stands for


@dataclass(frozen=True)
class View:
    """What is drawn for one set of expanded modules: boxes, aggregated edges, frames of expanded modules."""

    expanded: frozenset[str]
    items: list[Item]
    edges: list[tuple[int, int, int]]  # (from item, to item, edges it stands for)
    frames: list[tuple[str, list[int]]]  # (expanded module path, the items inside it, deepest last)

    def index(self) -> dict[str, int]:
        """Item key -> its index in `items`."""
        return {item.key: i for i, item in enumerate(self.items)}


def short_op(op: str) -> str:
    """`aten.linear.default` -> `linear`, `aten.add.Tensor` -> `add`; other ops as they are."""
    parts = op.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] in ("aten", "prims", "quantized") else op


def group_label(path: str) -> str:
    """The last part of a module path; a numbered one keeps its parent (`layers.3`, not `3`)."""
    parts = path.split(".")
    if len(parts) >= 2 and parts[-1].isdigit():
        return ".".join(parts[-2:])
    return parts[-1]


def parents_of(path: str) -> list[str]:
    """The module paths above `path`, top first, `path` itself last ("" has none)."""
    if not path:
        return []
    parts = path.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


class Hierarchy:
    """The module tree of a graph's nodes, with the look-ups a view needs (node id, key -> node)."""

    def __init__(self, graph: ModelGraph) -> None:
        self.graph = graph
        self.groups: dict[str, Group] = {"": Group("", None)}
        self.by_id: dict[str, int] = {}
        self.readers: dict[str, list[int]] = {}  # checkpoint key -> nodes that read it
        for index, node in enumerate(graph.nodes):
            self.by_id[node.id] = index
            self._group(node.module).nodes.append(index)
            for key in node.params:
                self.readers.setdefault(key, []).append(index)
        for group in sorted(self.groups.values(), key=lambda g: -g.path.count(".") if g.path else 1):
            group.total += len(group.nodes)
            if group.parent is not None:
                self.groups[group.parent].total += group.total

    def _group(self, path: str) -> Group:
        found = self.groups.get(path)
        if found is not None:
            return found
        parent = path.rpartition(".")[0] if "." in path else ""
        self._group(parent).children.append(path)
        group = self.groups[path] = Group(path, parent)
        return group

    def node(self, index: int) -> GraphNode:
        """The graph node at `index`."""
        return self.graph.nodes[index]

    def top(self) -> frozenset[str]:
        """The expanded set of the first view: the top level only (its modules collapsed)."""
        return frozenset({""})

    def expand_to(self, expanded: frozenset[str], path: str) -> frozenset[str]:
        """`expanded` with every module from the top down to `path` itself expanded."""
        return expanded | {""} | set(parents_of(path))

    def collapse(self, expanded: frozenset[str], path: str) -> frozenset[str]:
        """`expanded` without `path` and the modules inside it (the top never collapses)."""
        if not path:
            return expanded
        prefix = path + "."
        return frozenset(p for p in expanded if p != path and not p.startswith(prefix))

    def params_below(self, path: str) -> list[str]:
        """The checkpoint keys read by the nodes inside module `path`, in graph order, each once."""
        seen: dict[str, None] = {}
        stack = [path]
        indices: list[int] = []
        while stack:
            group = self.groups[stack.pop()]
            indices.extend(group.nodes)
            stack.extend(group.children)
        for index in sorted(indices):
            for key in self.graph.nodes[index].params:
                seen.setdefault(key)
        return list(seen)

    def view(self, expanded: Iterable[str]) -> View:
        """The boxes and aggregated edges shown when the modules in `expanded` are open (the top always is)."""
        opened = frozenset(expanded) | {""}
        rep_of_group: dict[str, int] = {}  # a group below a collapsed one -> the collapsed one's item
        items: list[Item] = []
        frames: list[tuple[str, list[int]]] = []
        rep = [0] * len(self.graph.nodes)
        stack = [""]
        while stack:  # parents before children: a group inherits the box of a collapsed ancestor
            path = stack.pop()
            group = self.groups[path]
            parent_rep = rep_of_group.get(group.parent) if group.parent is not None else None
            if parent_rep is None and path not in opened:
                parent_rep = len(items)
                items.append(Item("g:" + path, GROUP, group_label(path), _count_text(group.total), path,
                                  count=group.total))
            if parent_rep is not None:
                rep_of_group[path] = parent_rep
                for index in group.nodes:
                    rep[index] = parent_rep
            else:
                for index in group.nodes:
                    rep[index] = len(items)
                    node = self.graph.nodes[index]
                    items.append(Item("n:" + node.id, NODE, node.id, short_op(node.op), path, node=index))
            stack.extend(reversed(group.children))
        for path in sorted(opened - {""}, key=lambda p: p.count(".")):
            if path in self.groups and path not in rep_of_group:
                frames.append((path, []))
        frame_index = {path: i for i, (path, _) in enumerate(frames)}
        for i, item in enumerate(items):
            start = item.path.rpartition(".")[0] if item.kind == GROUP else item.path
            for path in parents_of(start):
                if path in frame_index:
                    frames[frame_index[path]][1].append(i)
        counts: dict[tuple[int, int], int] = {}
        by_id = self.by_id
        for index, node in enumerate(self.graph.nodes):
            target = rep[index]
            for source_id in node.inputs:
                source_index = by_id.get(source_id)
                if source_index is None:
                    continue
                source = rep[source_index]
                if source != target:
                    pair = (source, target)
                    counts[pair] = counts.get(pair, 0) + 1
        edges = [(a, b, n) for (a, b), n in counts.items()]
        return View(opened, items, edges, frames)


def _count_text(count: int) -> str:
    return f"{count:,} node" + ("" if count == 1 else "s")

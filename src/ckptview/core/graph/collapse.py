"""A graph's nodes nested by module path, and what a view shows for a set of expanded modules.

`Hierarchy` groups the nodes of a `ModelGraph` by their module path (`model.layers.3.mlp` is inside
`model.layers.3`, inside `model.layers`, inside `model`). A view (`Hierarchy.view(expanded)`) shows every
collapsed module as one box holding its inner node count, and the nodes of expanded modules one by one;
edges between what is shown are aggregated (one edge per pair, with the number of edges it stands for).

Given a `Folding` (`core/graph/blocks`: the architecture view), a view also hides bookkeeping ops (their
edges pass through them to the nodes they serve) and draws a run of repeated sibling modules (32 decoder
layers) as one box "x 32"; opening it shows the first instance's parts, the others stay one box.

Everything here is linear in the graph's size, walks with explicit stacks (a module path thousands of levels
deep recurses nowhere), charges the graph's work `Budget`, and is Qt-free; the window lays a view out in a
worker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ckptview.core.budget import Budget
from ckptview.core.graph.model import GraphNode, ModelGraph
from ckptview.core.units import human_count, plural

GROUP, NODE = "group", "node"
ALL_OPS, ARCHITECTURE = "all", "architecture"  # a view's mode: every op, or the folded block diagram
_NUMBERED = re.compile(r"_\d+$")


@dataclass
class Group:
    """One module path of the graph: its child modules, the nodes placed directly in it, and the count of all
    nodes below it."""

    path: str  # "" for the top
    parent: str | None
    children: list[str] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)  # indices into ModelGraph.nodes
    total: int = 0
    first: int = -1  # the index of the first node below it (its place in the program's order)


@dataclass(frozen=True)
class Item:
    """One box of a view: a collapsed module (`kind` GROUP) or one node (`kind` NODE)."""

    key: str  # "g:<module path>" or "n:<node id>": stable across views, so selection and caches follow
    kind: str
    title: str  # its first line: a module's class (or its name), a node's op
    name: str  # its second line: the module's or node's name, "" where it would repeat the title
    path: str  # module path (a group's own; a node's module; a one-node module's own)
    node: int = -1  # index into ModelGraph.nodes (NODE only)
    count: int = 1  # nodes it stands for
    repeat: int = 1  # instances of a repeated module it stands for (a folded run: "x 32")
    folded: int = 0  # bookkeeping ops folded into it (the architecture view hides them)
    params: int = 0  # elements of the weights it reads (where the checkpoint's shapes are known)
    instances: tuple[str, ...] = ()  # the modules a folded run's box stands for (its own path otherwise)

    @property
    def label(self) -> str:
        """The first line as drawn: the title, with the repeat count of a folded run."""
        return f"{self.title} × {self.repeat}" if self.repeat > 1 else self.title

    @property
    def detail(self) -> str:
        """The second line as drawn: the name once, then the parameter count (a closed module: or its ops)."""
        parts = [self.name] if self.name else []
        if self.params:
            parts.append(f"{human_count(self.params)} params")
        elif self.kind == GROUP:
            parts.append(plural(self.count, "op"))
        return " · ".join(parts)


@dataclass(frozen=True)
class View:
    """What is drawn for one set of expanded modules: boxes, aggregated edges, frames of expanded modules."""

    expanded: frozenset[str]
    items: list[Item]
    edges: list[tuple[int, int, int]]  # (from item, to item, edges it stands for)
    frames: list[tuple[str, list[int]]]  # (expanded module path, the items inside it, deepest last)
    mode: str = ALL_OPS
    sources: list[int] = field(default_factory=list)  # per edge: the graph node whose output it carries

    @property
    def key(self) -> tuple[frozenset[str], str]:
        """What identifies the view (its layout is kept under it)."""
        return self.expanded, self.mode

    def index(self) -> dict[str, int]:
        """Item key -> its index in `items`."""
        return {item.key: i for i, item in enumerate(self.items)}


@dataclass
class Folding:
    """What the architecture view folds (made by `core/graph/blocks`): the bookkeeping ops it hides, each
    node's inputs with those passed through, the runs of repeated sibling modules, and each module's class."""

    hidden: list[bool]  # per node: a bookkeeping op, folded into the nodes it serves
    inputs: list[tuple[int, ...]]  # per node: the shown nodes whose outputs reach it (through hidden ones)
    runs: dict[str, tuple[str, ...]]  # first instance's path -> every instance's path, in order (2 or more)
    shown: dict[str, int]  # module path -> its nodes that are not hidden
    classes: dict[str, str] = field(default_factory=dict)  # module path -> class name, where known

    def run_of(self, path: str) -> tuple[str, ...] | None:
        """The instances of the run `path` is the first of (None: it is none's first)."""
        return self.runs.get(path)


def short_op(op: str) -> str:
    """`aten.linear.default` -> `linear`, `aten.add.Tensor` -> `add`; other ops as they are."""
    parts = op.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] in ("aten", "prims", "quantized") else op


def group_label(path: str) -> str:
    """The last part of a module path; a numbered one keeps its parent (`layers.3`, not `3`)."""
    parts = path.rsplit(".", 2)
    if len(parts) >= 2 and parts[-1].isdigit():
        return ".".join(parts[-2:])
    return parts[-1]


def node_name(node: GraphNode) -> str:
    """A node's name as its box says it: "" where it is its op again (`flatten`, `linear_3`)."""
    base = _NUMBERED.sub("", node.id)
    op = short_op(node.op)
    return "" if base in (op, op.rstrip("_"), op.split(".")[-1]) else node.id


def parents_of(path: str) -> list[str]:
    """The module paths above `path`, top first, `path` itself last ("" has none)."""
    if not path:
        return []
    parts = path.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def parent_path(path: str) -> str:
    """The module that holds `path` ("" for a top-level one)."""
    return path.rpartition(".")[0] if "." in path else ""


class Hierarchy:
    """The module tree of a graph's nodes, with the look-ups a view needs (node id, key -> node)."""

    def __init__(self, graph: ModelGraph, stored: int = 0, numel: Mapping[str, int] | None = None) -> None:
        self.graph = graph
        self.stored = stored  # the bytes of the file the graph came from: what pays for each view's work
        self.numel = dict(numel or {})  # checkpoint key -> its elements (a box's parameter count)
        self.folding: Folding | None = None  # what the architecture view folds (`core/graph/blocks`), once found
        budget = self.budget("nesting the graph by module")
        self.groups: dict[str, Group] = {"": Group("", None)}
        self.by_id: dict[str, int] = {}
        self.readers: dict[str, list[int]] = {}  # checkpoint key -> nodes that read it
        for index, node in enumerate(graph.nodes):
            budget.charge(1 + len(node.params), "nodes nested")
            self.by_id[node.id] = index
            self._group(node.module, budget).nodes.append(index)
            for key in node.params:
                self.readers.setdefault(key, []).append(index)
        for group in self.bottom_up():
            group.total += len(group.nodes)
            if group.nodes:
                group.first = group.nodes[0] if group.first < 0 else min(group.first, group.nodes[0])
            if group.parent is not None:
                parent = self.groups[group.parent]
                parent.total += group.total
                if group.first >= 0 and (parent.first < 0 or group.first < parent.first):
                    parent.first = group.first
        for group in self.groups.values():  # children in the program's order (their first node's)
            group.children.sort(key=lambda p: self.groups[p].first)

    def bottom_up(self) -> list[Group]:
        """Every module, each before the module that holds it (the top last)."""
        return sorted(self.groups.values(), key=lambda g: -g.path.count(".") if g.path else 1)

    def budget(self, what: str) -> Budget:
        """A budget for one piece of work on this graph, paid for by the file's bytes."""
        return Budget.for_stored(self.stored, f"the graph ({what})")

    def _group(self, path: str, budget: Budget) -> Group:
        found = self.groups.get(path)
        if found is not None:
            return found
        missing: list[str] = []  # from `path` up to the first module that exists: no recursion per level
        at = path
        while at not in self.groups:
            missing.append(at)
            at = parent_path(at)
        for made in reversed(missing):
            budget.charge(1, "modules nested")
            parent = parent_path(made)
            self.groups[parent].children.append(made)
            self.groups[made] = Group(made, parent)
        return self.groups[path]

    def node(self, index: int) -> GraphNode:
        """The graph node at `index`."""
        return self.graph.nodes[index]

    def top(self) -> frozenset[str]:
        """The expanded set of the first view of every op: the top level only (its modules collapsed)."""
        return frozenset({""})

    def chain(self, path: str) -> list[str]:
        """The modules from the top down to `path` that this graph has (`path` last), walked up by parent."""
        out: list[str] = []
        at: str | None = path if path in self.groups else None
        while at:
            out.append(at)
            at = self.groups[at].parent
        out.reverse()
        return out

    def expand_to(self, expanded: frozenset[str], path: str) -> frozenset[str]:
        """`expanded` with every module from the top down to `path` itself expanded."""
        return expanded | {""} | set(self.chain(path) or parents_of(path))

    def collapse(self, expanded: frozenset[str], path: str) -> frozenset[str]:
        """`expanded` without `path` and the modules inside it (the top never collapses)."""
        if not path:
            return expanded
        prefix = path + "."
        return frozenset(p for p in expanded if p != path and not p.startswith(prefix))

    def below(self, path: str) -> list[int]:
        """The indices of the nodes inside module `path`, in graph order."""
        stack = [path] if path in self.groups else []
        indices: list[int] = []
        while stack:
            group = self.groups[stack.pop()]
            indices.extend(group.nodes)
            stack.extend(group.children)
        indices.sort()
        return indices

    def keys_of(self, item: Item) -> list[str]:
        """The checkpoint keys a box reads: a node's own, or every node's inside the module(s) it stands for."""
        if item.kind != GROUP:
            return list(self.graph.nodes[item.node].params) if 0 <= item.node < len(self.graph.nodes) else []
        seen: dict[str, None] = {}
        for path in item.instances or (item.path,):
            seen.update(dict.fromkeys(self.params_below(path)))
        return list(seen)

    def params_below(self, path: str) -> list[str]:
        """The checkpoint keys read by the nodes inside module `path`, in graph order, each once."""
        seen: dict[str, None] = {}
        for index in self.below(path):
            for key in self.graph.nodes[index].params:
                seen.setdefault(key)
        return list(seen)

    def view(self, expanded: Iterable[str], folding: Folding | None = None) -> View:
        """The boxes and aggregated edges shown when the modules in `expanded` are open (the top always is).

        With `folding` (the architecture view): bookkeeping ops are hidden, edges pass through them, runs of
        repeated modules are one box until an instance is opened, and a module of one shown node is that node."""
        return _ViewBuilder(self, frozenset(expanded) | {""}, folding).build()


class _ViewBuilder:
    """One view, built with explicit stacks: items in the program's order, frames, then aggregated edges."""

    def __init__(self, hierarchy: Hierarchy, opened: frozenset[str], folding: Folding | None) -> None:
        self.h, self.opened, self.folding = hierarchy, opened, folding
        self.budget = hierarchy.budget("a view")
        self.items: list[Item] = []
        self.rep = [-1] * len(hierarchy.graph.nodes)
        self.within: list[str] = []  # per item: the innermost open module holding it ("" at the top)
        self.frames: list[str] = []  # expanded modules shown, parents first

    def _shown(self, path: str) -> int:
        return self.folding.shown.get(path, 0) if self.folding is not None else self.h.groups[path].total

    def _hidden(self, index: int) -> bool:
        return self.folding is not None and self.folding.hidden[index]

    def _title(self, path: str) -> str:
        cls = self.folding.classes.get(path) if self.folding is not None else None
        return cls or self.h.graph.classes.get(path) or group_label(path)

    def _add(self, item: Item, within: str) -> int:
        self.budget.charge(1, "boxes drawn")
        self.items.append(item)
        self.within.append(within)
        return len(self.items) - 1

    def _params(self, indices: Iterable[int]) -> int:
        numel = self.h.numel
        if not numel:
            return 0
        keys = {key for i in indices for key in self.h.graph.nodes[i].params}
        return sum(numel.get(key, 0) for key in keys)

    def _node_item(self, index: int, within: str, name: str | None = None, path: str | None = None) -> int:
        node = self.h.graph.nodes[index]
        title = short_op(node.op)
        return self._add(Item("n:" + node.id, NODE, title, node_name(node) if name is None else name,
                              node.module if path is None else path, node=index, params=self._params([index])),
                         within)

    def _box(self, paths: list[str], within: str) -> None:
        """One closed box for the modules `paths` (one module, or consecutive instances of a run)."""
        shown = sum(self._shown(p) for p in paths)
        below = [i for p in paths for i in self.h.below(p)]
        self.budget.charge(len(below), "nodes folded into a box")
        if shown == 0:
            return  # nothing but bookkeeping inside: its edges pass through
        visible = [i for i in below if not self._hidden(i)]
        if shown == 1 and len(paths) == 1 and len(visible) == 1:  # a module of one op: that op, named once
            module = self.h.graph.nodes[visible[0]].module
            box = self._node_item(visible[0], within, name=group_label(module or paths[0]), path=paths[0])
        else:
            title = self._title(paths[0])
            name = group_label(paths[0]) if len(paths) == 1 else _span(paths)
            if name == title:
                name = ""
            box = self._add(Item("g:" + paths[0], GROUP, title, name, paths[0], count=shown, repeat=len(paths),
                                 folded=len(below) - len(visible), params=self._params(below),
                                 instances=tuple(paths) if len(paths) > 1 else ()), within)
        for i in below:
            self.rep[i] = box

    def build(self) -> View:
        h = self.h
        stack = [""]
        while stack:  # an expanded module: its own nodes, then its children in the program's order
            path = stack.pop()
            group = h.groups[path]
            if path:
                self.frames.append(path)
            entries: list[tuple[int, str, object]] = [(i, "node", i) for i in group.nodes]
            children = group.children
            k = 0
            while k < len(children):
                child = children[k]
                run = self.folding.run_of(child) if self.folding is not None else None
                if run and all(r in h.groups for r in run):
                    entries.append((h.groups[child].first, "run", run))
                    k += len(run) if children[k:k + len(run)] == list(run) else 1
                else:
                    entries.append((h.groups[child].first, "child", child))
                    k += 1
            entries.sort(key=lambda e: e[0])
            expand: list[str] = []
            for _, kind, what in entries:
                if kind == "node":
                    index = what
                    assert isinstance(index, int)
                    if not self._hidden(index):
                        self.rep[index] = self._node_item(index, path)
                elif kind == "child":
                    assert isinstance(what, str)
                    if what in self.opened:
                        expand.append(what)
                    else:
                        self._box([what], path)
                else:
                    assert isinstance(what, tuple)
                    pending: list[str] = []
                    for instance in what:
                        if instance in self.opened:
                            if pending:
                                self._box(pending, path)
                                pending = []
                            expand.append(instance)
                        else:
                            pending.append(instance)
                    if pending:
                        self._box(pending, path)
            stack.extend(reversed(expand))
        edges, sources = self._edges()
        return View(self.opened, self.items, edges, self._frame_members(),
                    ALL_OPS if self.folding is None else ARCHITECTURE, sources)

    def _frame_members(self) -> list[tuple[str, list[int]]]:
        """Each expanded module shown with every item inside it (deeper frames' items too), shallow first."""
        index = {path: f for f, path in enumerate(self.frames)}
        members: list[list[int]] = [[] for _ in self.frames]
        for i, within in enumerate(self.within):
            if within in index:
                members[index[within]].append(i)
        order = sorted(range(len(self.frames)), key=lambda f: -self.frames[f].count("."))
        groups = self.h.groups
        for f in order:  # deepest first: a frame's items join the frame around it
            parent = groups[self.frames[f]].parent
            while parent and parent not in index:
                parent = groups[parent].parent
            if parent and members[f]:
                self.budget.charge(len(members[f]), "boxes framed")
                members[index[parent]].extend(members[f])
        for found in members:
            found.sort()
        ordered = sorted(range(len(self.frames)), key=lambda f: self.frames[f].count("."))
        return [(self.frames[f], members[f]) for f in ordered]

    def _edges(self) -> tuple[list[tuple[int, int, int]], list[int]]:
        counts: dict[tuple[int, int], int] = {}
        source: dict[tuple[int, int], int] = {}
        by_id = self.h.by_id
        rep = self.rep
        for index, node in enumerate(self.h.graph.nodes):
            target = rep[index]
            if target < 0 or self._hidden(index):
                continue
            inputs: Iterable[int] = (self.folding.inputs[index] if self.folding is not None
                                     else (by_id.get(s, -1) for s in node.inputs))
            for source_index in inputs:
                self.budget.charge(1, "edges drawn")
                if source_index < 0:
                    continue
                start = rep[source_index]
                if start >= 0 and start != target:
                    pair = (start, target)
                    counts[pair] = counts.get(pair, 0) + 1
                    if source_index > source.get(pair, -1):  # the latest: a block's output, not its mask
                        source[pair] = source_index
        pairs = list(counts)
        return [(a, b, counts[(a, b)]) for a, b in pairs], [source[p] for p in pairs]


def _span(paths: list[str]) -> str:
    """The name of consecutive instances: `layers.0-31` (numbered), else the first's name and a count."""
    first, last = group_label(paths[0]), paths[-1].rpartition(".")[2]
    if first.rpartition(".")[2].isdigit() and last.isdigit():
        return f"{first}–{last}"
    return f"{first} …"

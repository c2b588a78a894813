"""Group a checkpoint tree by module path for display (Qt-free).

A state dict stores ``encoder.layers.3.attn.q_proj.weight`` as one flat key; people think of it as the
``weight`` of ``q_proj`` inside ``encoder > layers > 3 > attn``. :func:`group_tree` turns the core tree into
rows where dotted keys are nested under synthetic *group* rows, and every row carries the totals (tensors,
elements, bytes) of its subtree. The GUI's tree model is a thin adapter over these rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from ckptview.core.checkpoint import MAX_MODULE_DEPTH, Node
from ckptview.core.gc_policy import paused_gc
from ckptview.core.read.formats import training_folder


class Row:
    """One display row: a core node (container, tensor, value) or a synthetic module group."""

    __slots__ = ("label", "node", "name", "kind", "parent", "children", "tensors", "numel", "nbytes",
                 "params", "search_name")

    def __init__(self, label: str, node: Node | None, name: str, kind: str, parent: Row | None) -> None:
        self.label = label
        self.node = node
        self.name = name  # the contract name ("a.b.c"); for a group, the dotted prefix it stands for
        self.kind = kind  # "group" for a synthetic module group, else the node's kind
        self.parent = parent
        self.children: list[Row] = []
        self.tensors = 0
        self.numel = 0
        self.nbytes = 0
        # Elements of the model's parameters here and below, as `module.parameters()` counts them (a tied
        # weight once): only where `group_tree` was given the counts (`summary.size_facts` decides them)
        self.params = 0
        lowered = name.lower()
        self.search_name = name if lowered == name else lowered  # one string, not two, for most names

    @property
    def is_group(self) -> bool:
        """True for a synthetic module-path group (no node of its own)."""
        return self.node is None

    def walk(self) -> Iterator[Row]:
        """This row and every row below it, depth first (iterative)."""
        stack = [self]
        while stack:
            row = stack.pop()
            yield row
            stack.extend(reversed(row.children))

    def __repr__(self) -> str:
        return f"Row({self.name!r}, {self.kind}, {len(self.children)} children)"


class ModuleGroup:
    """A selected module-group row (``encoder > layers > 0``) as panels see it: a name and its tensors.

    Group rows have no node of their own (the file stores flat dotted keys); this stands in for one in a
    selection, so module rows are first-class wherever a tensor is (statistics and histogram over every
    tensor below, export), and other panels can say why they show one tensor at a time.
    """

    kind = "module"
    tensor = None
    value = None
    parent = None
    children: tuple[Node, ...] = ()

    def __init__(self, name: str, nodes: list[Node]) -> None:
        self.name = name
        self.key = name.rsplit(".", 1)[-1]
        self.nodes = nodes  # the tensor nodes below the group, in display order

    @classmethod
    def of_row(cls, row: Row) -> ModuleGroup:
        """The group standing for `row` (a synthetic group row): its tensors, a quantized weight's logical
        tensor standing for its parts."""
        return cls(row.name, [r.node for r in row.walk() if r.node is not None and r.node.kind == "tensor"
                              and not is_part(r.node)])

    def walk(self) -> Iterator[Node]:
        """The tensor nodes below the group (a group has no node of its own)."""
        return iter(self.nodes)

    def __repr__(self) -> str:
        return f"ModuleGroup({self.name!r}, {len(self.nodes)} tensors)"


# One selected row as the panels receive it: a node of the file, or a module group standing for one.
Selected = Node | ModuleGroup


# Module groups a dotted key may open (`a.b.c.weight`: 3), and the deepest any row may sit. A 100,000-dot
# name nested as deep would cost 100,000 group rows whose names add up to gigabytes, and a view as deep
# as that; past the limit the rest of the key is one row (the tensor keeps its whole name).
MAX_GROUP_DEPTH = MAX_MODULE_DEPTH
MAX_ROW_DEPTH = 1000  # the pickle reader keeps containers 1000 levels deep: groups never go deeper


def is_part(node: Node) -> bool:
    """Whether `node` is a stored part of a quantized weight (shown beneath its logical tensor's row)."""
    return node.tensor is not None and node.tensor.part_of is not None


class ParameterCounts(NamedTuple):
    """Which tensors are the model's parameters: id(node) -> elements for each (every name of a tied weight),
    and (id(node) of a second name, id(node) of the first) for each tied weight, counted once above both."""

    elements: dict[int, int]
    tied: list[tuple[int, int]]


def group_tree(root: Node, warnings: list[str] | None = None, parameters: ParameterCounts | None = None) -> Row:
    """The display rows of `root`, dotted string keys nested by module path, with subtree totals.

    Iterative whatever the nesting; a key of more than `MAX_GROUP_DEPTH` dotted levels is grouped that deep
    and the rest of it kept as one row, with one line appended to `warnings` (when given, once). With
    `parameters` each row's `params` counts the model's parameters below it."""
    with paused_gc():  # hundreds of thousands of rows and no garbage: skip the collector's passes
        cut = [False]
        top = _group_tree(root, cut, parameters)
    if cut[0] and warnings is not None and DEPTH_WARNING not in warnings:
        warnings.append(DEPTH_WARNING)
    return top


DEPTH_WARNING = (f"tensor names nest deeper than {MAX_GROUP_DEPTH} module levels: the levels past it are "
                 "shown as one row")


def _group_tree(root: Node, cut: list[bool], parameters: ParameterCounts | None = None) -> Row:
    counts = parameters.elements if parameters is not None else {}
    tied = {n for pair in parameters.tied for n in pair} if parameters is not None else set()
    tied_rows: dict[int, Row] = {}
    top = Row("", root, "", root.kind, None)
    if not root.children and root.kind in ("value", "object", "tensor"):
        # The whole file is one value, e.g. a pickle whose top object is a call `os.system('...')`: show
        # it as a row, so what the file would run is visible in the tree and the details.
        only = Row("(root)", root, "", root.kind, top)
        top.children.append(only)
        if root.kind == "tensor" and root.tensor is not None:
            only.tensors, only.numel, only.nbytes = 1, root.tensor.numel, root.tensor.nbytes
            only.params = counts.get(id(root), 0)
            _add_totals([only])
        return top
    stack: list[tuple[Node, Row, int]] = [(root, top, 0)]
    made: list[Row] = []  # every row below `top` as made: a parent always before its children
    logical: dict[str, Row] = {}  # a quantized weight's logical tensor's row, by name: its parts go beneath it
    while stack:
        node, row, depth = stack.pop()
        groups: dict[str, tuple[Row, int]] = {}
        prefix_name = f"{row.name}." if row.name else ""
        levels = max(0, min(MAX_GROUP_DEPTH, MAX_ROW_DEPTH - depth - 1))
        if node.type_name == training_folder.NAME:  # its keys are file names: `model.safetensors` is one row
            levels = 0
        module = node.kind == "object" and any(_is_mode(c) for c in node.children)
        for child in node.children:
            key = child.key
            if module and _bookkeeping(child):  # a module's train/eval flag, a TorchScript module's private
                continue  # attributes (kept in the checkpoint: its code reads them; no row of the tree)
            child_depth = depth + 1
            if type(key) is str and "." in key and levels:  # a ReprKey (2.5, a tuple) is one row
                prefix, _, label = key.rpartition(".")
                found = groups.get(prefix)
                if found is None:
                    found = _group_for(row, prefix, groups, levels, cut, made)
                parent, child_depth = found[0], depth + found[1] + 1
            else:
                label, parent = str(key), row
            info = child.tensor if child.kind == "tensor" else None
            if info is not None and info.part_of is not None and info.part_of in logical:
                parent = logical[info.part_of]  # a stored part: beneath its weight, in no total (the weight's)
            child_row = Row(label, child, f"{prefix_name}{key}", child.kind, parent)
            parent.children.append(child_row)
            made.append(child_row)
            if child.children:
                stack.append((child, child_row, child_depth))
            if info is not None:
                if info.part_of is not None:
                    child_row.numel, child_row.nbytes = info.numel, info.nbytes
                    continue
                child_row.tensors, child_row.numel, child_row.nbytes = 1, info.numel, info.nbytes
                if counts:
                    child_row.params = counts.get(id(child), 0)
                    if id(child) in tied:
                        tied_rows[id(child)] = child_row
                if info.quant is not None:
                    logical[child_row.name] = child_row
    for row in logical.values():  # the parts in the weight's order (the codes first), not the file's
        weight = row.node.tensor if row.node is not None else None
        if len(row.children) > 1 and weight is not None and (quant := weight.quant) is not None:
            order = {name: i for i, name in enumerate(quant.part_names())}
            row.children.sort(key=lambda r: order.get(r.name, len(order)))
    _add_totals(made)
    if parameters is not None:
        _count_tied_once(parameters.tied, tied_rows)
    return top


def _count_tied_once(tied: list[tuple[int, int]], rows: dict[int, Row]) -> None:
    """A tied weight counts in each module that holds one of its names, once in a module holding both:
    taken off the rows above both of them (the lowest row the two share, and its ancestors)."""
    for second, first in tied:
        a, b = rows.get(second), rows.get(first)
        if a is None or b is None:
            continue
        above: set[int] = set()
        up: Row | None = b
        while up is not None:
            above.add(id(up))
            up = up.parent
        shared = a.parent
        while shared is not None and id(shared) not in above:
            shared = shared.parent
        while shared is not None:
            shared.params -= a.params
            shared = shared.parent


def _is_mode(node: Node) -> bool:
    """The `training` flag every torch.nn.Module (pickled or TorchScript) keeps among its attributes."""
    return node.key == "training" and node.kind == "value" and isinstance(node.value, bool)


def _bookkeeping(node: Node) -> bool:
    """A module's member that is torch's bookkeeping, not a weight or a setting: its `training` flag and its
    private attributes (`_is_full_backward_hook`, `_reversed_padding_repeated_twice`; a pickled module's are
    left out when it is read, a TorchScript module keeps them for its code)."""
    if _is_mode(node):
        return True
    return (isinstance(node.key, str) and node.key.startswith("_") and node.kind != "tensor"
            and not any(n.kind == "tensor" for n in node.walk()))

def _group_for(row: Row, prefix: str, groups: dict[str, tuple[Row, int]], levels: int,
               cut: list[bool], made: list[Row]) -> tuple[Row, int]:
    """(the group row for the dotted `prefix` under `row`, its levels below `row`), creating missing levels
    in first-seen order; at most `levels` deep (a longer prefix: its rest is the last group's label).

    A group's key in `groups` is its dotted prefix exactly (`.x` and `x` are two groups; a key with an empty
    part, `a..b`, keeps it). Levels are looked up from the deepest down: a new prefix (`layers.7.mlp`)
    mostly shares all but its last level with one seen before (`layers.7.attn`), so one lookup finds
    where the new levels start."""
    named = f"{row.name}." if row.name else ""
    head, dot, last = prefix.rpartition(".")
    if dot and (up := groups.get(head)) is not None and up[1] < levels:  # the common case: one level new
        return _new_group(up[0], last, named + prefix, prefix, up[1] + 1, groups, made)
    parts = prefix.split(".", levels)  # never more than levels + 1 pieces, whatever the key's length
    if len(parts) > levels:
        parts[levels - 1:] = [".".join(parts[levels - 1:])]
        cut[0] = True
    have = len(parts) - 1  # levels that exist already (the whole prefix does not: the caller looked)
    while have and ".".join(parts[:have]) not in groups:
        have -= 1
    parent = groups[".".join(parts[:have])][0] if have else row
    found = None
    for depth in range(have + 1, len(parts) + 1):
        path = ".".join(parts[:depth])
        found = _new_group(parent, parts[depth - 1], named + path, path, depth, groups, made)
        parent = found[0]
    assert found is not None  # at least the last level was made here
    return found


def _new_group(parent: Row, label: str, name: str, path: str, depth: int, groups: dict[str, tuple[Row, int]],
               made: list[Row]) -> tuple[Row, int]:
    group = Row(label, None, name, "group", parent)
    parent.children.append(group)
    made.append(group)
    found = groups[path] = (group, depth)
    return found


def _add_totals(made: list[Row]) -> None:
    """Every row's totals, each summed once: rows are made parents first, so walked backwards every row is
    complete (its tensor's own figures and all of its children's) when it adds itself to its parent. No
    recursion (checkpoints nest deeply), one step per row rather than per tensor and ancestor."""
    for row in reversed(made):
        if row.tensors:
            parent = row.parent
            assert parent is not None  # only `top` has none, and it is not in `made`
            parent.tensors += row.tensors
            parent.numel += row.numel
            parent.nbytes += row.nbytes
            parent.params += row.params


def find_row(top: Row, name: str) -> Row | None:
    """The row whose contract name is `name` (a tensor, value, container or group), or None."""
    for row in top.walk():
        if row.name == name:
            return row
    return None


def chart_rows(top: Row, limit: int = 12) -> list[tuple[str, int]]:
    """(name, bytes) of the top-level modules, for a size-by-module chart.

    Descends while a single child holds all the bytes (``{"state_dict": {...}}``, a lone ``model`` group),
    so the chart shows the level where the file's bulk actually splits. Beyond `limit` the rest is summed.
    """
    row = top
    while True:
        heavy = [c for c in row.children if c.nbytes > 0]
        if len(heavy) == 1 and heavy[0].children:
            row = heavy[0]
            continue
        break
    bars = sorted(((c.name, c.nbytes) for c in row.children if c.nbytes > 0), key=lambda b: -b[1])
    if len(bars) > limit:
        rest = sum(b for _, b in bars[limit - 1:])
        bars = bars[: limit - 1] + [(f"{len(bars) - limit + 1} others", rest)]
    return bars

"""Turn the inert object graph of a pickle into the checkpoint's Node tree.

Iterative (a 100,000-deep nesting cannot exhaust the Python stack), cycle-safe, and charged: every node
built costs `NODE_COST` units of the open's budget, so a pickle whose shared references would expand into
more nodes than its bytes pay for (a 234-byte "billion laughs") is refused in one line.
"""

from __future__ import annotations

import collections
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import MODULE_PART, Node, NodeKind, PathKey, ReprKey, TensorInfo
from ckptview.core.gc_policy import paused_gc
from ckptview.core.read.pickle.torch_globals import NumpyArray, SizeValue
from ckptview.core.read.pickle.vm import GlobalRef, StubObject
from ckptview.core.units import plural

NODE_COST = 12
"""Units a node of the tree costs (a Node holds ~190 bytes)."""
# Real checkpoints nest a few dozen levels. Deeper content is cut: every node's path costs its
# depth, so a 100,000-deep nesting with a leaf per level would make listing its names quadratic. A bound on
# one path's length, not on how often anything happens.
MAX_DEPTH = 1_000
REPEATED = "tree items made by repeating shared containers"
REPR_LIMIT = 100_000

_MODULE_PARTS = ("_parameters", "_buffers", "_modules")


def path_key(key: Any) -> PathKey:
    """The contract's path component: dict keys as str/int, else repr() (as a ReprKey)."""
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    return ReprKey(short_repr(key, 200))


_SCALARS = (str, int, float, bool, bytes, type(None))


def _plain_tuple(value: Any, depth: int = 0) -> bool:  # bounded: three levels of 64 items
    """A small tuple of scalars (or of such tuples): a dict key like ('a', 1), a torch.Size."""
    return (isinstance(value, tuple) and len(value) <= 64 and depth < 3
            and all(isinstance(v, _SCALARS) or _plain_tuple(v, depth + 1) for v in value))


def short_repr(value: Any, limit: int = REPR_LIMIT) -> str:
    """repr() of a plain value, bounded in length and never recursing into deep containers."""
    if isinstance(value, (list, tuple, dict, set, frozenset)) and len(value) > 0 and not _plain_tuple(value):
        return f"<{type(value).__name__} of {plural(len(value), 'item')}>"
    try:
        text = repr(value)
    except Exception:  # a stub's repr cannot fail, but a huge int's can (digit limit)
        text = f"<{type(value).__name__}>"
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text) - limit} more characters)"
    return text


def type_name(value: Any) -> str:
    """The type shown for a value: builtin names, torch.dtype/Size/device, or a stub's class."""
    if value is None:
        return "None"
    if isinstance(value, StubObject):
        return value.cls
    if isinstance(value, GlobalRef):
        return "global"
    if isinstance(value, collections.OrderedDict):
        return "collections.OrderedDict"
    module = type(value).__module__
    name = type(value).__qualname__
    if module == "builtins":
        return name
    if module.startswith("ckptview."):
        return {"DtypeValue": "torch.dtype", "DeviceValue": "torch.device", "SizeValue": "torch.Size",
                "LayoutValue": "torch.layout", "NumpyArray": "numpy.ndarray", "Storage": "torch.storage",
                "NumpyDtype": "numpy.dtype"}.get(name, name)
    return f"{module}.{name}"


def _module_state(stub: StubObject) -> list[tuple[Any, Any]] | None:
    """Children of an nn.Module-like stub in state_dict order: parameters, buffers, submodules, rest."""
    state = stub.state
    if not isinstance(state, dict) or not any(k in state for k in _MODULE_PARTS):
        return None
    items: list[tuple[Any, Any]] = []
    non_persistent = state.get("_non_persistent_buffers_set")
    if not isinstance(non_persistent, (set, frozenset, list, tuple)):
        non_persistent = ()
    for part in _MODULE_PARTS:  # bounded: three parts, each a dict the tree's nodes are charged for
        sub = state.get(part)
        if isinstance(sub, dict):
            items.extend((k, v) for k, v in sub.items() if v is not None)
            if part != "_modules":
                _mark_module_part(sub, part, non_persistent)
    items.extend((k, v) for k, v in state.items() if isinstance(k, str) and not k.startswith("_"))
    return items


def _mark_module_part(members: dict[Any, Any], part: str, non_persistent: Any) -> None:
    """Say on each tensor of a module's `_parameters` or `_buffers` which it was (see `MODULE_PART`)."""
    for key, value in members.items():
        if isinstance(value, TensorInfo) and MODULE_PART not in value.extra:
            if part == "_parameters":
                role = "parameter"
            else:
                role = "non-persistent buffer" if _member(key, non_persistent) else "buffer"
            value.set_extra(MODULE_PART, role)


def _member(key: Any, collection: Any) -> bool:
    try:
        return key in collection
    except TypeError:  # an unhashable stub in a set the file built
        return False


def object_items(stub: StubObject) -> list[tuple[Any, Any]]:
    """The browsable content of a stub object: module members, its state, its dict/list items."""
    items = _module_state(stub)
    if items is None:
        items = []
        state = stub.state
        if isinstance(state, tuple) and len(state) == 2 and all(isinstance(s, (dict, type(None))) for s in state):
            for part in state:  # (__dict__, __slots__ state)
                if part:
                    items.extend(part.items())
        elif isinstance(state, dict):
            items.extend(state.items())
        elif stub.has_state:
            items.append(("state", state))
    items.extend(stub.items.items())
    items.extend(enumerate(stub.list_items))
    if not items and stub.args and any(_is_container_like(a) for a in stub.args):
        items.extend(("args", a) for a in [stub.args])
    return items


def _is_container_like(value: Any) -> bool:
    return isinstance(value, (dict, list, tuple, StubObject, TensorInfo, set, frozenset))


def build_tree(obj: Any, budget: Budget, *, max_depth: int = MAX_DEPTH, cut: list[DepthLimit] | None = None
               ) -> Node:
    """The Node tree of an unpickled object graph, each node charged to `budget`; `cut` (when given) receives a
    marker for every container nested too deep to be shown (so no caller walks the tree to find them)."""
    with paused_gc():
        return _build_tree(obj, budget, max_depth, cut)


def _build_tree(obj: Any, budget: Budget, max_depth: int, cut: list[DepthLimit] | None = None) -> Node:
    root = Node(key="", kind="value")
    active: set[int] = set()  # ids of the containers on the current path: a repeat is a cycle
    # Depth-first with an explicit stack; an int on the stack marks leaving that container.
    expanded: set[int] = set()  # ids of containers already shown once
    work: list[tuple[Node, Any, int, bool] | int] = [(root, obj, 0, False)]
    while work:  # each node charged as it is made
        item = work.pop()
        if isinstance(item, int):
            active.discard(item)
            continue
        node, value, depth, repeat = item
        scalar = _SCALAR_TYPES.get(type(value))
        if scalar is not None:  # most leaves: numbers and strings, no further questions
            node.type_name, node.value = scalar, value  # (kind is already "value")
            continue
        if isinstance(value, TensorInfo):
            node.kind, node.tensor = "tensor", value
            node.type_name = "Parameter" if value.is_parameter else "Tensor"
            continue
        node.type_name = type_name(value)
        children = _children(value)
        if children is None:
            node.kind, node.value = "value", value
            continue
        if id(value) in active:
            node.kind, node.value = "value", CycleRef(node.type_name)
            continue
        if depth >= max_depth:
            node.kind, node.value = "value", DepthLimit(node.type_name, max_depth)
            if cut is not None:
                cut.append(node.value)
            continue
        node.kind = _kind(value)
        repeat = repeat or id(value) in expanded
        expanded.add(id(value))
        active.add(id(value))
        work.append(id(value))
        budget.charge(NODE_COST * (len(children) + 1), REPEATED if repeat else "tree items")
        pending = []
        kids = []
        for key, child in children:
            if type(key) is not str and type(key) is not int:
                key = path_key(key)
            if type(child) is TensorInfo:  # most leaves of a state dict: made here, never stacked
                kids.append(Node(key, "tensor", "Parameter" if child.is_parameter else "Tensor", (), child,
                                 None, node))
                continue
            child_node = Node(key, "value", parent=node)
            kids.append(child_node)
            pending.append((child_node, child, depth + 1, repeat))
        node.children = kids
        work.extend(reversed(pending))
    return root


def release_tree(root: Node) -> None:
    """Unlink a tree no longer needed, so reference counting frees it at once.

    Nodes point at their parents: left alone, a 100,000-node tree waits for the cyclic collector, whose
    pass over millions of objects costs a listing a sizeable share of its time (at exit too).
    """
    stack = [root]
    while stack:  # bounded: each node of a tree built (and charged) once
        node = stack.pop()
        if node.children:
            stack.extend(node.children)
            node.children = ()
        node.parent = None


_SCALAR_TYPES = {int: "int", float: "float", str: "str", bool: "bool", type(None): "None", bytes: "bytes",
                 complex: "complex"}


class CycleRef:
    """A container that contains itself: shown once, the repeat is this marker."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<cycle: the enclosing {self.type_name}>"


class DepthLimit:
    """A container nested deeper than the tree shows: its content is cut, this marker says so."""

    def __init__(self, type_name: str, depth: int) -> None:
        self.type_name, self.depth = type_name, depth

    def __repr__(self) -> str:
        return f"<{self.type_name} nested deeper than {self.depth} levels: not shown>"


def _kind(value: Any) -> NodeKind:
    if isinstance(value, dict):
        return "dict"
    if isinstance(value, list):
        return "list"
    if isinstance(value, tuple):
        return "tuple"
    if isinstance(value, (set, frozenset)):
        return "set"
    return "object"


def _children(value: Any) -> list[tuple[Any, Any]] | None:
    """(key, child) pairs of a container, or None for a leaf value."""
    if isinstance(value, NumpyArray):
        return list(enumerate(value.items)) if value.items is not None else None
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, SizeValue):
        return None
    if isinstance(value, (list, tuple)):
        return list(enumerate(value))
    if isinstance(value, (set, frozenset)):
        return list(enumerate(value))
    if isinstance(value, StubObject):
        items = object_items(value)
        return items if items else None
    return None

"""What TorchScript code's names stand for while it is read as a graph (never run): the values of the evaluator.

A tensor is only where it comes from (`Flow`: the nodes that make it, the checkpoint keys it is); a module is
its path in the archive's module tree and its class; everything the graph does not need (ints, strings,
devices) is one `UNKNOWN`. Literals of the code itself stay `Const` so that `if inplace:` over a literal
`False` takes one branch, as torch's inliner folds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptview.core.checkpoint import Node


@dataclass(frozen=True)
class Flow:
    """Tensor data: the ids of the nodes that may have made it, and the checkpoint keys it may be."""

    ids: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()


@dataclass(eq=False)
class Seq:
    """A list or tuple the code built (`annotate(List[Tensor], [])`, `(a, b)`); `torch.append` adds to it."""

    items: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Mod:
    """A module of the archive: its dotted path ("" at the top), its node of the tree, its class."""

    path: str
    node: Node | None
    cls: str

    def child_path(self, name: str) -> str:
        """The path of its attribute `name`."""
        return f"{self.path}.{name}" if self.path else name


@dataclass(frozen=True)
class Method:
    """`(module).name`, not yet called."""

    mod: Mod
    name: str


@dataclass(frozen=True)
class Dotted:
    """A global name of the code: `torch.linear`, `ops.prim.NumToTensor`, `__torch__.torch.nn.functional.relu`,
    a builtin (`getattr`) or a type (`List[Tensor]`)."""

    name: str


@dataclass(frozen=True)
class Const:
    """A value written in the code (a literal, a `Final` class constant)."""

    value: Any


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()  # a value the graph does not follow (an int computed at run time, a device)

MAX_SEQ = 100_000  # items one list built by the code keeps (appends in a loop are read once anyway)


def data(value: Any, depth: int = 0) -> tuple[list[str], list[str]]:
    """(node ids, checkpoint keys) a value carries, lists and tuples flattened, in order."""
    if isinstance(value, Flow):
        return list(value.ids), list(value.keys)
    ids: list[str] = []
    keys: list[str] = []
    if isinstance(value, Seq) and depth < 32:
        for item in value.items:
            more_ids, more_keys = data(item, depth + 1)
            ids += more_ids
            keys += more_keys
    return ids, keys


def has_data(value: Any) -> bool:
    """Whether a value carries tensor data."""
    ids, keys = data(value)
    return bool(ids or keys)


def flow_of(values: list[Any]) -> Flow:
    """One Flow of everything the values carry (duplicates dropped, order kept)."""
    ids: list[str] = []
    keys: list[str] = []
    for value in values:
        more_ids, more_keys = data(value)
        ids += more_ids
        keys += more_keys
    return Flow(tuple(dict.fromkeys(ids)), tuple(dict.fromkeys(keys)))


def merge(a: Any, b: Any) -> Any:
    """The value of a name after an `if` whose branches gave it `a` and `b`."""
    if a is b or (type(a) is type(b) and not isinstance(a, Seq) and a == b):
        return a
    if has_data(a) or has_data(b):
        return flow_of([a, b])
    return UNKNOWN

"""What TorchScript code's names stand for while it is read as a graph (never run): the values of the evaluator.

A tensor is only where it comes from (`Flow`: the nodes that make it, the checkpoint keys it is); a module is
its path in the archive's module tree and its class; everything the graph does not need (ints, strings,
devices) is one `UNKNOWN`. Literals stay `Const` so that `if inplace:` over a literal `False` takes one
branch where torch's inliner folds it (see `Const.folds`).

Lists share: `[a, a]` holds `a` twice, not a copy of it, so thirty lines of `b = [a, a]` are thirty small
lists, and what a list carries is computed once per list (`Flows`, memoised until a list changes), never
by unfolding it: unfolded, those thirty lines are 2**31 items.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Node


@dataclass(frozen=True)
class Flow:
    """Tensor data: the ids of the nodes that may have made it, and the checkpoint keys it may be."""

    ids: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()


NO_DATA = Flow()


@dataclass(eq=False)
class Seq:
    """A list or tuple the code built (`annotate(List[Tensor], [])`, `(a, b)`); `torch.append` adds to it
    (through `Flows.extend`, which forgets what lists carried)."""

    items: list[Any] = field(default_factory=list)
    flow: Flow = field(default=NO_DATA, repr=False)
    """What it carries, valid while `epoch` is the walk's."""
    epoch: int = field(default=-1, repr=False)


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
    """A value written in the code (a literal, a `Final` class constant).

    `folds`: whether an `if` over it is folded as torch's graph folds it. torch inlines every callee's
    *optimized* graph, whose constants are propagated, into the top `forward`'s graph, which is not: a literal
    written in the top `forward`, or handed from there to a callee, is a constant no pass folds (`F.relu(x)`
    called by the top module keeps both `relu_` and `relu`); one written in a callee folds there."""

    value: Any
    folds: bool = True


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()  # a value the graph does not follow (an int computed at run time, a device)


class Flows:
    """What values carry (`flow`), memoised per list and charged to the walk's budget: every list is unfolded
    once per change of any list, its items and what it carries paid for."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.epoch = 0

    def changed(self) -> None:
        """A list changed: what every list carries is computed again when next asked."""
        self.epoch += 1

    def extend(self, seq: Seq, items: list[Any]) -> None:
        """`torch.append` / `extend` / `insert`: items added to a list the code built."""
        self.budget.charge(len(items) + 1, "list items added")
        seq.items.extend(items)
        self.changed()

    def flow(self, value: Any) -> Flow:
        """The node ids and checkpoint keys a value carries, lists flattened (each id and key once, in order)."""
        if type(value) is Flow:
            return value
        if type(value) is not Seq:
            return NO_DATA
        if value.epoch == self.epoch:
            return value.flow
        return self._unfold(value)

    def _unfold(self, top: Seq) -> Flow:
        """Post-order over the lists below `top` not yet known this epoch (an explicit stack: lists nest as
        deep as the code makes them); a list that holds itself carries what its other items carry."""
        budget, epoch = self.budget, self.epoch
        open_lists = {id(top)}
        stack: list[tuple[Seq, int]] = [(top, 0)]
        while stack:
            seq, i = stack[-1]
            items = seq.items
            if i < len(items):
                stack[-1] = (seq, i + 1)
                item = items[i]
                if type(item) is Seq and item.epoch != epoch and id(item) not in open_lists:
                    open_lists.add(id(item))
                    stack.append((item, 0))
                continue
            stack.pop()
            ids: dict[str, None] = {}
            keys: dict[str, None] = {}
            for item in items:
                carried = item if type(item) is Flow else item.flow if type(item) is Seq and item.epoch == epoch \
                    else None
                if carried is not None:
                    ids.update(dict.fromkeys(carried.ids))
                    keys.update(dict.fromkeys(carried.keys))
                    budget.charge(len(carried.ids) + len(carried.keys), "list items unfolded")
            budget.charge(len(items) + 1, "list items unfolded")
            seq.flow, seq.epoch = (Flow(tuple(ids), tuple(keys)) if ids or keys else NO_DATA), epoch
        return top.flow

    def has_data(self, value: Any) -> bool:
        """Whether a value carries tensor data."""
        carried = self.flow(value)
        return bool(carried.ids or carried.keys)

    def of(self, values: list[Any]) -> Flow:
        """One Flow of everything the values carry (each id and key once, order kept)."""
        if len(values) == 1:
            return self.flow(values[0])
        ids: dict[str, None] = {}
        keys: dict[str, None] = {}
        for value in values:
            carried = self.flow(value)
            ids.update(dict.fromkeys(carried.ids))
            keys.update(dict.fromkeys(carried.keys))
            self.budget.charge(len(carried.ids) + len(carried.keys) + 1, "values joined")
        return Flow(tuple(ids), tuple(keys)) if ids or keys else NO_DATA

    def merge(self, a: Any, b: Any) -> Any:
        """The value of a name after an `if` whose branches gave it `a` and `b`."""
        if a is b or (type(a) is type(b) and not isinstance(a, Seq) and a == b):
            return a
        if self.has_data(a) or self.has_data(b):
            return self.of([a, b])
        return UNKNOWN

"""Align an optimizer's param groups with the model's tensors: one search over all groups (Qt-free, no torch).

torch numbers an optimizer's parameters group after group; within a group they follow the order the
parameters were given in, which is the model's order (``named_parameters()``) for every optimizer
builder we know of (decay / no-decay splits, timm's layer decay, Lightning, HF Trainer). Groups may
interleave in model order, so the problem is: give every parameter (group ``g``, slot ``k``) a distinct
model tensor such that each group's tensors are in model order and every parameter whose state tells its
shape gets a tensor of that shape. Model tensors that no parameter takes (buffers, frozen layers left out
of the optimizer) are skipped.

The search walks the model tensors in order; its state is (tensor index, how many parameters of each
group are placed). States proven to lead nowhere are remembered, so the work is bounded by the number
of distinct states; a state whose groups cannot all place their next parameter in the tensors left
(Hall's condition on their latest possible positions) is cut at once; :data:`STATE_LIMIT` and
:data:`WORK_LIMIT` bound the rest (a hostile file cannot make opening slow). It stops at the second complete alignment: one means
the mapping is proven unique. Among the alignments, the one returned is the first in this preference,
tensor by tensor: skip a tensor (frozen layers are usually first), else give it to the lowest-numbered
group it fits (groups are built in order of first appearance), a parameter without state (unknown shape)
preferably to a group whose known shapes have the tensor's number of dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass

Shape = tuple[int, ...]
STATE_LIMIT = 200_000  # distinct search states; past it the answer found so far is not proven unique
WORK_LIMIT = 1_000_000  # group passes (checks x param groups): about a second on a busy machine


@dataclass
class GroupAlignment:
    """The search's answer: the tensor index of each parameter (groups concatenated), and how sure it is."""

    picked: list[int] | None
    solutions: int  # 0, 1 or 2 (two or more)
    complete: bool  # False when the state limit stopped the search before it could tell
    states: int = 0

    @property
    def unique(self) -> bool:
        """True when exactly one alignment exists (and the search could prove it)."""
        return self.complete and self.solutions == 1


def _latest_slots(hints: list[Shape | None], shapes: list[Shape]) -> list[int]:
    """For each slot of one group, the last tensor index it may take so that the group's later slots fit."""
    out = [0] * len(hints)
    pos = len(shapes)
    for k in range(len(hints) - 1, -1, -1):
        pos -= 1
        hint = hints[k]
        while pos >= 0 and hint is not None and shapes[pos] != hint:
            pos -= 1
        out[k] = pos
    return out


class _Frame:
    __slots__ = ("j", "counts", "options", "next", "found")

    def __init__(self, j: int, counts: tuple[int, ...], options: list[int]) -> None:
        self.j, self.counts, self.options, self.next, self.found = j, counts, options, 0, False


def align_groups(groups: list[list[Shape | None]], shapes: list[Shape],
                 limit: int = STATE_LIMIT, work_limit: int = WORK_LIMIT) -> GroupAlignment:
    """Place every group's parameters (shape hints, None = unknown) on ``shapes`` in order; see the module doc."""
    sizes = [len(g) for g in groups]
    total, m = sum(sizes), len(shapes)
    offsets = [sum(sizes[:g]) for g in range(len(groups))]
    if total == 0:
        return GroupAlignment([], 1, True)
    if total > m:
        return GroupAlignment(None, 0, True)
    latest = [_latest_slots(g, shapes) for g in groups]
    if any(s and lat[0] < 0 for s, lat in zip(sizes, latest, strict=True)):
        return GroupAlignment(None, 0, True)
    ndims = [{len(h) for h in g if h is not None} for g in groups]
    live = [g for g in range(len(groups)) if sizes[g]]

    def viable(j: int, counts: tuple[int, ...], remaining: int) -> bool:
        if m - j < remaining:
            return False
        # Hall's condition on each group's next slot: the i-th earliest deadline must leave room for i slots.
        deadlines = sorted(latest[g][counts[g]] for g in live if counts[g] < sizes[g])
        return all(d >= j + i for i, d in enumerate(deadlines))

    def options(j: int, counts: tuple[int, ...], remaining: int) -> list[int]:
        shape = shapes[j]
        first: list[int] = [-1] if m - j - 1 >= remaining else []  # -1: skip this tensor
        second: list[int] = []
        for g in live:
            k = counts[g]
            if k >= sizes[g]:
                continue
            hint = groups[g][k]
            if hint is None:
                (first if not ndims[g] or len(shape) in ndims[g] else second).append(g)
            elif hint == shape:
                first.append(g)
        return first + second

    if not viable(0, tuple(0 for _ in groups), total):
        return GroupAlignment(None, 0, True)
    start = tuple(0 for _ in groups)
    dead: set[tuple[int, tuple[int, ...]]] = set()
    good: set[tuple[int, tuple[int, ...]]] = set()
    stack = [_Frame(0, start, options(0, start, total))]
    solutions, states, picked, work = 0, 1, None, 0
    while stack:
        frame = stack[-1]
        if frame.next >= len(frame.options):
            stack.pop()
            key = (frame.j, frame.counts)
            if frame.found:
                good.add(key)
                if stack:
                    stack[-1].found = True
            else:
                dead.add(key)
            continue
        choice = frame.options[frame.next]
        frame.next += 1
        counts = frame.counts
        if choice >= 0:
            counts = counts[:choice] + (counts[choice] + 1,) + counts[choice + 1:]
        j = frame.j + 1
        remaining = total - sum(counts)
        key = (j, counts)
        if remaining == 0 or key in good:
            solutions += 1
            frame.found = True
            if picked is None:
                picked = _read_path(stack, offsets, sizes)
            if solutions >= 2:
                return GroupAlignment(picked, 2, True, states)
            continue
        if key in dead:
            continue
        work += len(live)  # a viability check and a state's options each cost a pass over the groups
        if not viable(j, counts, remaining):
            dead.add(key)
            continue
        states += 1
        if states > limit or work > work_limit:
            return GroupAlignment(picked, solutions, False, states)
        stack.append(_Frame(j, counts, options(j, counts, remaining)))
    return GroupAlignment(picked, solutions, True, states)


def _read_path(stack: list[_Frame], offsets: list[int], sizes: list[int]) -> list[int] | None:
    """The tensor index of each parameter along the current search path (which just placed the last one)."""
    picked = [-1] * sum(sizes)
    for frame in stack:
        choice = frame.options[frame.next - 1]
        if choice >= 0:
            picked[offsets[choice] + frame.counts[choice]] = frame.j
    return picked

"""The scalars one checkpoint holds about its run, read from its inert tree (Qt-free, no torch).

Its training facts (``epoch``, ``global_step``, ``loss``, a ``metrics`` dict, Lightning's callback state:
the Training panel's facts, :func:`ckptview.core.inspect.training.training_summary`), each optimizer's
``lr`` per param group, each LR scheduler's ``last_lr``, and a Lightning ``ModelCheckpoint``'s monitored
metric (its ``current_score``, named by what it monitors) and best checkpoint. Numbers only: a one-element
tensor (a saved ``loss``) is read, a few bytes. Of a training folder only the learning rates: its
``trainer_state.json`` is left to :mod:`ckptview.core.series.trainer_state`, which reads its whole history.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Node
from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.inspect.optimizer import is_optimizer_node, scalar_value
from ckptview.core.inspect.training import find_schedulers, short_fact_keys, training_summary
from ckptview.core.read.formats import training_folder
from ckptview.core.series.discover import TRAINER_STATE
from ckptview.core.series.logged import BestCheckpoint

LR = "lr"
LAST_LR = "last_lr"
_CALLBACK = "ModelCheckpoint"


def checkpoint_scalars(ckpt: Checkpoint, budget: Budget | None = None) -> tuple[dict[str, float], BestCheckpoint | None]:
    """(name -> number, the best checkpoint its state names) of `ckpt` (see the module docstring)."""
    budget = budget if budget is not None else Budget.for_stored(ckpt.file_size, f"the scalars of {ckpt.path}")
    facts: list[tuple[str, float]] = []
    # A training folder's facts are its trainer state's (read whole elsewhere), its model config's and its
    # scheduler file's fields: only its optimizers' and schedulers' learning rates are its own.
    summary = training_summary(ckpt, read_scalars=True).scalars if ckpt.format != training_folder.NAME else []
    for name, value in summary:
        budget.charge(1, "training facts")
        number = _number(value)
        # log.*: trainer_state's, read whole elsewhere; a ModelCheckpoint's scores: named by what it monitors.
        if number is not None and not name.startswith(("log.", f"callbacks.{_CALLBACK}")):
            facts.append((name, number))
    names = short_fact_keys([n for n, _ in facts])
    out: dict[str, float] = {}
    for short, (_, number) in zip(names, facts, strict=True):
        out.setdefault(short, number)
    best = _monitored(ckpt.root, out, budget)
    for name, number in _learning_rates(ckpt.root, budget):
        out.setdefault(name, number)
    return out, best


def ref_scalars(ckpt: Checkpoint) -> tuple[dict[str, float], dict[str, Any] | None]:
    """`checkpoint_scalars` as a run's `CheckpointRef` keeps them (the best checkpoint as a dict); none
    when they cannot be read: a checkpoint whose facts are unreadable is still one of the run."""
    try:
        values, best = checkpoint_scalars(ckpt)
    except Cancelled:
        raise
    except (CheckpointError, OSError, ValueError, RecursionError):
        return {}, None
    return values, dataclasses.asdict(best) if best is not None else None


def _learning_rates(root: Node, budget: Budget) -> list[tuple[str, float]]:
    """("lr", ...) of every optimizer's param groups, then ("last_lr", ...) of every scheduler."""
    optimizers: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        budget.charge(1, "nodes")
        if is_optimizer_node(node):
            optimizers.append(node)
            continue  # nothing below an optimizer is another one
        if node.key == TRAINER_STATE and node.parent is root:
            continue
        stack.extend(reversed([c for c in node.children if c.children]))
    out: list[tuple[str, float]] = []
    for opt in optimizers:
        groups = next(c for c in opt.children if c.key == "param_groups")
        for g, group in enumerate(groups.children):
            lr = next((c for c in group.children if c.key == "lr"), None)
            number = _node_number(lr) if lr is not None else None
            if number is not None:
                out.append((_suffixed(LR, opt.name if len(optimizers) > 1 else "", g), number))
    schedulers = find_schedulers(root)
    for scheduler in schedulers:
        budget.charge(1 + len(scheduler.fields), "scheduler fields")
        last = dict(scheduler.fields).get(LAST_LR)
        values = last if isinstance(last, list) else [last]
        for g, value in enumerate(values):
            number = _number(value)
            if number is not None:
                out.append((_suffixed(LAST_LR, scheduler.name if len(schedulers) > 1 else "", g), number))
    return out


def _suffixed(name: str, owner: str, group: int) -> str:
    """"lr", "lr (group 1)", "lr (optimizer_states.1, group 0)"."""
    parts = [owner] if owner else []
    if group or owner:
        parts.append(f"group {group}")
    return f"{name} ({', '.join(parts)})" if parts else name


def _monitored(root: Node, out: dict[str, float], budget: Budget) -> BestCheckpoint | None:
    """A Lightning ModelCheckpoint's monitored metric at this checkpoint (its ``current_score``, named by what
    it monitors) into `out`, and the best checkpoint it names."""
    callbacks = next((c for c in root.children if c.key == "callbacks" and c.kind in ("dict", "object")), None)
    if callbacks is None:
        return None
    best: BestCheckpoint | None = None
    for state in callbacks.children:
        budget.charge(1 + len(state.children), "callback state")
        if not str(state.key).startswith(_CALLBACK):
            continue
        fields = {str(c.key): c for c in state.children}
        monitor = fields.get("monitor")
        metric = monitor.value if monitor is not None and isinstance(monitor.value, str) else None
        if not metric:
            continue
        current = _node_number(fields["current_score"]) if "current_score" in fields else None
        if current is not None:
            out.setdefault(metric, current)
        score = _node_number(fields["best_model_score"]) if "best_model_score" in fields else None
        path_node = fields.get("best_model_path")
        path = path_node.value if path_node is not None and isinstance(path_node.value, str) and path_node.value else None
        if best is None and (score is not None or path is not None):
            best = BestCheckpoint(f"{_CALLBACK} state", metric, score, path)
    return best


def _node_number(node: Node) -> float | None:
    if node.kind == "value":
        return _number(node.value)
    if node.kind == "tensor" and node.tensor is not None and node.tensor.numel == 1 and not node.tensor.broken:
        return _number(scalar_value(node.tensor))
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf

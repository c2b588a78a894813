"""A Hugging Face Trainer's ``trainer_state.json`` as a run's log: every value of its ``log_history`` (loss,
learning_rate, grad_norm, eval metrics, ...) at its logging step, and the best checkpoint (Qt-free).

Each ``checkpoint-N/`` folder holds the state as it was at step N, its history up to then; the run's
curves are those of all the states read, a later state's point winning where two give the same step.
JSON only (never a pickle), read whole up to `MAX_BYTES` and charged to the budget of its bytes per record
and value.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.jobs import CancelToken
from ckptview.core.read.bytes.fs import FileSystem
from ckptview.core.series.discover import MAX_TRAINER_STATE_BYTES, TRAINER_STATE
from ckptview.core.series.logged import BestCheckpoint, ScalarCurve

MAX_BYTES = MAX_TRAINER_STATE_BYTES
# Keys of a log_history entry that place it, not values logged at it.
_PLACE_KEYS = frozenset({"step", "epoch"})


@dataclass
class TrainerState:
    """What one trainer_state.json says: its global step, points per logged key, the best checkpoint."""

    path: str
    global_step: int | None = None
    points: dict[str, dict[int, tuple[float | None, float]]] = field(default_factory=dict)  # key -> step -> (epoch, v)
    records: int = 0
    best: BestCheckpoint | None = None


class TrainerStateError(ValueError):
    """A trainer_state.json that cannot be read as one (too large, not JSON, not an object)."""


def read_trainer_state(path: str, fs: FileSystem, token: CancelToken | None = None) -> TrainerState:
    """The log of the trainer_state.json at `path` (read through `fs`); TrainerStateError when it is no
    such file, CheckpointError when it cannot be read."""
    size = fs.getsize(path)
    if size > MAX_BYTES:
        raise TrainerStateError(f"{size:,} bytes, more than the {MAX_BYTES:,} read of a trainer state")
    budget = Budget.for_stored(size, f"{TRAINER_STATE} {path}", cancel=token)
    with fs.open_regular(path) as fh:
        raw = fh.read(MAX_BYTES + 1)
    budget.charge(len(raw), "bytes parsed")
    try:
        state = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TrainerStateError(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(state, dict):
        raise TrainerStateError("not a JSON object")
    out = TrainerState(path, global_step=_whole(state.get("global_step")))
    history = state.get("log_history")
    if isinstance(history, list):
        for entry in history:
            budget.charge(1, "log records")
            if not isinstance(entry, dict):
                continue
            step = _whole(entry.get("step"))
            if step is None:
                continue
            out.records += 1
            epoch = _number(entry.get("epoch"))
            for key, value in entry.items():
                budget.charge(1, "logged values")
                number = _number(value)
                if key in _PLACE_KEYS or number is None:
                    continue
                out.points.setdefault(str(key), {})[step] = (epoch, number)
            if epoch is not None:
                out.points.setdefault("epoch", {})[step] = (epoch, epoch)
    best = state.get("best_model_checkpoint")
    metric = _number(state.get("best_metric"))
    if isinstance(best, str) or metric is not None:
        out.best = BestCheckpoint(TRAINER_STATE, None, metric, best if isinstance(best, str) else None,
                                  _whole(state.get("best_global_step")))
    return out


def merge_states(states: list[TrainerState], source: str = TRAINER_STATE) -> tuple[list[ScalarCurve],
                                                                                   BestCheckpoint | None]:
    """The run's curves from every state read (a later global step's point wins at a step both give), in
    the order the keys first appear, and the best checkpoint of the latest state that names one."""
    ordered = sorted(states, key=lambda s: (s.global_step is None, s.global_step or 0))
    merged: dict[str, dict[int, tuple[float | None, float]]] = {}
    for state in ordered:
        for key, points in state.points.items():
            merged.setdefault(key, {}).update(points)
    curves = []
    for key, points in merged.items():
        curve = ScalarCurve(key, source)
        for step in sorted(points):
            epoch, value = points[step]
            curve.add(step, epoch, value)
        curves.append(curve)
    best = next((s.best for s in reversed(ordered) if s.best is not None), None)
    return curves, best


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer beyond a float's range
        return math.inf if value > 0 else -math.inf


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None

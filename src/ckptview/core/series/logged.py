"""What a training run logged beside its weights, as plain data: scalar curves, the best checkpoint, the
hyper-parameters of its logger, and the log files they came from (Qt-free, no torch).

A curve is one scalar over the run's steps from one source: dense curves logged at every logging step
(``trainer_state.json``'s ``log_history``, TensorBoard event files) and curves of one value per checkpoint
(its ``loss``, its optimizer's ``lr``, ...). Each point keeps the step (and epoch, where the source says)
it was logged at; `place` puts the points on the run's axis, the one the tensor figures are drawn on.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

LOGGED = "logged"  # a curve written by a logger at its own steps
CHECKPOINT = "checkpoint"  # one value per checkpoint, read from the checkpoint itself


@dataclass
class ScalarCurve:
    """One scalar over the run, from one source: parallel lists, one entry per point in step order."""

    name: str
    source: str  # "trainer_state.json", "events: lightning_logs/version_0", "checkpoint"
    kind: str = LOGGED
    steps: list[int | None] = field(default_factory=list)
    epochs: list[float | None] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)  # a checkpoint curve: the run index of each point

    def add(self, step: int | None, epoch: float | None, value: float, checkpoint: int | None = None) -> None:
        """One more point (of checkpoint `checkpoint` of the run, for a checkpoint curve)."""
        self.steps.append(step)
        self.epochs.append(epoch)
        self.values.append(value)
        if checkpoint is not None:
            self.checkpoints.append(checkpoint)

    def __len__(self) -> int:
        return len(self.values)


@dataclass
class BestCheckpoint:
    """The checkpoint a trainer kept as its best, as its state says (HF ``best_model_checkpoint``, Lightning's
    ``ModelCheckpoint`` ``best_model_path``)."""

    source: str
    metric: str | None = None
    value: float | None = None
    path: str | None = None  # as the trainer wrote it (possibly another machine's path)
    step: int | None = None


@dataclass
class LogFile:
    """A file the run's log was read from: how many records it gave, and what went wrong (if anything)."""

    path: str
    kind: str  # "trainer_state" | "tfevents" | "hparams" | "folders" (the search itself was cut short)
    records: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``log_files`` entry of ``series --json``."""
        return {"path": self.path, "kind": self.kind, "records": self.records, "error": self.error}


@dataclass
class RunLog:
    """Everything a run logged outside its checkpoints' tensors."""

    curves: list[ScalarCurve] = field(default_factory=list)
    best: BestCheckpoint | None = None
    hyper_parameters: list[tuple[str, str, str]] = field(default_factory=list)  # (name, value text, source)
    files: list[LogFile] = field(default_factory=list)

    def curve(self, name: str, source: str | None = None) -> ScalarCurve | None:
        """The first curve called `name` (from `source` when given)."""
        return next((c for c in self.curves if c.name == name and (source is None or c.source == source)), None)


@dataclass
class Placement:
    """A curve on the run's axis: each point's x (None where it has no place there) and the value it had at
    each checkpoint (the last point at or before the checkpoint's x; None before the first)."""

    x: list[float | None]
    at_checkpoints: list[float | None]


def place(curve: ScalarCurve, axis: str, checkpoint_x: list[float]) -> Placement:
    """`curve`'s points on the run's axis ("step", "epoch" or "name": checkpoint order), where each
    checkpoint sits at `checkpoint_x`.

    A checkpoint curve's points sit where their checkpoints sit; a logged curve's at their step (axis
    "step") or epoch (axis "epoch"); on a run ordered by name a logged curve has no place."""
    xs: list[float | None]
    if curve.kind == CHECKPOINT:
        xs = [checkpoint_x[t] if 0 <= t < len(checkpoint_x) else None for t in curve.checkpoints]
    elif axis == "step":
        xs = [float(s) if s is not None else None for s in curve.steps]
    elif axis == "epoch":
        xs = [float(e) if e is not None else None for e in curve.epochs]
    else:
        xs = [None] * len(curve)
    # The value at each checkpoint: the last point placed at or before it (points sorted by x, stable).
    placed = sorted(((x, i) for i, x in enumerate(xs) if x is not None), key=lambda p: p[0])
    keys = [x for x, _ in placed]
    at: list[float | None] = []
    for cx in checkpoint_x:
        k = bisect.bisect_right(keys, cx)
        at.append(curve.values[placed[k - 1][1]] if k else None)
    return Placement(xs, at)


def json_number(v: float | None) -> float | None:
    """A figure for JSON: None for NaN and infinities (the contract writes no NaN)."""
    return v if v is None or math.isfinite(v) else None


def curve_json(curve: ScalarCurve, placement: Placement) -> dict[str, Any]:
    """The ``scalars`` entry of ``series --json``."""
    return {"name": curve.name, "source": curve.source, "kind": curve.kind, "steps": list(curve.steps),
            "epochs": [json_number(e) for e in curve.epochs], "values": [json_number(v) for v in curve.values],
            "x": list(placement.x), "at_checkpoints": [json_number(v) for v in placement.at_checkpoints]}

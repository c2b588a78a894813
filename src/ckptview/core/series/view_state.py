"""What a series view shows, apart from how: its phase, the run read so far, the scalar curves chosen for its
plots and the checkpoint a chosen step selects (Qt-free; the window's series tab draws it, tests drive it
without Qt).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from ckptview.core.series.findings import is_loss, is_rate
from ckptview.core.series.logged import CHECKPOINT, Placement, ScalarCurve, place
from ckptview.core.series.model import SeriesResult
from ckptview.core.units import figure

METRICS = "metrics"  # the plot of losses and other metrics
RATES = "rates"  # the plot of learning rates: their own scale
MAX_DEFAULT = 4  # curves drawn when a run opens, per plot


class Phase(str, enum.Enum):
    """Where the reading of a run stands (equal to its value: `Phase.READY == "ready"`)."""

    LOADING = "loading"
    READY = "ready"
    ERROR = "error"
    CANCELLED = "cancelled"


@dataclass
class ScalarLine:
    """One curve as a plot draws it: where its points sit on the run's axis, and its marks at checkpoints."""

    key: str  # "name (source)": how the curve is told apart in a menu and a legend
    curve: ScalarCurve
    placement: Placement
    plot: str  # METRICS | RATES

    def points(self) -> tuple[list[float], list[float]]:
        """(x, value) of the points that have a place on the axis, in x order."""
        pairs = sorted((x, v) for x, v in zip(self.placement.x, self.curve.values, strict=True) if x is not None)
        return [x for x, _ in pairs], [v for _, v in pairs]

    def marks(self, checkpoint_x: list[float]) -> tuple[list[float], list[float]]:
        """(x, value) at each checkpoint where the curve has a value there (its checkpoint steps marked)."""
        found = [(x, v) for x, v in zip(checkpoint_x, self.placement.at_checkpoints, strict=True) if v is not None]
        return [x for x, _ in found], [v for _, v in found]


def _same_points(a: ScalarLine, b: ScalarLine) -> bool:
    """Two curves with the same points (values equal to float32's precision: an event file keeps float32)."""
    pa, pb = a.points(), b.points()
    return pa[0] == pb[0] and all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-12) for x, y in zip(pa[1], pb[1], strict=True))


@dataclass
class SeriesViewState:
    """A series view's state: its phase (`Phase`), the result, the error, the curves chosen, the checkpoint
    chosen."""

    phase: Phase = Phase.LOADING
    result: SeriesResult | None = None
    error: str | None = None
    chosen: set[str] = field(default_factory=set)  # keys of the curves drawn
    picked: bool = False  # the user chose curves: keep them when the run is read again
    checkpoint: int | None = None  # the checkpoint a chosen step selected

    # --- the phase ------------------------------------------------------------------------------------
    def planned(self, result: SeriesResult) -> None:
        """The run's checkpoints are known (figures pending)."""
        self.result = result
        self.phase = Phase.LOADING
        self._default_curves()

    def finished(self, result: SeriesResult) -> None:
        """Every checkpoint was read (or the run was read again by a watch)."""
        self.result = result
        self.phase = Phase.READY
        self.error = None
        self._default_curves()

    def failed(self, message: str) -> None:
        """The run could not be read."""
        self.phase = Phase.ERROR
        self.error = message

    def cancelled(self) -> None:
        """The reading was stopped (what was read stays shown)."""
        self.phase = Phase.CANCELLED

    # --- the scalars ----------------------------------------------------------------------------------
    def lines(self) -> list[ScalarLine]:
        """Every curve of the run as a plot would draw it, losses and metrics first, learning rates apart."""
        r = self.result
        if r is None:
            return []
        x = r.x_values()
        out = []
        curves = r.scalar_curves()
        names = [c.name for c in curves]
        for c in curves:
            # The source only where two curves share a name ("loss (trainer_state.json)").
            key = f"{c.name} ({c.source})" if names.count(c.name) > 1 else c.name
            out.append(ScalarLine(key, c, place(c, r.order_by, x), RATES if is_rate(c.name) else METRICS))
        return out

    def drawn(self) -> list[ScalarLine]:
        """The chosen curves that have a point on the run's axis."""
        return [line for line in self.lines() if line.key in self.chosen and any(v is not None for v in line.placement.x)]

    def choose_curve(self, key: str, on: bool) -> None:
        """Draw (or stop drawing) the curve called `key`; the choice outlives a new reading of the run."""
        self.picked = True
        (self.chosen.add if on else self.chosen.discard)(key)

    def _default_curves(self) -> None:
        """Unless the user chose: every loss and learning rate (logged curves before a checkpoint's own),
        `MAX_DEFAULT` of each at most."""
        if self.picked:
            return
        lines = self.lines()
        chosen: set[str] = set()
        for wanted in (is_loss, is_rate):
            found = [line for line in lines if wanted(line.curve.name) and any(v is not None for v in line.placement.x)]
            found.sort(key=lambda line: line.curve.kind == CHECKPOINT)
            kept: list[ScalarLine] = []
            for line in found:
                # One of two sources that logged the same values (trainer_state.json and its event file,
                # two param groups of one lr): the second would only hide under the first.
                if len(kept) < MAX_DEFAULT and not any(_same_points(line, k) for k in kept):
                    kept.append(line)
            chosen.update(line.key for line in kept)
        self.chosen = chosen

    # --- a chosen step --------------------------------------------------------------------------------
    def choose_step(self, x: float) -> int | None:
        """Select the checkpoint nearest `x` on the run's axis (None when the run has none read)."""
        r = self.result
        if r is None or not r.checkpoints:
            return None
        xs = r.x_values()
        self.checkpoint = min(range(len(xs)), key=lambda t: (abs(xs[t] - x), t))
        return self.checkpoint

    def checkpoint_text(self, t: int) -> str:
        """What the view says of checkpoint `t`: where it sits, its name and its drawn curves' values there."""
        r = self.result
        if r is None or not 0 <= t < len(r.checkpoints):
            return ""
        parts = [f"{r.label(t)}: {r.checkpoints[t].file_name}"]
        for line in self.drawn():
            value = line.placement.at_checkpoints[t]
            if value is not None:
                parts.append(f"{line.key} {figure(value)}")
        return " · ".join(parts)

    def axis_label(self) -> str:
        """The run's axis as a plot names it."""
        r = self.result
        return {"step": "step", "epoch": "epoch"}.get(r.order_by if r is not None else "", "checkpoint")

    def column_label(self, t: int) -> str:
        """How checkpoint `t` heads a column: its step, epoch, or name."""
        assert self.result is not None
        ref = self.result.checkpoints[t]
        value = ref.position.step if self.result.order_by == "step" else (
            ref.position.epoch if self.result.order_by == "epoch" else None)
        return str(value) if value is not None else ref.file_name

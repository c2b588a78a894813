"""Figures of the weights on the graph: each box's figure from the tensors it reads, and the colour scale.

A box reads the checkpoint keys of its node (`GraphNode.params`) or, for a collapsed module, of every node
inside it. Its figure combines the figures of those tensors as the same figure of their concatenation would
be: the L2 norm is the root of the summed squares, max |x| the largest, NaN/Inf the sum, spectral alpha the
mean over the matrices that have a fit; a relative change (a comparison, or a run's update ratio at a step)
is ||B - A|| / ||A|| over all of them. Figures come from the checkpoint's `Analysis` (read once per tensor,
shared with the panels), in a worker, for the boxes shown only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptview.core import units

if TYPE_CHECKING:
    from ckptview.core.compare.diff import TensorDiff
    from ckptview.core.series.model import TensorSeries


# A colour-blind-safe sequential map (viridis' stops), readable with dark text on its upper half and light
# text on its lower half: the window, DOT and Model Explorer's gradient all colour by it.
COLOUR_STOPS = [(0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)), (0.75, (94, 201, 98)),
                (1.0, (253, 231, 37))]


def colour_rgb(t: float) -> tuple[int, int, int]:
    """The colour map at `t` in [0, 1], as red, green, blue of 0-255."""
    t = min(1.0, max(0.0, t))
    for (t0, c0), (t1, c1) in zip(COLOUR_STOPS, COLOUR_STOPS[1:], strict=False):
        if t <= t1:
            f = 0.0 if t1 == t0 else (t - t0) / (t1 - t0)
            r, g, b = (round(a + (z - a) * f) for a, z in zip(c0, c1, strict=True))
            return r, g, b
    return COLOUR_STOPS[-1][1]


def colour_hex(t: float) -> str:
    """The colour map at `t` as `#rrggbb`."""
    return "#{:02x}{:02x}{:02x}".format(*colour_rgb(t))


def format_number(value: float) -> str:
    """A figure as the graph shows it: 5 significant digits (`12.346`, `0.00012346`, `1.2346e+07`, `inf`)."""
    return units.figure(value, ".5g")


@dataclass(frozen=True)
class Figure:
    """One figure a box can be coloured by."""

    name: str  # "norm" | "absmax" | "nonfinite" | "alpha" | "change" | "update"
    title: str  # as the legend and the tooltip say it
    log: bool  # coloured on a log scale (figures spanning decades)
    needs: str  # what it is made of: "stats" | "spectrum" | "pair"


NORM = Figure("norm", "L2 norm", True, "stats")
ABS_MAX = Figure("absmax", "max |x|", True, "stats")
NONFINITE = Figure("nonfinite", "NaN/Inf count", False, "stats")
ALPHA = Figure("alpha", "spectral alpha", False, "spectrum")
CHANGE = Figure("change", "relative change", True, "pair")
UPDATE = Figure("update", "update ratio", True, "pair")
CHECKPOINT_FIGURES = (NORM, ABS_MAX, NONFINITE, ALPHA)  # what one checkpoint's weights give


@dataclass(frozen=True)
class KeyFigures:
    """What is known of one tensor: its statistics' figures, its spectrum's alpha, a comparison's sums."""

    l2: float | None = None
    abs_max: float | None = None
    nonfinite: int = 0
    alpha: float | None = None
    delta_sq: float | None = None  # ||B - A||^2 against the other checkpoint (or the previous step)
    base_sq: float | None = None  # ||A||^2


@dataclass(frozen=True)
class BoxFigure:
    """A box's figure (None: nothing it reads has one) and the NaN/Inf count of what it reads."""

    value: float | None
    nonfinite: int
    keys: int  # tensors it reads that have figures


def combine(figure: Figure, parts: Iterable[KeyFigures]) -> BoxFigure:
    """The figure of a box that reads the tensors of `parts` (see the module docstring)."""
    parts = list(parts)
    nonfinite = sum(p.nonfinite for p in parts)
    value: float | None = None
    if figure is NORM:
        norms = [p.l2 for p in parts if p.l2 is not None]
        value = math.sqrt(sum(n * n for n in norms)) if norms else None
    elif figure is ABS_MAX:
        maxima = [p.abs_max for p in parts if p.abs_max is not None]
        value = max(maxima) if maxima else None
    elif figure is NONFINITE:
        value = float(nonfinite) if parts else None
    elif figure is ALPHA:
        alphas = [p.alpha for p in parts if p.alpha is not None and math.isfinite(p.alpha)]
        value = sum(alphas) / len(alphas) if alphas else None
    elif figure in (CHANGE, UPDATE):
        pairs = [(p.delta_sq, p.base_sq) for p in parts if p.delta_sq is not None and p.base_sq is not None]
        if pairs:
            delta, base = sum(d for d, _ in pairs), sum(b for _, b in pairs)
            value = math.sqrt(delta / base) if base > 0 else (0.0 if delta == 0 else math.inf)
    else:
        raise ValueError(f"unknown figure {figure.name!r}")
    known = sum(1 for p in parts if _has(figure, p))
    return BoxFigure(value, nonfinite, known)


def _has(figure: Figure, part: KeyFigures) -> bool:
    if figure.needs == "stats":
        return part.l2 is not None or part.nonfinite > 0
    if figure.needs == "spectrum":
        return part.alpha is not None
    return part.delta_sq is not None


def box_figures(figure: Figure, reads: Sequence[Sequence[str]], known: Mapping[str, KeyFigures]
                ) -> list[BoxFigure]:
    """Each box's figure, given the keys each box reads and what is known of each key."""
    return [combine(figure, [known[k] for k in keys if k in known]) for keys in reads]


@dataclass(frozen=True)
class Scale:
    """Where a value falls on the colour bar: linear or log10 between `low` and `high`."""

    low: float
    high: float
    log: bool

    def position(self, value: float) -> float:
        """0 at `low`, 1 at `high`, clamped."""
        lo, hi, v = self.low, self.high, value
        if self.log:
            if v <= 0:
                return 0.0
            lo, hi, v = math.log10(lo), math.log10(hi), math.log10(v)
        if hi <= lo:
            return 0.5
        return min(1.0, max(0.0, (v - lo) / (hi - lo)))

    def ticks(self) -> tuple[str, str]:
        """The colour bar's two ends as text."""
        return format_number(self.low), format_number(self.high)


def scale_of(figure: Figure, values: Iterable[float | None]) -> Scale | None:
    """The colour scale over the finite values shown (positive ones for a log figure); None without any."""
    finite = [v for v in values if v is not None and math.isfinite(v) and (v > 0 or not figure.log)]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    log = figure.log and high / low >= 10  # a narrow range reads better linear
    return Scale(low, high, log)


def describe(figure: Figure, box: BoxFigure) -> str:
    """The figure as the tooltip says it: `L2 norm 12.5`, `L2 norm 3.1 (4 NaN/Inf)`, `no L2 norm`."""
    if box.value is None:
        text = f"no {figure.title}"
    elif figure is NONFINITE:
        text = f"{figure.title} {int(box.value):,}"
    else:
        text = f"{figure.title} {format_number(box.value)}"
    if box.nonfinite and figure is not NONFINITE:
        text += f" ({box.nonfinite:,} NaN/Inf)"
    return text


def pair_figures(rows: Iterable[TensorDiff]) -> dict[str, KeyFigures]:
    """A comparison's figures by the first checkpoint's key (`ckptview.core.compare.diff` rows whose values
    were compared): what `CHANGE` (or a run's `UPDATE` between two steps) colours a graph by."""
    known: dict[str, KeyFigures] = {}
    for row in rows:
        if row.sums is not None and row.name_a is not None:
            known[row.name_a] = KeyFigures(delta_sq=row.sums.dd, base_sq=row.sums.aa,
                                           nonfinite=row.nonfinite_changed)
    return known


def step_figures(tensors: Mapping[str, TensorSeries], t: int) -> dict[str, KeyFigures]:
    """A run's figures at checkpoint `t`, by tensor name, from what the run read (nothing is read again):
    each tensor's statistics there, and its change from checkpoint `t - 1` (`UPDATE`: the update ratio
    ||w_t - w_(t-1)|| / ||w_(t-1)||, combined over a module as the run's module lines combine it)."""
    known: dict[str, KeyFigures] = {}
    for name, series in tensors.items():
        if not 0 <= t < len(series.stats):
            continue
        stats = series.stats[t]
        delta = series.sq_change[t] if t > 0 else None
        previous = series.stats[t - 1] if t > 0 else None
        if stats is None and delta is None:
            continue
        l2 = abs_max = None
        nonfinite = 0
        if stats is not None:
            l2 = stats.l2 if stats.finite else None
            abs_max = float(stats.abs_max) if stats.abs_max is not None else None
            nonfinite = stats.nan + stats.posinf + stats.neginf
        base = (previous.l2 ** 2 if previous is not None else 0.0) if delta is not None else None
        known[name] = KeyFigures(l2=l2, abs_max=abs_max, nonfinite=nonfinite, delta_sq=delta, base_sq=base)
    return known

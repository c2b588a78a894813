"""The findings of a run: first NaN/Inf, stalls, explosions, tensors that come and go,
checkpoints that could not be read or reference unsafe globals; with spectra, weights whose power-law alpha
leaves [2, 6].

Findings about values (stalls, explosions) are over floating-point tensors only: an integer buffer or a
one-element step counter (``num_batches_tracked``, an optimizer's ``step``, ``global_step``) grows by
design, and 1 -> 12 is training, not an explosion.
"""

from __future__ import annotations

from typing import Any

from ckptview.core.figures.spectral import ALPHA_HIGH, ALPHA_LOW
from ckptview.core.series.model import Finding, SeriesResult, TensorSeries, is_counter
from ckptview.core.units import figure, plural


def _shape_text(shape: tuple[int, ...] | None) -> str:
    return "[" + ", ".join(map(str, shape or ())) + "]"


def find_findings(result: SeriesResult) -> list[Finding]:
    """Every finding over the checkpoints completed so far, in run order then tensor order."""
    done = result.done
    refs = result.checkpoints
    found: list[tuple[int, int, Finding]] = []

    def add(kind: str, order: int, name: str | None, t: int, detail: str) -> None:
        found.append((t, order, Finding(kind, name, t, refs[t].path, detail)))

    for t in range(done):
        if refs[t].error is not None:
            add("unreadable", -2, None, t, refs[t].error or "")
        if refs[t].unsafe_globals:
            add("unsafe", -1, None, t, "references globals outside the safe set (recorded, never run): "
                + ", ".join(refs[t].unsafe_globals))
    for order, (name, s) in enumerate(result.tensors.items()):
        first_nan = first_inf = False
        counter = is_counter(s)
        for t in range(done):
            if refs[t].error is not None:
                continue
            if s.errors[t] is not None:
                add("unreadable", order, name, t, s.errors[t] or "")
            neighbour = t > 0 and refs[t - 1].error is None
            if neighbour:
                if s.present(t) and not s.present(t - 1):
                    add("appeared", order, name, t, f"new tensor {s.dtypes[t]} {_shape_text(s.shapes[t])}")
                elif s.present(t - 1) and not s.present(t):
                    add("disappeared", order, name, t,
                        f"{s.dtypes[t - 1]} {_shape_text(s.shapes[t - 1])} is no longer in this checkpoint")
                elif s.present(t) and s.present(t - 1):
                    if s.shapes[t] != s.shapes[t - 1]:
                        add("shape_changed", order, name, t,
                            f"shape {_shape_text(s.shapes[t - 1])} -> {_shape_text(s.shapes[t])}")
                    if s.dtypes[t] != s.dtypes[t - 1]:
                        add("dtype_changed", order, name, t, f"dtype {s.dtypes[t - 1]} -> {s.dtypes[t]}")
            st = s.stats[t]
            if st is None:
                continue
            if st.nan and not first_nan:
                first_nan = True
                add("nan", order, name, t, f"first NaN: {st.nan} of {plural(st.numel, 'value')}")
            inf = st.posinf + st.neginf
            if inf and not first_inf:
                first_inf = True
                add("inf", order, name, t, f"first Inf: {inf} of {plural(st.numel, 'value')}")
            before = s.stats[t - 1] if neighbour and not counter else None
            if before is not None and before.l2 > 0 and st.l2 > result.explode_factor * before.l2:
                add("explosion", order, name, t,
                    f"norm {figure(before.l2)} -> {figure(st.l2)} (x{figure(st.l2 / before.l2)}, "
                    f"factor {figure(result.explode_factor)})")
        stall = None if counter else _stall_start(s, done, result.stall_threshold)
        if stall is not None:
            last = s.update_ratio[done - 1]
            if result.stall_threshold > 0:
                detail = (f"update ratio below {figure(result.stall_threshold)} from here on "
                          f"({done - stall} of {plural(done, 'checkpoint')}; last {figure(last or 0.0)})")
            else:
                detail = f"no change from here on ({done - stall} of {plural(done, 'checkpoint')})"
            add("stalled", order, name, stall, detail)
        if result.spectral and not counter:
            for t, detail in _alpha_exits(s, done, refs):
                add("alpha", order, name, t, detail)
    found.sort(key=lambda item: (item[0], item[1]))
    return [f for _, _, f in found]


def _alpha_exits(s: TensorSeries, done: int, refs: list[Any]) -> list[tuple[int, str]]:
    """Where a weight's alpha first falls below 2, and where it first rises above 6 (WeightWatcher's
    well-trained range): each at most once per tensor, over the checkpoints read."""
    out: list[tuple[int, str]] = []
    below = above = False
    for t, alpha in enumerate(s.spectral("alpha")[:done]):
        if alpha is None or refs[t].error is not None:
            continue
        if alpha < ALPHA_LOW and not below:
            below = True
            out.append((t, f"alpha fell below {ALPHA_LOW:g} ({alpha:.3g})"))
        elif alpha > ALPHA_HIGH and not above:
            above = True
            out.append((t, f"alpha rose above {ALPHA_HIGH:g} ({alpha:.3g})"))
    return out


def _stall_start(s: TensorSeries, done: int, threshold: float) -> int | None:
    """The first checkpoint of the run's tail over which the tensor did not (or barely) change."""
    start = None
    for t in range(done - 1, 0, -1):
        ratio, frac = s.update_ratio[t], s.frac_changed[t]
        if ratio is None or not (ratio < threshold if threshold > 0 else ratio == 0 and frac == 0):
            break
        start = t
    return start

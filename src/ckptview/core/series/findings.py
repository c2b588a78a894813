"""The findings of a run: first NaN/Inf, stalls, explosions, tensors that come and go,
checkpoints that could not be read or reference unsafe globals; with spectra, weights whose power-law alpha
leaves [2, 6]; where a logged loss spikes or stops being finite, joined with the module whose update stood
out at the checkpoint that followed (`loss_findings`).

Findings about values (stalls, explosions) are over floating-point tensors only: an integer buffer or a
one-element step counter (``num_batches_tracked``, an optimizer's ``step``, ``global_step``) grows by
design, and 1 -> 12 is training, not an explosion.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from ckptview.core.figures.spectral import ALPHA_HIGH, ALPHA_LOW
from ckptview.core.series.logged import ScalarCurve, place
from ckptview.core.series.model import Finding, SeriesResult, TensorSeries, is_counter, module_series
from ckptview.core.units import figure, plural

SPIKE_WINDOW = 20  # points before a loss value its spike is measured against
SPIKE_MIN_POINTS = 4  # a spike needs at least this many points before it
SPIKE_FACTOR = 1.5  # a spike is at least this many times the median before it ...
SPIKE_MADS = 6.0  # ... and this many (scaled) median absolute deviations above it
STANDOUT = 3.0  # a module's update ratio this many times its own median stands out


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
    for finding in loss_findings(result):
        found.append((finding.index, len(result.tensors), finding))
    found.sort(key=lambda item: (item[0], item[1]))
    return [f for _, _, f in found]


def is_loss(name: str) -> bool:
    """True for a curve of a loss: ``loss``, ``train_loss``, ``train/loss``, ``eval_loss``, ``val/loss_epoch``."""
    last = name.rsplit("/", 1)[-1].lower()
    return last == "loss" or last.startswith("loss_") or last.endswith("_loss") or "_loss_" in last


def is_rate(name: str) -> bool:
    """True for a curve of a learning rate: ``lr``, ``learning_rate``, ``last_lr (group 1)``, ``lr-Adam``."""
    last = name.rsplit("/", 1)[-1].split(" (", 1)[0].lower()
    return last in ("lr", "last_lr", "learning_rate") or last.startswith(("lr-", "lr_")) or last.endswith("_lr")


def loss_findings(result: SeriesResult) -> list[Finding]:
    """Where each loss curve spikes (a value `SPIKE_FACTOR` times the median of the `SPIKE_WINDOW` values
    before it, and `SPIKE_MADS` robust deviations above it) or first stops being finite, over the checkpoints
    read: each at the first checkpoint at or after it, with the module whose update ratio there stands out
    most against its own median over the run (`STANDOUT` times or more)."""
    if not result.done:
        return []
    x = result.x_values()
    last_x = x[result.done - 1]
    out: list[Finding] = []
    standouts: dict[int, tuple[str, float, float] | None] = {}
    for curve in result.scalar_curves():
        if not is_loss(curve.name):
            continue
        placement = place(curve, result.order_by, x)
        for i, kind, detail in _spikes(curve, placement.x):
            at = placement.x[i]
            t = next((k for k, cx in enumerate(x[:result.done]) if at is not None and cx >= at), None)
            if t is None or at is None or at > last_x:
                continue
            if t not in standouts:
                standouts[t] = _standout(result, t)
            module = standouts[t]
            where = f"{curve.name} ({curve.source})"
            text = f"{where} {detail} at {_place(result, at)}"
            if module is not None:
                name, ratio, median = module
                text += (f", where {name} updated {figure(ratio / median)}x its median "
                         f"(update ratio {figure(ratio)}, median {figure(median)})")
            out.append(Finding(kind, None, t, result.checkpoints[t].path, text,
                               module[0] if module is not None else None))
    return out


def _place(result: SeriesResult, at: float) -> str:
    axis = {"step": "step", "epoch": "epoch"}.get(result.order_by, "checkpoint")
    return f"{axis} {at:,.0f}" if float(at).is_integer() else f"{axis} {figure(at)}"


def _spikes(curve: ScalarCurve, xs: list[float | None]) -> list[tuple[int, str, str]]:
    """(point index, finding kind, words) of each spike of `curve` and its first non-finite value."""
    out: list[tuple[int, str, str]] = []
    before: list[float] = []
    nonfinite = high = False
    for i, (value, at) in enumerate(zip(curve.values, xs, strict=True)):
        if at is None:
            continue
        if not math.isfinite(value):
            if not nonfinite:
                nonfinite = True
                out.append((i, "loss_nonfinite", f"became {value}"))
            continue
        window = before[-SPIKE_WINDOW:]
        spike = False
        if len(window) >= SPIKE_MIN_POINTS:
            median = statistics.median(window)
            mad = statistics.median(abs(v - median) for v in window)
            spike = median > 0 and value >= SPIKE_FACTOR * median and value - median > SPIKE_MADS * 1.4826 * mad
            if spike and not high:  # where it rose: the points that stay up after it are the same spike
                out.append((i, "loss_spike", f"spiked to {figure(value)} ({figure(value / median)}x the median "
                                              f"{figure(median)} of the {plural(len(window), 'value')} before)"))
        high = spike
        if not spike:
            before.append(value)  # the window is what the loss was before it rose
    return out


def _standout(result: SeriesResult, t: int) -> tuple[str, float, float] | None:
    """(module, its update ratio at checkpoint t, its median update ratio over the run) of the module whose
    ratio at t is the largest multiple of its own median, when that is `STANDOUT` or more."""
    if t == 0:
        return None
    owners = {n.rsplit(".", 1)[0] for n, s in result.tensors.items()
              if "." in n and s.param is None and not is_counter(s)}
    best: tuple[str, float, float] | None = None
    for m in module_series(result, owners):
        ratio = m.update_ratio[t]
        others = [r for k, r in enumerate(m.update_ratio[:result.done]) if k != t and r is not None and r > 0]
        if ratio is None or not others:
            continue
        median = statistics.median(others)
        if median > 0 and ratio >= STANDOUT * median and (best is None or ratio / median > best[1] / best[2]):
            best = (m.name, ratio, median)
    return best


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

"""A log axis that labels its ticks at every range without overlapping them (series lines, spectra).

pyqtgraph loads with the first plot, not with the window: an axis's behaviour is a mixin here, and
`axis_item(mixin, ...)` makes the pyqtgraph `AxisItem` with it on first use.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from PySide6.QtGui import QFont, QFontMetrics

if TYPE_CHECKING:
    import pyqtgraph as pg
    from pyqtgraph import AxisItem as AxisMixinBase  # what the mixins extend (Any to mypy: no types)

else:
    AxisMixinBase = object


def axis_item(mixin: type, *args: Any, **kwargs: Any) -> Any:
    """A pyqtgraph AxisItem with `mixin`'s behaviour (the class is made once, when first asked for)."""
    return _with_axis_item(mixin)(*args, **kwargs)


@functools.cache
def _with_axis_item(mixin: type) -> type:
    import pyqtgraph as pg

    return type(mixin.__name__, (mixin, pg.AxisItem), {})


def log_tick_axis(orientation: str) -> Any:
    """A value axis whose log mode labels its ticks at every range (`LogTicks`)."""
    return axis_item(LogTicks, orientation)


def tick_font_metrics(axis: pg.AxisItem) -> QFontMetrics:
    """The metrics of the font an axis draws its tick labels in."""
    font = axis.style.get("tickFont") or QFont()
    return QFontMetrics(font)


def nice_values(lo: float, hi: float, count: int) -> list[float]:
    """About ``count`` round numbers (1, 2, 5 x 10^k apart) from ``lo`` to ``hi``."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


class LogTicks(AxisMixinBase):
    """An axis mixin: a value axis whose log mode labels its ticks at every range: decades when two or more are in view,
    else round values between them (pyqtgraph labels only the decades, so a range within one decade had
    none); ticks are kept at least two text lines apart, so labels never overlap."""

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:  # noqa: N802,N803
        if not self.logMode:
            return super().tickValues(minVal, maxVal, size)
        lo, hi = sorted((minVal, maxVal))
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo or size <= 0:
            return []
        gap = 2.0 * tick_font_metrics(self).height()
        most = max(2, int(size / gap))
        decades = list(range(math.ceil(lo), math.floor(hi) + 1))
        if len(decades) >= 2:
            stride = math.ceil(len(decades) / most)
            return [(float(stride), [float(d) for d in decades[::stride]])]
        if hi - lo > math.log10(3):  # a wide part of a decade: 1, 2, 5 x 10^k spread evenly on a log axis
            values = [m * 10.0 ** k for k in range(math.floor(lo), math.ceil(hi) + 1) for m in (1, 2, 5)
                      if lo <= math.log10(m * 10.0 ** k) <= hi]
        else:
            values = [v for v in nice_values(10 ** lo, 10 ** hi, most) if v > 0]
        kept: list[float] = []
        for v in values:  # linear values on a log axis crowd at the top: keep each a gap from the last
            pos = math.log10(v)
            if not kept or (pos - kept[-1]) / (hi - lo) * size >= gap:
                kept.append(pos)
        return [(0.0, kept)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        if not self.logMode:
            return super().tickStrings(values, scale, spacing)
        numbers = [10 ** v for v in values]
        for digits in range(3, 10):  # as many significant digits as tell neighbouring ticks apart
            out = [f"{x:.{digits}g}" for x in numbers]
            if len(set(out)) == len(out):
                return out
        return out

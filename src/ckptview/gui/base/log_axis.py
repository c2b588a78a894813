"""Axes that label their ticks at every range without overlapping them (series lines, spectra, heat-maps).

pyqtgraph spaces ticks by a fixed number of pixels: on a narrow plot its labels ran into each other
(`0.0010.01`, `1001e+03` under a large weight's spectrum). These axes space ticks by what their labels
need: a text line on a vertical axis, the widest label (and a gap) on a horizontal one.

pyqtgraph loads with the first plot, not with the window: an axis's behaviour is a mixin here, and
`axis_item(mixin, ...)` makes the pyqtgraph `AxisItem` with it on first use.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import TYPE_CHECKING, Any

from PySide6.QtGui import QFont, QFontMetrics

if TYPE_CHECKING:
    import pyqtgraph as pg
    from pyqtgraph import AxisItem as AxisMixinBase  # what the mixins extend (Any to mypy: no types)

else:
    AxisMixinBase = object

LABEL_GAP_CHARS = 2  # characters of empty room between two labels of a horizontal axis


def axis_item(mixin: type, *args: Any, **kwargs: Any) -> Any:
    """A pyqtgraph AxisItem with `mixin`'s behaviour (the class is made once, when first asked for)."""
    return _with_axis_item(mixin)(*args, **kwargs)


@functools.cache
def _with_axis_item(mixin: type) -> type:
    import pyqtgraph as pg

    return type(mixin.__name__, (mixin, pg.AxisItem), {})


def log_tick_axis(orientation: str, **kwargs: Any) -> Any:
    """A value axis whose ticks never overlap, in log or linear mode (`LogTicks`; `whole_numbers=True`:
    ticks at whole numbers only)."""
    return axis_item(LogTicks, orientation, **kwargs)


def index_axis(orientation: str) -> Any:
    """An axis of an image's element indices, whole numbers only (`IndexTicks`)."""
    return axis_item(IndexTicks, orientation)


def tick_font_metrics(axis: pg.AxisItem) -> QFontMetrics:
    """The metrics of the font an axis draws its tick labels in."""
    font = axis.style.get("tickFont") or QFont()
    return QFontMetrics(font)


def nice_values(lo: float, hi: float, count: int) -> list[float]:
    """About ``count`` round numbers (1, 2, 5 x 10^k apart) from ``lo`` to ``hi``."""
    step = nice_step(lo, hi, count)
    if step is None:
        return [lo] if math.isfinite(lo) else []
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def nice_step(lo: float, hi: float, count: int) -> float | None:
    """The round step (1, 2, 5 x 10^k) that puts about ``count`` values between ``lo`` and ``hi``."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return None
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def compact_number(x: float, digits: int = 3) -> str:
    """A tick label: '0.001', '2000', '1e-05' → '1e-5', '1e+06' → '1e6' (no padded exponents)."""
    text = f"{x:.{digits}g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


MAX_CANDIDATES = 400  # tick sets an axis tries at most per layout (strides x phases)
Ticks = list[tuple[float, list[float]]]


class LogTicks(AxisMixinBase):
    """An axis mixin: a value axis whose ticks never overlap: in log mode, decades when two or more are in
    view, else round values between them (pyqtgraph labels only the decades, so a range within one decade
    had none); in linear mode, round values. On a vertical axis ticks are two text lines apart. On a horizontal one
    the densest set of ticks is taken whose labels lie inside the axis (pyqtgraph drops a label that would
    cross its end) and keep a gap between them, at least two labels where any two fit: on a narrow plot
    of nine decades that is 1e-7 and 0.01 rather than a lone 1e-5."""

    def __init__(self, orientation: str, *args: Any, whole_numbers: bool = False, **kwargs: Any) -> None:
        super().__init__(orientation, *args, **kwargs)
        # Ticks at whole numbers only (checkpoint steps, run order): no 1.5 between steps 1 and 2.
        self.whole_numbers = whole_numbers

    def _vertical(self) -> bool:
        return self.orientation in ("left", "right")

    def _gap(self, labels: list[str]) -> float:
        """Pixels from one tick to the next so that these labels never touch."""
        metrics = tick_font_metrics(self)
        if self._vertical():
            return 2.0 * metrics.height()
        widest = max((metrics.horizontalAdvance(text) for text in labels), default=0)
        return widest + LABEL_GAP_CHARS * metrics.averageCharWidth()

    def drawn_labels(self, values: list[float], spacing: float, lo: float, hi: float, size: float) -> int:
        """How many of these ticks' labels a horizontal axis `size` pixels long draws, or -1 when two of
        them would touch (a vertical axis: all of them, or -1 closer than two lines)."""
        if not values:
            return 0
        scale = size / (hi - lo)
        positions = [(v - lo) * scale for v in values]
        if self._vertical():
            gap = self._gap([])
            return -1 if any(b - a < gap for a, b in itertools.pairwise(positions)) else len(values)
        metrics = tick_font_metrics(self)
        room = LABEL_GAP_CHARS * metrics.averageCharWidth()
        # Measured as they come: a dense candidate (hundreds of ticks) touches at its first pair, and the
        # axis tries a dozen candidates a paint (measuring them all was 1.5 million calls in one test).
        drawn, last_x, last_w = 0, 0.0, 0.0
        for x, text in zip(positions, self.tickStrings(values, 1.0, spacing), strict=True):
            w = metrics.horizontalAdvance(text) + 2
            if x - w / 2 < 0 or x + w / 2 > size:
                continue
            if drawn and x - last_x < (last_w + w) / 2 + room:
                return -1
            drawn, last_x, last_w = drawn + 1, x, w
        return drawn

    def _pick(self, candidates: list[tuple[float, list[float]]], lo: float, hi: float, size: float) -> Ticks:
        """The first (densest) candidate that draws two labels apart, else the first that draws one."""
        fallback: Ticks = []
        for spacing, values in candidates[:MAX_CANDIDATES]:
            drawn = self.drawn_labels(values, spacing, lo, hi, size)
            if drawn >= 2:
                return [(spacing, values)]
            if drawn == 1 and not fallback:
                fallback = [(spacing, values)]
        return fallback

    def tickValues(self, minVal: float, maxVal: float, size: float) -> Ticks:  # noqa: N802,N803
        lo, hi = sorted((minVal, maxVal))
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo or size <= 0:
            return []
        if not self.logMode:
            return self._linear_ticks(lo, hi, size)
        decades = list(range(math.ceil(lo), math.floor(hi) + 1))
        if len(decades) >= 2:
            return self._decade_ticks(decades, lo, hi, size)
        if hi - lo > math.log10(3):  # a wide part of a decade: 1, 2, 5 x 10^k spread evenly on a log axis
            values = [m * 10.0 ** k for k in range(math.floor(lo), math.ceil(hi) + 1) for m in (1, 2, 5)
                      if lo <= math.log10(m * 10.0 ** k) <= hi]
        else:
            values = [v for v in nice_values(10 ** lo, 10 ** hi, max(2, int(size / self._gap(["0.000"]))))
                      if v > 0]
        gap = self._gap(self.tickStrings([math.log10(v) for v in values], 1.0, 1.0))
        kept: list[float] = []
        for v in values:  # linear values on a log axis crowd at the top: keep each a gap from the last
            pos = math.log10(v)
            if not kept or (pos - kept[-1]) / (hi - lo) * size >= gap:
                kept.append(pos)
        return [(0.0, kept)]

    def _decade_ticks(self, decades: list[int], lo: float, hi: float, size: float) -> Ticks:
        """Every `stride`-th decade, the multiples of the stride first (1e-6, 1e-3, 1), then the other phases."""
        per_decade = size / (hi - lo)
        narrowest = tick_font_metrics(self).horizontalAdvance("1e-5") if not self._vertical() else self._gap([])
        first = max(1, math.floor(narrowest / per_decade))
        candidates: list[tuple[float, list[float]]] = []
        for stride in range(first, len(decades) + 1):
            for phase in range(stride):  # phase 0 first: the multiples of the stride
                candidates.append((float(stride), [float(d) for d in decades if (d - phase) % stride == 0]))
            if len(candidates) >= MAX_CANDIDATES:
                break
        return self._pick(candidates, lo, hi, size)

    def _linear_ticks(self, lo: float, hi: float, size: float) -> Ticks:
        """Round values 1, 2, 5 x 10^k apart, the densest that fits; a step's multiples first, then the
        values halfway between them (1000 and 3000 where 0, 2000 and 4000 leave only 2000 inside)."""
        span = hi - lo
        most = max(2, int(size / 4))  # never more ticks than one per four pixels
        candidates: list[tuple[float, list[float]]] = []
        for k in range(math.floor(math.log10(span / most)), math.ceil(math.log10(span)) + 2):
            for m in (1, 2, 5):
                step = m * 10.0 ** k
                if span / step > most or (self.whole_numbers and step < 1):
                    continue
                for offset in (0.0, step / 2) if not self.whole_numbers or step % 2 == 0 else (0.0,):
                    start = math.ceil((lo - offset) / step - 1e-9) * step + offset
                    values = [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]
                    candidates.append((step / 2 if offset else step, values))
        return self._pick(candidates, lo, hi, size)

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        if not self.logMode:
            digits = max(0, -math.floor(math.log10(spacing))) if spacing and math.isfinite(spacing) else 3
            tiny = abs(spacing) * 1e-9 if spacing and math.isfinite(spacing) else 0.0
            return [compact_number(v * scale) if abs(v) >= 1e6 else f"{(v if abs(v) > tiny else 0.0) * scale:.{digits}f}"
                    for v in values]
        numbers = [10 ** v for v in values]
        out: list[str] = []
        for digits in range(3, 10):  # as many significant digits as tell neighbouring ticks apart
            out = [compact_number(x, digits) for x in numbers]
            if len(set(out)) == len(out):
                return out
        return out


class IndexTicks(AxisMixinBase):
    """An axis mixin: an axis of element indices of an image whose cell ``i`` spans [i, i+1): whole numbers only, at the
    cells' middles (a one-row heat-map reads '0', never 0, 0.2 … 1.0), as many as fit apart."""

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:  # noqa: N802,N803
        lo, hi = sorted((minVal, maxVal))
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo or size <= 0:
            return []
        first, last = max(0, math.ceil(lo - 0.5)), math.floor(hi - 0.5)
        if last < first:
            return []
        metrics = tick_font_metrics(self)
        if self.orientation in ("left", "right"):
            need = 1.5 * metrics.height()
        else:
            need = metrics.horizontalAdvance(str(last)) + LABEL_GAP_CHARS * metrics.averageCharWidth()
        per_cell = size / (hi - lo)
        stride = 1
        while stride * per_cell < need:  # 1, 2, 5, 10, 20, 50, ... cells between two labels
            stride = next(m * 10 ** k for k in range(0, 20) for m in (1, 2, 5) if m * 10 ** k > stride)
        start = math.ceil(first / stride) * stride
        return [(float(stride), [i + 0.5 for i in range(start, last + 1, stride)])]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        return [str(int(math.floor(v))) for v in values]

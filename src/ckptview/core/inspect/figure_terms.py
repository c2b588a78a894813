"""Figure terms of the filter language: `nan>0`, `norm>10`, `absmax<0.5`, `alpha<2`, `sort:-norm` (Qt-free).

A term compares one figure of a tensor's values with a number; a `sort:` term orders the tensors by one
(`sort:-nan` most NaN first, `sort:alpha` smallest alpha first). The figures come from the checkpoint's
Analysis (statistics, spectra: each tensor read once and kept), computed by :func:`compute_figures`, a
generator that yields progress and checks a cancel token: the window runs it in a worker, the command
line drains it. Until a tensor's figure is computed, a term does not match it. Module rows never match a
figure term themselves; the tensors below them do, and that keeps them in view.
"""

from __future__ import annotations

import math
import operator
import re
import weakref
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import CheckpointError
from ckptview.core.figures.spectral import matrix_of
from ckptview.core.jobs import CancelToken, Progress, relay
from ckptview.core.read.bytes.files import read_ahead
from ckptview.core.units import plural

if TYPE_CHECKING:
    from ckptview.core.figures.analysis import Analysis
    from ckptview.core.read.bytes.files import ReadAhead

__all__ = ["FIGURE_LABELS", "FIGURE_NAMES", "FigureOrder", "FigureValues", "compute_figures", "figure_term",
           "is_figure_word", "is_sort_word", "sort_term"]

# Names a term may use -> the figure it compares (statistics are as `info --stats` reports them: over the
# finite values; `inf` counts both infinities).
STATS_FIGURES = {"nan": "nan", "inf": "inf", "posinf": "posinf", "neginf": "neginf", "zeros": "zeros",
                 "norm": "l2", "l2": "l2", "absmax": "abs_max", "abs_max": "abs_max", "maxabs": "abs_max",
                 "max": "max", "min": "min", "mean": "mean", "std": "std", "numel": "numel"}
SPECTRAL_FIGURES = {"alpha": "alpha", "stable_rank": "stable_rank", "srank": "stable_rank",
                    "spectral_norm": "spectral_norm"}
FIGURE_NAMES = {**STATS_FIGURES, **SPECTRAL_FIGURES}
# What a person reads for each figure (the match label, a row's tooltip).
FIGURE_LABELS = {"nan": "NaN count", "inf": "±Inf count", "posinf": "+Inf count", "neginf": "−Inf count",
                 "zeros": "zeros", "l2": "L2 norm", "abs_max": "max |x|", "max": "max", "min": "min",
                 "mean": "mean", "std": "std", "numel": "elements", "alpha": "alpha", "stable_rank": "stable rank",
                 "spectral_norm": "spectral norm"}
_SORT = re.compile(r"^sort:([-+]?)([a-z_][a-z0-9_]*)$", re.IGNORECASE)
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le, "=": operator.eq,
    "==": operator.eq, "!=": operator.ne}
_WORD = re.compile(r"^([a-z_][a-z0-9_]*)\s*(>=|<=|==|!=|>|<|=)(.*)$", re.IGNORECASE)
_NUMBER = re.compile(r"^\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?\s*$", re.IGNORECASE)


class FigureValues:
    """The figures a query compares, per tensor (weakly keyed: they go with the checkpoint)."""

    def __init__(self) -> None:
        self.wanted: set[str] = set()  # figure names the terms compare ("nan", "l2", "alpha", ...)
        self._values: weakref.WeakKeyDictionary[TensorInfo, dict[str, float | None]] = weakref.WeakKeyDictionary()

    def get(self, info: TensorInfo, figure: str) -> float | None:
        """The figure of `info`, or None when not computed (or not defined: no finite value, not a matrix)."""
        found = self._values.get(info)
        return None if found is None else found.get(figure)

    def put(self, info: TensorInfo, figures: dict[str, float | None]) -> None:
        """Remember figures of `info`."""
        self._values.setdefault(info, {}).update(figures)

    def known(self, info: TensorInfo) -> bool:
        """True when every wanted figure of `info` has been looked for."""
        found = self._values.get(info)
        return found is not None and self.wanted <= found.keys()


@dataclass(frozen=True)
class FigureOrder:
    """Tensors ordered by one figure (`sort:-norm`: `l2`, descending); those without it come last."""

    figure: str
    descending: bool

    @property
    def words(self) -> str:
        """'L2 norm, largest first'."""
        return f"{FIGURE_LABELS[self.figure]}, {'largest' if self.descending else 'smallest'} first"

    def key(self, value: float | None) -> tuple[bool, float]:
        """The sort key of a figure's value (ascending sort): missing values last, whichever the order."""
        if value is None:
            return True, 0.0
        return False, -value if self.descending else value

    def better(self, a: float | None, b: float | None) -> float | None:
        """Of two values, the one that comes first (a module is ordered by its first tensor)."""
        if a is None or b is None:
            return b if a is None else a
        return max(a, b) if self.descending else min(a, b)


def is_sort_word(word: str) -> bool:
    """True for a `sort:` word, well-formed or not."""
    return word.lower().startswith("sort:")


def sort_term(word: str, values: FigureValues) -> FigureOrder:
    """The order `word` asks for (`sort:-norm` largest first, `sort:norm` or `sort:+norm` smallest first);
    ValueError with a message for an unknown figure."""
    match = _SORT.match(word.strip())
    name = match.group(2).lower() if match else ""
    if match is None or name not in FIGURE_NAMES:
        raise ValueError(f"bad sort term '{word}': sort by a figure, like sort:-nan (most first) or sort:alpha "
                         f"(smallest first) (figures: {', '.join(sorted(set(FIGURE_NAMES)))})")
    figure = FIGURE_NAMES[name]
    values.wanted.add(figure)
    return FigureOrder(figure, match.group(1) == "-")


def is_figure_word(word: str) -> bool:
    """True for a word that compares a known figure (`nan>0`), well-formed or not."""
    match = _WORD.match(word)
    return match is not None and match.group(1).lower() in FIGURE_NAMES


def figure_term(word: str, values: FigureValues) -> Callable[[TensorInfo], bool]:
    """The test of a tensor for `word` (`norm>10`); ValueError with a message for a bad number or operator."""
    match = _WORD.match(word)
    assert match is not None
    name, op, number = match.group(1).lower(), match.group(2), match.group(3)
    if not _NUMBER.match(number) or number.lstrip()[:1] in "<>=!":
        raise ValueError(f"bad figure term '{word}': compare a figure with a number, like nan>0, norm>10 or "
                         f"alpha<2 (figures: {', '.join(sorted(set(FIGURE_NAMES)))})")
    figure, limit, compare = FIGURE_NAMES[name], float(number), _OPS[op]
    values.wanted.add(figure)

    def test(info: TensorInfo) -> bool:
        value = values.get(info, figure)
        return value is not None and compare(value, limit)

    return test


class AsksFigures(Protocol):
    """What `compute_figures` needs of a query (`query.Query` has it): the figures its terms compare."""

    @property
    def figures(self) -> FigureValues: ...


def compute_figures(query: AsksFigures, infos: Sequence[TensorInfo], analysis: Analysis,
                    token: CancelToken | None = None) -> Generator[Progress, None, FigureValues]:
    """Compute what `query`'s figure terms compare for each tensor of `infos` not known yet, through
    `analysis` (read once, kept); progress over all of them, `token` checked between reads. A tensor that
    cannot be read has no figures (it matches no figure term)."""
    return read_ahead(lambda ahead: _compute(query.figures, infos, analysis, token, ahead))


def _compute(values: FigureValues, infos: Sequence[TensorInfo], analysis: Analysis,
             token: CancelToken | None, ahead: ReadAhead | None) -> Generator[Progress, None, FigureValues]:
    stats_wanted = bool(values.wanted & set(STATS_FIGURES.values()))
    spectra_wanted = bool(values.wanted & set(SPECTRAL_FIGURES.values()))
    todo, seen = [], set()
    for info in infos:  # each tensor once (tied weights are one)
        if id(info) not in seen and not values.known(info):
            seen.add(id(info))
            todo.append(info)
    total = len(todo)
    words = ", ".join(sorted(values.wanted))
    for i, info in enumerate(todo):
        if token is not None:
            token.check()

        def rebased(p: Progress, i: int = i) -> Progress:
            return Progress(i * 1000 + int(p.fraction * 1000), total * 1000,
                            f"figures ({words}) of {plural(total, 'tensor')}")

        figures: dict[str, float | None] = {}
        if stats_wanted:
            try:
                summary = yield from relay(analysis.summary(info, token, ahead), rebased)
            except CheckpointError:  # unreadable: looked for, not there
                summary = None
            if summary is not None:
                s = summary.stats
                figures.update({"nan": s.nan, "posinf": s.posinf, "neginf": s.neginf, "inf": s.posinf + s.neginf,
                                "zeros": s.zeros, "numel": s.numel, "l2": s.l2 if s.finite or not s.numel else None,
                                "abs_max": _as_float(s.abs_max), "max": _as_float(s.max), "min": _as_float(s.min),
                                "mean": s.mean, "std": s.std})
        if spectra_wanted and matrix_of(info):
            try:
                spectrum = yield from relay(analysis.spectrum(info, token), rebased)
            except CheckpointError:  # not finite, or unreadable: no spectrum
                spectrum = None
            if spectrum is not None:
                figures.update({"alpha": spectrum.alpha, "stable_rank": spectrum.stable_rank,
                                "spectral_norm": spectrum.spectral_norm})
        values.put(info, {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in figures.items()}
                   | dict.fromkeys(values.wanted - figures.keys()))
        yield Progress(i + 1, total, f"figures ({words}) of {plural(total, 'tensor')}")
    return values


def _as_float(value: int | float | None) -> float | None:
    return None if value is None else float(value)

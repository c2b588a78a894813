"""The filter language of the window's filter box and `ckptview info --filter`: all words must match.

- ``attn``            substring of the full name (case-insensitive)
- ``*.q_proj.weight`` glob over the full name or a dotted tail of it (``* ? [..]``)
- ``/layers\\.\\d+\\.mlp/`` or ``re:...``  regular expression searched in the full name
- ``768x3072``, ``*x768``, ``shape:768``, ``shape:()``  shape, ``*`` is any one dimension
- ``float16``, ``bf16``, ``dtype:int*``  dtype (aliases fp32/fp16/bf16/half/double/long accepted)
- ``>10MB``, ``<=4KiB``, ``size:=0``  logical size of a tensor (KB/MB/GB are powers of 1000, KiB/MiB of 1024)
- ``device:cuda``     the device a tensor was saved from
- ``nan>0``, ``inf>0``, ``norm>10``, ``absmax<0.5``, ``mean<0``, ``std>1``, ``zeros>0``, ``alpha<2``,
  ``stable_rank<5``  a figure of the tensor's values (statistics over its finite values, the spectrum of a
  weight); figures are computed first (`figure_terms.compute_figures`): until then such a term matches nothing
- ``sort:-norm``, ``sort:alpha``  no filter: the tensors ordered by a figure, largest first with ``-``, else
  smallest first; those without it last; a module by its first tensor (`row_order`)
"""

from __future__ import annotations

import fnmatch
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ckptview.core import dtypes
from ckptview.core.inspect.figure_terms import (
    FigureOrder,
    FigureValues,
    figure_term,
    is_figure_word,
    is_sort_word,
    sort_term,
)
from ckptview.core.inspect.grouping import Row

Predicate = Callable[[Row], bool]

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_OPS = {">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le, "=": operator.eq,
        "==": operator.eq}
_SIZE = re.compile(r"^(>=|<=|==|>|<|=)\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?b?|b)?$", re.IGNORECASE)
_DIM = r"(?:\d+|\*)"
_SHAPE = re.compile(rf"^[\[(]?\s*{_DIM}(?:\s*[x×,]\s*{_DIM})+\s*[\])]?$", re.IGNORECASE)


class QueryError(ValueError):
    """The filter text cannot be understood (a bad regular expression, a bad size)."""


@dataclass
class Query:
    """A parsed filter: a row matches when every predicate accepts it."""

    text: str = ""
    predicates: list[Predicate] = field(default_factory=list)
    figures: FigureValues = field(default_factory=FigureValues)  # what its figure terms compare, once computed
    order: FigureOrder | None = None  # a `sort:` term: the figure that orders the rows

    @property
    def needs_figures(self) -> bool:
        """True when a term compares a figure of the values (`compute_figures` must run first)."""
        return bool(self.figures.wanted)

    @property
    def empty(self) -> bool:
        """True when the filter text has no terms."""
        return not self.predicates

    def matches(self, row: Row) -> bool:
        """Whether `row` satisfies every term."""
        return all(p(row) for p in self.predicates)


def parse_query(text: str) -> Query:
    """Parse the filter box; raises QueryError with a message for the person typing."""
    figures = FigureValues()
    predicates: list[Predicate] = []
    order: FigureOrder | None = None
    for word in _split(text):
        if not is_sort_word(word):
            predicates.append(_term(word, figures))
            continue
        if order is not None:
            raise QueryError(f"one sort: term at most ('{word}' is the second)")
        try:
            order = sort_term(word, figures)
        except ValueError as exc:
            raise QueryError(str(exc)) from None
    return Query(text, predicates, figures, order)


def _split(text: str) -> list[str]:
    # A /regex/ may contain spaces; everything else is split on whitespace.
    words: list[str] = []
    for match in re.finditer(r"/(?:[^/\\]|\\.)*/|\S+", text.strip()):
        words.append(match.group(0))
    return words


def _term(word: str, figures: FigureValues) -> Predicate:
    if is_figure_word(word):
        try:
            test = figure_term(word, figures)
        except ValueError as exc:
            raise QueryError(str(exc)) from None
        return lambda row: row.node is not None and row.node.tensor is not None and test(row.node.tensor)
    key, sep, rest = word.partition(":")
    key = key.lower()
    if sep and key in ("name", "shape", "dtype", "size", "device", "re"):
        return {"name": _name_term, "shape": _shape_term, "dtype": _dtype_term, "size": _size_term,
                "device": _device_term, "re": _regex_term}[key](rest)
    if len(word) >= 2 and word.startswith("/") and word.endswith("/"):
        return _regex_term(word[1:-1])
    if _SIZE.match(word):
        return _size_term(word)
    if _SHAPE.match(word):
        return _shape_term(word)
    if dtypes.resolve(word) is not None:
        return _dtype_term(word)
    return _name_term(word)


def _name_term(text: str) -> Predicate:
    needle = text.lower()
    if any(ch in needle for ch in "*?["):
        # Anchored at a dot boundary, so `layers.*.bias` also finds `state_dict.model.layers.0.bias`.
        pattern = re.compile(r"(?:.*\.)?" + fnmatch.translate(needle))
        return lambda row: pattern.match(row.search_name) is not None
    return lambda row: needle in row.search_name


def _regex_term(text: str) -> Predicate:
    try:
        pattern = re.compile(text, re.IGNORECASE)
    except re.error as exc:
        raise QueryError(f"bad regular expression /{text}/: {exc}") from None
    return lambda row: pattern.search(row.name) is not None


def _shape_term(text: str) -> Predicate:
    body = text.strip().strip("[]()").strip()
    dims = [d.strip() for d in re.split(r"[x×,]", body, flags=re.IGNORECASE)] if body else []
    if any(d != "*" and not d.isdigit() for d in dims):
        raise QueryError(f"bad shape '{text}': use numbers and * joined by x, like 768x3072 or *x768")
    want = [None if d == "*" else int(d) for d in dims]

    def match(row: Row) -> bool:
        info = row.node.tensor if row.node is not None else None
        if info is None or len(info.shape) != len(want):
            return False
        return all(w is None or w == s for w, s in zip(want, info.shape, strict=True))

    return match


def _dtype_term(text: str) -> Predicate:
    name = text.lower().removeprefix("torch.")
    name = dtypes.resolve(name) or name
    if any(ch in name for ch in "*?["):
        pattern = re.compile(fnmatch.translate(name))
        return lambda row: (row.node is not None and row.node.tensor is not None
                            and pattern.match(row.node.tensor.dtype) is not None)
    return lambda row: row.node is not None and row.node.tensor is not None and row.node.tensor.dtype == name


def _size_term(text: str) -> Predicate:
    match = _SIZE.match(text.strip())
    if not match:
        raise QueryError(f"bad size '{text}': use a comparison and a size, like >10MB or <=4KiB")
    op, number, unit = match.groups()
    unit = (unit or "").lower()
    if unit not in _UNITS:
        unit = unit + "b" if unit + "b" in _UNITS else unit
    if unit not in _UNITS:
        raise QueryError(f"bad size unit in '{text}'")
    limit, compare = float(number) * _UNITS[unit], _OPS[op]
    return lambda row: row.node is not None and row.node.tensor is not None and compare(row.nbytes, limit)


def _device_term(text: str) -> Predicate:
    needle = text.lower()
    return lambda row: (row.node is not None and row.node.tensor is not None
                        and needle in row.node.tensor.device.lower())


def visible_rows(top: Row, query: Query, rows: list[Row] | None = None) -> tuple[set[int], int]:
    """ids of the rows to show (matches and their ancestors) and the number of matching leaves.

    `rows` is `list(top.walk())` when the caller keeps it (the tree model does, for speed).
    """
    rows = list(top.walk()) if rows is None else rows
    predicates = query.predicates
    if len(predicates) == 1:
        matched = list(filter(predicates[0], rows))
    else:
        matched = [row for row in rows if all(p(row) for p in predicates)]
    visible: set[int] = {id(top)}
    count = 0
    for row in matched:
        if row is top:
            continue
        if not row.children:
            count += 1
        up: Row | None = row
        while up is not None and id(up) not in visible:
            visible.add(id(up))
            up = up.parent
    return visible, count


@dataclass(frozen=True)
class RowOrder:
    """Rows placed by a figure (a `sort:` term): `keys` maps id(row) to the value that places it."""

    order: FigureOrder
    keys: dict[int, float]

    def key(self, row: Row) -> tuple[bool, float]:
        """The sort key of `row` (ascending sort; rows without the figure last)."""
        return self.order.key(self.keys.get(id(row)))

    def value(self, row: Row) -> float | None:
        """The figure that places `row` (a module's: that of its first tensor), or None."""
        return self.keys.get(id(row))


def row_order(query: Query, rows: list[Row]) -> RowOrder | None:
    """How `query`'s `sort:` term places the rows (None without one), once its figures are computed: a
    tensor by its own figure, a module (any row with children) by that of its first tensor in the order
    (the largest below it, or the smallest). `rows` is `list(top.walk())`: depth first, so walking it
    backwards meets every child before its parent. Rows without the figure (not computed, not defined)
    have no key and come last."""
    order = query.order
    if order is None:
        return None
    figure, values = order.figure, query.figures
    keys: dict[int, float] = {}
    for row in reversed(rows):
        info = row.node.tensor if row.node is not None else None
        mine = order.better(keys.get(id(row)), values.get(info, figure) if info is not None else None)
        if mine is None:
            continue
        keys[id(row)] = mine
        if row.parent is not None:
            best = order.better(keys.get(id(row.parent)), mine)
            assert best is not None
            keys[id(row.parent)] = best
    return RowOrder(order, keys)


def matching_names(top: Row, query: Query) -> set[str]:
    """The names of the tensors and values under `top` that `query` matches (groups are not entries)."""
    return {row.name for row in top.walk() if row.node is not None and row.node.kind in ("tensor", "value")
            and query.matches(row)}

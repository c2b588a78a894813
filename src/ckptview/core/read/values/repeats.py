"""Views that repeat their storage: one rule for every reader of values, cost bounded by the bytes stored.

A torch file stores storages and views over them. Most views hold each stored element at most once, so
reading a view costs at most what its storage holds. Three kinds of view declare more elements than they
store, and a reader that walks their declared shape pays for elements the file never held:

- **stride 0** (`t.expand(...)`): a dimension of size > 1 whose elements are all one stored element;
- **overlapping strides** (`t.as_strided(...)`, `unfold`): positions of the view that land on the same
  stored element, more of them than the storage elements the view spans;
- both at once; either way the view holds more elements than its storage.

A 1.5 KB file holding a (2, 250,000,000) stride-0 view of one 4-byte element declares 2 GB of values.
:func:`repeats` finds such a view from its shape, strides and offset alone (no value is read) and says what
it stores: the **stored part**, a view of the same storage holding each stored element the view reaches
(a stride-0 view collapsed to size 1 along its repeated dimensions; an overlapping view as the run of
storage elements it spans, at the strides' common step). Readers follow one rule:

- figures that are sums over values (statistics, histograms, heat-maps) read the stored part, with the
  repeat factor said. For stride 0 alone every stored element repeats equally often (``weight``), so the
  figures are those of the whole tensor; for overlapping strides they are the stored elements' own.
- anything that needs every logical element (spectra, exports, an element-by-element comparison) is refused
  with one line (:class:`RepeatedStorage`) that gives the expanded size first, unless the caller asks for
  the expanded tensor explicitly (`expand=True` in `reading.iter_chunks` / `read_values`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ckptview.core import dtypes
from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import TensorDataError
from ckptview.core.message import Fix, Hint, Message
from ckptview.core.read.values.capabilities import has_logical_chunks
from ckptview.core.units import human_bytes, plural

STRIDE_0 = "stride 0"
OVERLAPPING = "overlapping strides"
BOTH = "stride 0 and overlapping strides"


class RepeatedStorage(TensorDataError):
    """A reader asked for every element of a view that repeats its storage, without `expand`: one line."""


@dataclass(frozen=True)
class Repeats:
    """What a view that repeats its storage declares and what it stores."""

    kind: str  # STRIDE_0, OVERLAPPING or BOTH
    elements: int  # the view's logical elements (its shape's product)
    stored: int  # storage elements that hold them (the stored part's elements)
    part: TensorInfo  # the stored part: read this instead of the view
    weight: int  # how many logical elements each stored one stands for, when that is uniform (stride 0); else 1
    exact: bool  # figures of the stored part (counted `weight` times) are the whole tensor's

    @property
    def factor(self) -> float:
        """Logical elements per stored element."""
        return self.elements / max(self.stored, 1)

    def size_text(self, dtype: str) -> str:
        """The expanded size in words: `500,000,000 elements (1.9 GiB as float32)`."""
        nbytes = self.elements * dtypes.itemsize(dtype) if dtypes.is_known(dtype) else 0
        return f"{plural(self.elements, 'element')} ({human_bytes(nbytes)} as {dtype})"

    def describe(self, dtype: str) -> str:
        """One phrase, the expanded size first: `declares 500,000,000 elements (1.9 GiB as float32) over 2
        stored (it repeats its storage 250,000,000x, stride 0)`."""
        return (f"declares {self.size_text(dtype)} over {self.stored:,} stored (it repeats its storage "
                f"{format_factor(self.factor)}, {self.kind})")

    def to_json(self) -> dict[str, object]:
        """The `"repeats"` object of `info --json`: kind, elements, stored, factor, exact."""
        return {"kind": self.kind, "elements": self.elements, "stored": self.stored,
                "factor": round(self.factor, 6), "exact": self.exact}


def format_factor(factor: float) -> str:
    """61,724x, 2.5x: how many times a view repeats its storage."""
    return f"{factor:,.0f}x" if factor >= 100 else f"{factor:.3g}x"


def repeats(info: TensorInfo) -> Repeats | None:
    """How `info`'s view repeats its storage, or None when it holds each stored element at most once (or
    its values cannot be read anyway: broken, sparse, assembled from chunks, no storage). Cost: a sort of
    its dimensions; nothing is read."""
    shape, stride = tuple(info.shape), tuple(info.stride)
    if info.layout != "strided" or info.storage is None or info.broken or len(shape) != len(stride):
        return None
    if has_logical_chunks(info.storage.source):
        return None  # assembled from chunks (DCP): each chunk is a plain view of its own
    numel = math.prod(shape)
    if numel <= 1:
        return None
    repeated = [i for i, (size, st) in enumerate(zip(shape, stride, strict=True)) if st == 0 and size > 1]
    collapsed = tuple(1 if i in repeated else size for i, size in enumerate(shape))
    weight = math.prod(shape[i] for i in repeated)
    dims = sorted((abs(st), size) for size, st in zip(collapsed, stride, strict=True) if size > 1)
    distinct = math.prod(size for _, size in dims)
    extent = 0  # the last element (from the first) the dimensions seen so far reach
    overlapping = False
    for st, size in dims:
        if st <= extent:
            overlapping = True
        extent += (size - 1) * st
    if overlapping:
        step = math.gcd(*(st for st, _ in dims))
        spanned = extent // step + 1  # storage elements the view can reach, at the strides' common step
        overlapping = distinct > spanned  # fewer stored elements than positions: some repeat
    if not overlapping:
        if weight == 1:
            return None
        part = _view(info, collapsed, stride, info.offset)
        return Repeats(STRIDE_0, numel, distinct, part, weight, exact=True)
    lo = info.offset + sum((size - 1) * st for size, st in zip(shape, stride, strict=True) if st < 0)
    part = _view(info, (spanned,), (step,), lo)
    return Repeats(BOTH if repeated else OVERLAPPING, numel, spanned, part, 1, exact=False)


def _view(info: TensorInfo, shape: tuple[int, ...], stride: tuple[int, ...], offset: int) -> TensorInfo:
    return TensorInfo(dtype=info.dtype, shape=shape, stride=stride, offset=offset, storage=info.storage,
                      requires_grad=info.requires_grad, is_parameter=info.is_parameter, layout=info.layout,
                      extra=info.extra, broken=info.broken)


def stored_part(info: TensorInfo) -> tuple[TensorInfo, int]:
    """(what a figure reads, how many times each value read counts): the stored part of a view that repeats
    its storage, else the view itself, once."""
    found = repeats(info)
    return (found.part, found.weight) if found is not None else (info, 1)


def refusal(info: TensorInfo, what: str, name: str = "") -> RepeatedStorage | None:
    """The one-line refusal of `what` (`no spectrum`, `not exported`) for a view that repeats its storage,
    its expanded size first, with the hint that asking for the expansion reads it; None when the view does
    not repeat."""
    found = repeats(info)
    if found is None:
        return None
    who = f"'{name}' " if name else ""
    return RepeatedStorage(Message(f"{what}: {who}{found.describe(info.dtype)}", Hint(Fix.EXPAND_REPEATS)))


def check_expanded(info: TensorInfo, expand: bool, what: str = "cannot read every element") -> None:
    """Raise the refusal unless `expand` (the caller asked for the expanded tensor) or the view repeats nothing."""
    if not expand:
        refused = refusal(info, what)
        if refused is not None:
            raise refused


def paired_parts(a: TensorInfo, b: TensorInfo) -> tuple[TensorInfo, TensorInfo, int, bool]:
    """(what to read of a, of b, how many times each pair counts, whether the figures are exact) for an
    element-by-element comparison of two same-shape views, bounded by what they store.

    Neither repeats: both whole. Both the same view of their storage (same strides): their stored parts,
    position by position. One repeats and the other does not: both whole, expanded, since the other side
    stores as many elements as the comparison reads. Both repeat, differently: RepeatedStorage (the
    comparison would read more elements than either side stores)."""
    ra, rb = repeats(a), repeats(b)
    if ra is None and rb is None:
        return a, b, 1, True
    if math.prod(a.shape) != math.prod(b.shape):
        raise RepeatedStorage("values not compared: the sides hold different numbers of elements")
    if ra is None or rb is None:
        return a, b, 1, True
    if tuple(a.shape) == tuple(b.shape) and tuple(a.stride) == tuple(b.stride):
        return ra.part, rb.part, ra.weight, ra.exact
    raise RepeatedStorage(f"values not compared: both sides repeat their storage, differently (a {ra.kind}, "
                          f"{format_factor(ra.factor)}; b {rb.kind}, {format_factor(rb.factor)}): comparing "
                          f"{ra.elements:,} positions would read more than either side stores")


def reading_layout(info: TensorInfo) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """What a walk over stored parts reads of `info`: None for a plain view, its (shape, strides) for one that
    repeats its storage. Two versions of a tensor are compared piece by piece only when their layouts are
    equal (a series' update from one checkpoint to the next): then their stored parts match position by
    position, and a comparison costs what they store."""
    return None if repeats(info) is None else (tuple(info.shape), tuple(info.stride))

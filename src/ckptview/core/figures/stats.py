"""Exact statistics of tensor values, streamed in chunks so memory stays bounded (Qt-free, no torch).

Conventions (the same in the GUI, ``ckptview info --stats`` and the tests):

- NaN, +Inf and -Inf are counted exactly and never poison the other figures: mean, std, min, max,
  abs_max and l2 are computed over the *finite* values only.
- ``std`` is the sample standard deviation (Bessel's correction, ``torch.std``'s default
  ``correction=1``); it is ``None`` for fewer than two finite values.
- ``mean``/``std``/``min``/``max``/``abs_max`` are ``None`` when there is no finite value; ``l2`` is
  then ``0.0`` (the norm of nothing).
- Integer tensors give integer ``min``/``max``/``abs_max``; their sums accumulate in float64.
  Bool tensors are read as 0/1, so ``mean`` is the fraction of ``True``.
- Complex tensors are summarised by their magnitude ``|z|`` (so ``neginf`` is always 0).
- Every floating dtype is accumulated in float64. Dtypes of at most 16 bits (bf16, fp16, fp8, int8,
  int16, bool, ...) are counted per bit pattern instead: one fast pass gives a table of exact
  value counts from which the statistics and any histogram follow without reading the tensor again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptview.core.errors import TensorDataError
from ckptview.core.jobs import CancelToken, Progress, drain
from ckptview.core.read.values import repeats
from ckptview.core.read.values.reading import iter_chunks
from ckptview.core.units import plural

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.checkpoint import TensorInfo
    from ckptview.core.read.bytes.files import ReadAhead

DEFAULT_CHUNK_ELEMS = 1 << 22
_BINCOUNT_SLICE = 1 << 19
JSON_KEYS = ("numel", "mean", "std", "min", "max", "abs_max", "l2", "zeros", "nan", "posinf", "neginf")

Number = int | float


@dataclass(frozen=True)
class TensorStats:
    """Exact figures of one tensor (or the merge of several); see the module docstring."""

    numel: int = 0
    mean: float | None = None
    std: float | None = None
    min: Number | None = None
    max: Number | None = None
    abs_max: Number | None = None
    l2: float = 0.0
    zeros: int = 0
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    # Kept so that partial results merge exactly (group rows): finite count and sum of squared deviations.
    finite: int = field(default=0, repr=False)
    m2: float = field(default=0.0, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The contract's ``"stats"`` object: exactly JSON_KEYS, floats as numbers, None as null."""
        out: dict[str, Any] = {}
        for key in JSON_KEYS:
            value = getattr(self, key)
            if isinstance(value, float) and not math.isfinite(value):
                value = None  # JSON has no NaN/Inf; only reachable on float64 overflow
            out[key] = value
        return out


def _finish(
    numel: int, finite: int, total: float, m2: float, lo: Number | None, hi: Number | None,
    zeros: int, nan: int, posinf: int, neginf: int,
) -> TensorStats:
    if finite == 0:
        return TensorStats(numel=numel, zeros=zeros, nan=nan, posinf=posinf, neginf=neginf)
    mean = total / finite
    m2 = max(m2, 0.0)
    std = math.sqrt(m2 / (finite - 1)) if finite > 1 else None
    assert lo is not None and hi is not None
    return TensorStats(
        numel=numel, mean=float(mean), std=std, min=lo, max=hi, abs_max=max(abs(lo), abs(hi)),
        l2=math.sqrt(m2 + finite * mean * mean), zeros=zeros, nan=nan, posinf=posinf, neginf=neginf,
        finite=finite, m2=m2,
    )


def merge_stats(parts: Iterable[TensorStats]) -> TensorStats:
    """Aggregate figures of several tensors (a module's subtree) as if they were one flat tensor."""
    numel = zeros = nan = posinf = neginf = finite = 0
    mean = m2 = 0.0
    lo: Number | None = None
    hi: Number | None = None
    for s in parts:
        numel += s.numel
        zeros += s.zeros
        nan += s.nan
        posinf += s.posinf
        neginf += s.neginf
        if s.finite == 0 or s.mean is None:
            continue
        n = finite + s.finite
        delta = s.mean - mean
        # Chan et al. pairwise merge: stable whatever the sizes of the parts.
        m2 = m2 + s.m2 + delta * delta * finite * s.finite / n
        mean = mean + delta * s.finite / n
        finite = n
        assert s.min is not None and s.max is not None
        lo = s.min if lo is None else min(lo, s.min)
        hi = s.max if hi is None else max(hi, s.max)
    return _finish(numel, finite, mean * finite, m2, lo, hi, zeros, nan, posinf, neginf)


# ---------------------------------------------------------------------------------------------------
# Value tables: exact counts per bit pattern for dtypes of at most 16 bits.


@dataclass(frozen=True)
class ValueTable:
    """Exact multiset of a small-dtype tensor: the distinct ``values`` (float64) and their ``counts``."""

    values: np.ndarray
    counts: np.ndarray
    integer: bool

    def stats(self) -> TensorStats:
        """Statistics of the multiset, with the same conventions as the streamed path."""
        import numpy as np

        v, c = self.values, self.counts
        numel = int(c.sum())
        nan = int(c[np.isnan(v)].sum())
        posinf = int(c[v == np.inf].sum())
        neginf = int(c[v == -np.inf].sum())
        keep = np.isfinite(v) & (c > 0)
        v, c = v[keep], c[keep].astype(np.float64)
        finite = int(c.sum())
        zeros = int(c[v == 0].sum())
        if finite == 0:
            return _finish(numel, 0, 0.0, 0.0, None, None, zeros, nan, posinf, neginf)
        total = float(np.dot(c, v))
        mean = total / finite
        d = v - mean
        m2 = float(np.dot(c, d * d))
        lo, hi = float(v.min()), float(v.max())
        if self.integer:
            lo, hi = int(lo), int(hi)
        return _finish(numel, finite, total, m2, lo, hi, zeros, nan, posinf, neginf)


def _table_dtype(dtype: np.dtype) -> np.dtype | None:
    """Unsigned view type whose bit patterns index a value table, or None when too wide or complex."""
    import numpy as np

    if dtype.kind == "c" or dtype.itemsize > 2:
        return None
    if dtype.kind in "fiubV":
        return np.dtype(np.uint8 if dtype.itemsize == 1 else np.uint16)
    return None


def _pattern_values(dtype: np.dtype) -> np.ndarray:
    """float64 value of every bit pattern of a <=16-bit dtype."""
    import numpy as np

    bits: np.ndarray = np.arange(1 << (8 * dtype.itemsize), dtype=_table_dtype(dtype))
    if dtype.kind == "b":
        nonzero: np.ndarray = bits != 0
        return nonzero.astype(np.float64)
    with np.errstate(invalid="ignore"):  # NaN bit patterns are expected here
        return bits.view(dtype).astype(np.float64)


# ---------------------------------------------------------------------------------------------------
# The streamed pass.


@dataclass(frozen=True)
class Summary:
    """Result of one pass over a tensor: its statistics and, for small dtypes, the exact value table."""

    stats: TensorStats
    table: ValueTable | None = None


@dataclass(frozen=True)
class ChunkFigures:
    """What one chunk of a wide-dtype tensor adds to its figures: counts, and the figures of its finite values
    (`part`, None when it holds none). A tensor's statistics are these folded in order (`_Moments.absorb`)."""

    numel: int = 0
    zeros: int = 0
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    part: TensorStats | None = None


def chunk_figures(chunk: np.ndarray, weight: int = 1, integer: bool = False) -> ChunkFigures:
    """The figures of one chunk's values, each counted `weight` times (`integer`: the tensor's dtype is one)."""
    import numpy as np

    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf in a sum is handled below
        return _chunk_figures(chunk.reshape(-1), weight, integer)


def _chunk_figures(chunk: np.ndarray, weight: int, integer: bool) -> ChunkFigures:
    import numpy as np

    numel = chunk.size * weight
    if chunk.size == 0:
        return ChunkFigures(numel)
    nan = posinf = neginf = 0
    if chunk.dtype.kind == "c":
        # Magnitude computed in double precision; NaN/Inf parts stay NaN/Inf.
        chunk = np.abs(chunk.astype(np.complex128, copy=False))
    lo: Number | None
    hi: Number | None
    total: float | None = None
    if integer:
        lo, hi = int(chunk.min()), int(chunk.max())
        x = chunk.astype(np.float64)
        finite = x
    else:
        x = chunk.astype(np.float64, copy=False)
        lo = hi = None
        total = float(x.sum())
        finite = x
        if not math.isfinite(total):  # any NaN/Inf (or float64 overflow): take the careful path
            nan = int(np.count_nonzero(np.isnan(x))) * weight
            posinf = int(np.count_nonzero(x == np.inf)) * weight
            neginf = int(np.count_nonzero(x == -np.inf)) * weight
            finite = x[np.isfinite(x)]
            total = None
    # One pass per figure, each on the narrowest array holding the same values: when every value is
    # finite, zeros, min and max are read from the chunk itself (float32 converts to float64 exactly).
    same = finite is x and total is not None and chunk.dtype.kind == "f" and chunk.dtype.itemsize <= 8
    narrow = chunk if same else finite
    zeros = (finite.size - int(np.count_nonzero(narrow))) * weight
    n = finite.size
    if n == 0:
        return ChunkFigures(numel, zeros, nan, posinf, neginf)
    mean = (total if same and total is not None else float(finite.sum())) / n  # x.sum(): not summed again
    if lo is None:
        lo, hi = float(narrow.min()), float(narrow.max())
    # The deviations overwrite the float64 copy when it is this pass's own (never the caller's chunk).
    own = finite is not chunk and finite.base is not chunk
    d = np.subtract(finite, mean, out=finite) if own else finite - mean
    # einsum, not np.dot: a BLAS dot spins its thread pool (8x slower here, 1 Mi values: 8.4 ms against
    # 1.0 ms) and its sum's order depends on its thread count; einsum's does not (as diff._sq).
    m2 = float(np.einsum("i,i->", d, d))
    # Each value repeated `weight` times: same mean, `weight` times the squared deviations.
    part = TensorStats(numel=n * weight, mean=mean, min=lo, max=hi, finite=n * weight, m2=m2 * weight)
    return ChunkFigures(numel, zeros, nan, posinf, neginf, part)


class _Moments:
    """Running figures of the wide-dtype path, merged chunk by chunk in float64, in the chunks' order."""

    def __init__(self, integer: bool) -> None:
        self.integer = integer
        self.numel = self.zeros = self.nan = self.posinf = self.neginf = 0
        self.part: TensorStats = TensorStats()

    def absorb(self, figures: ChunkFigures) -> None:
        """Add the next chunk's figures."""
        self.numel += figures.numel
        self.zeros += figures.zeros
        self.nan += figures.nan
        self.posinf += figures.posinf
        self.neginf += figures.neginf
        if figures.part is not None:
            self.part = merge_stats([self.part, figures.part])

    def stats(self) -> TensorStats:
        p = self.part
        return _finish(
            self.numel, p.finite, (p.mean or 0.0) * p.finite, p.m2, p.min, p.max,
            self.zeros, self.nan, self.posinf, self.neginf,
        )


@dataclass
class PartialSummary:
    """One pass over consecutive chunks of a tensor's values (the whole tensor, or a block of it read by a
    worker of its own). Parts merged in order (`merge_partials`) give exactly the Summary of one pass over
    all of their chunks: value tables add up, and the figures of each chunk are folded in the same order."""

    dtype: np.dtype | None = None  # of the values (None: no chunk at all)
    counts: np.ndarray | None = None  # dtypes of at most 16 bits: exact count of each bit pattern
    chunks: list[ChunkFigures] = field(default_factory=list)  # wider dtypes: each chunk's figures, in order


def iter_partial_summary(
    chunks: Iterable[np.ndarray], total: int = 0, token: CancelToken | None = None, weight: int = 1
) -> Generator[Progress, None, PartialSummary]:
    """One pass over ``chunks`` (see `iter_summary`), its figures kept apart so that they merge exactly."""
    import numpy as np

    out = PartialSummary()
    view: np.dtype | None = None
    integer = False
    done = 0
    for chunk in chunks:
        if token is not None:
            token.check()
        chunk = np.asarray(chunk)
        if out.dtype is None:
            out.dtype = chunk.dtype
            view = _table_dtype(chunk.dtype)
            integer = chunk.dtype.kind in "iub"
            if view is not None:
                out.counts = np.zeros(1 << (8 * view.itemsize), dtype=np.int64)
        if out.counts is not None:
            assert view is not None  # counts are kept only for a dtype with a bit-pattern view
            bits = chunk.reshape(-1).view(view)
            # bincount copies its input as intp (4x a 16-bit chunk): feed it slices to bound that copy.
            for start in range(0, bits.size, _BINCOUNT_SLICE):  # bounded: the chunk's values
                part = np.bincount(bits[start : start + _BINCOUNT_SLICE], minlength=out.counts.size)
                out.counts += part if weight == 1 else part * weight
        else:
            out.chunks.append(chunk_figures(chunk, weight, integer))
        done += chunk.size
        yield Progress(done, max(total, done), "statistics")
    return out


def merge_partials(parts: Sequence[PartialSummary]) -> Summary:
    """The Summary of a tensor from the partial summaries of its consecutive blocks, in order."""
    dtype = next((p.dtype for p in parts if p.dtype is not None), None)
    if dtype is None:  # no chunk at all: an empty tensor
        return Summary(TensorStats())
    integer = dtype.kind in "iub"
    if _table_dtype(dtype) is not None:
        counts = None
        for p in parts:
            if p.counts is not None:
                counts = p.counts.copy() if counts is None else counts + p.counts
        assert counts is not None
        table = ValueTable(_pattern_values(dtype), counts, integer=integer)
        return Summary(table.stats(), table)
    moments = _Moments(integer=integer)
    for p in parts:
        for figures in p.chunks:
            moments.absorb(figures)
    return Summary(moments.stats())


def iter_summary(
    chunks: Iterable[np.ndarray], total: int = 0, token: CancelToken | None = None, weight: int = 1
) -> Generator[Progress, None, Summary]:
    """One pass over the chunks of a tensor's logical values; yields Progress, returns a Summary.

    ``total`` is the number of elements expected (for progress only). Each value counts ``weight``
    times (a stride-0 view's stored values: see ``ckptview.core.read.values.repeats``). Raises
    ``Cancelled`` when ``token`` is cancelled between chunks. The pass is `iter_partial_summary` merged
    alone: a tensor read in blocks by several workers gets the same figures, bit for bit.
    """
    part = yield from iter_partial_summary(chunks, total, token, weight)
    return merge_partials([part])


def compute_stats(chunks: Iterable[np.ndarray], token: CancelToken | None = None) -> TensorStats:
    """Statistics of the values in ``chunks`` (plain-function form of :func:`iter_summary`)."""
    return drain(iter_summary(chunks, token=token)).stats


# ---------------------------------------------------------------------------------------------------
# Convenience over TensorInfo (values read lazily by ckptview.core.read.values.reading).


def chunk_source(info: TensorInfo, chunk_elems: int = DEFAULT_CHUNK_ELEMS,
                 ahead: ReadAhead | None = None) -> Callable[[], Iterable[np.ndarray]]:
    """A factory of fresh chunk iterators over ``info``'s values (multi-pass jobs call it again);
    `ahead`: the read-ahead of the walk reading them."""
    return lambda: iter_chunks(info, chunk_elems, ahead)


MAX_COUNTED = 1 << 62  # element counts are int64 in the value tables


def stored_part(info: TensorInfo) -> tuple[TensorInfo, int]:
    """(what to read, how many times each value read counts): of a view that repeats its storage, only what
    it stores (`ckptview.core.read.values.repeats`): figures cost the bytes stored, never the shape declared."""
    if info.numel >= MAX_COUNTED:
        raise TensorDataError(f"cannot compute figures: the tensor declares {plural(info.numel, 'element')}")
    return repeats.stored_part(info)


def iter_tensor_summary(
    info: TensorInfo, token: CancelToken | None = None, chunk_elems: int = DEFAULT_CHUNK_ELEMS,
    ahead: ReadAhead | None = None,
) -> Generator[Progress, None, Summary]:
    """Progress-yielding one-pass Summary of a tensor's values (an expanded tensor's: of what it stores)."""
    part, weight = stored_part(info)
    return iter_summary(chunk_source(part, chunk_elems, ahead)(), total=part.numel, token=token, weight=weight)


def tensor_stats(
    info: TensorInfo, token: CancelToken | None = None, chunk_elems: int = DEFAULT_CHUNK_ELEMS,
    ahead: ReadAhead | None = None,
) -> TensorStats:
    """Exact statistics of one tensor."""
    return drain(iter_tensor_summary(info, token, chunk_elems, ahead)).stats


def stats_json_for(info: TensorInfo, chunk_elems: int = DEFAULT_CHUNK_ELEMS,
                   ahead: ReadAhead | None = None) -> dict[str, Any]:
    """The ``"stats"`` object of ``ckptview info --stats`` for one tensor."""
    return tensor_stats(info, chunk_elems=chunk_elems, ahead=ahead).to_json()

"""Histograms of tensor values: exact and streamed, or a quick preview from a seeded sample (Qt-free).

Bins are ``bins`` equal-width intervals over the finite range (or an explicit range), the last one
closed, exactly as ``numpy.histogram`` assigns them; NaN, +Inf and -Inf are counted apart. With
``log_x`` the bins are over ``log10(|x|)`` of the finite non-zero values and zeros are counted apart.
Small dtypes (bf16, fp16, fp8, int8, ...) bin their exact value table, so no second pass is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptview.core.figures.stats import (
    DEFAULT_CHUNK_ELEMS,
    Summary,
    ValueTable,
    chunk_source,
    iter_summary,
    stored_part,
)
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.values.reading import read_flat, read_values

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.checkpoint import TensorInfo

DEFAULT_BINS = 100
PREVIEW_SAMPLES = 1 << 16


@dataclass(frozen=True)
class Histogram:
    """Counts per bin plus the values that no bin holds."""

    edges: np.ndarray  # bins + 1 float64 edges (of log10|x| when log_x)
    counts: np.ndarray  # int64 per bin
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    zeros: int = 0  # finite zeros left out of a log_x histogram (0 otherwise)
    outside: int = 0  # finite values outside an explicit range
    log_x: bool = False
    exact: bool = True
    looked_at: int = 0  # elements examined: numel when exact, the sample size otherwise

    @property
    def centers(self) -> np.ndarray:
        """Bin centres (for plotting and hover)."""
        centers: np.ndarray = (self.edges[:-1] + self.edges[1:]) / 2
        return centers


def bin_edges(lo: float, hi: float, bins: int) -> np.ndarray:
    """Equal-width edges over [lo, hi]; a degenerate range widens by 0.5 each way like numpy."""
    import numpy as np

    if bins < 1:
        raise ValueError(f"bin count must be at least 1, not {bins}")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, bins + 1)


def count_bins(x: np.ndarray, edges: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """(counts per bin, number outside) of finite float64 ``x`` (optionally weighted by counts)."""
    import numpy as np

    n = edges.size - 1
    lo, hi = edges[0], edges[-1]
    inside = (x >= lo) & (x <= hi)
    outside = int(x.size - np.count_nonzero(inside)) if weights is None else int(weights[~inside].sum())
    if not inside.all():
        x = x[inside]
        weights = None if weights is None else weights[inside]
    idx = ((x - lo) * (n / (hi - lo))).astype(np.intp)
    np.minimum(idx, n - 1, out=idx)
    # The float index can be one off near an edge; settle it against the edges themselves (numpy's rule).
    idx[x < edges[idx]] -= 1
    idx[(x >= edges[idx + 1]) & (idx != n - 1)] += 1
    counts = np.bincount(idx, weights=weights, minlength=n)
    return counts.astype(np.int64), outside


def _as_float(chunk: np.ndarray) -> np.ndarray:
    import numpy as np

    chunk = chunk.reshape(-1)
    if chunk.dtype.kind == "c":
        chunk = np.abs(chunk.astype(np.complex128, copy=False))
    return chunk.astype(np.float64, copy=False)


def _split(x: np.ndarray, log_x: bool) -> tuple[np.ndarray, int, int, int, int]:
    """(finite values on the histogram's axis, nan, posinf, neginf, zeros left out)."""
    import numpy as np

    nan = posinf = neginf = zeros = 0
    finite = np.isfinite(x)
    if not finite.all():
        nan = int(np.count_nonzero(np.isnan(x)))
        posinf = int(np.count_nonzero(x == np.inf))
        neginf = int(np.count_nonzero(x == -np.inf))
        x = x[finite]
    if log_x:
        a = np.abs(x)
        nonzero = a > 0
        zeros = int(a.size - np.count_nonzero(nonzero))
        x = np.log10(a[nonzero])
    return x, nan, posinf, neginf, zeros


def histogram_of_array(
    x: np.ndarray, bins: int = DEFAULT_BINS, value_range: tuple[float, float] | None = None,
    log_x: bool = False, exact: bool = True,
) -> Histogram:
    """Histogram of an in-memory array (any dtype numpy can upcast to float64)."""
    import numpy as np

    axis, nan, posinf, neginf, zeros = _split(_as_float(np.asarray(x)), log_x)
    if value_range is None:
        value_range = (float(axis.min()), float(axis.max())) if axis.size else (0.0, 1.0)
    edges = bin_edges(*value_range, bins)
    counts, outside = count_bins(axis, edges)
    return Histogram(edges, counts, nan, posinf, neginf, zeros, outside, log_x, exact, int(np.size(x)))


def histogram_from_table(
    table: ValueTable, bins: int = DEFAULT_BINS, value_range: tuple[float, float] | None = None,
    log_x: bool = False,
) -> Histogram:
    """Exact histogram of a small-dtype tensor from its value table (no pass over the data)."""
    import numpy as np

    v, c = table.values, table.counts
    nan = int(c[np.isnan(v)].sum())
    posinf = int(c[v == np.inf].sum())
    neginf = int(c[v == -np.inf].sum())
    keep = np.isfinite(v) & (c > 0)
    v, c = v[keep], c[keep]
    zeros = 0
    if log_x:
        zero = v == 0
        zeros = int(c[zero].sum())
        v, c = np.log10(np.abs(v[~zero])), c[~zero]
    if value_range is None:
        value_range = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
    edges = bin_edges(*value_range, bins)
    counts, outside = count_bins(v, edges, weights=c.astype(np.float64))
    return Histogram(edges, counts, nan, posinf, neginf, zeros, outside, log_x, True, int(table.counts.sum()))


def iter_exact_histogram(
    chunks: Callable[[], Iterable[np.ndarray]], bins: int = DEFAULT_BINS,
    value_range: tuple[float, float] | None = None, log_x: bool = False, total: int = 0,
    token: CancelToken | None = None, summary: Summary | None = None, weight: int = 1,
) -> Generator[Progress, None, Histogram]:
    """Exact histogram streamed over ``chunks()``, each value counted ``weight`` times; yields Progress.

    Two passes at most: the range (taken from ``summary`` when given), then the counts. A small
    dtype needs one pass (its value table), or none when ``summary`` already holds the table.
    """
    import numpy as np

    if summary is None:
        summary = yield from iter_summary(chunks(), total, token, weight)
    if summary.table is not None:
        return histogram_from_table(summary.table, bins, value_range, log_x)
    if value_range is None:
        s = summary.stats
        if not log_x:
            value_range = (float(s.min), float(s.max)) if s.min is not None and s.max is not None else (0.0, 1.0)
        else:
            value_range = yield from _iter_log_range(chunks(), total, token)
    edges = bin_edges(*value_range, bins)
    counts = np.zeros(bins, dtype=np.int64)
    nan = posinf = neginf = zeros = outside = done = 0
    for chunk in chunks():
        if token is not None:
            token.check()
        axis, n, p, m, z = _split(_as_float(chunk), log_x)
        part, out = count_bins(axis, edges)
        counts += part if weight == 1 else part * weight
        nan, posinf, neginf = nan + n * weight, posinf + p * weight, neginf + m * weight
        zeros, outside = zeros + z * weight, outside + out * weight
        done += chunk.size
        yield Progress(done, max(total, done), "histogram")
    return Histogram(edges, counts, nan, posinf, neginf, zeros, outside, log_x, True, done * weight)


def _iter_log_range(
    chunks: Iterable[np.ndarray], total: int, token: CancelToken | None
) -> Generator[Progress, None, tuple[float, float]]:
    import numpy as np

    lo, hi, done = np.inf, -np.inf, 0
    for chunk in chunks:
        if token is not None:
            token.check()
        axis = _split(_as_float(chunk), True)[0]
        if axis.size:
            lo, hi = min(lo, float(axis.min())), max(hi, float(axis.max()))
        done += chunk.size
        yield Progress(done, max(total, done), "histogram range")
    return (lo, hi) if lo <= hi else (0.0, 1.0)


def sample_positions(n: int, max_count: int = PREVIEW_SAMPLES, seed: int = 0, block: int = 256) -> np.ndarray:
    """Sorted flat positions of a seeded sample of `n` elements: random runs of `block` consecutive ones."""
    import numpy as np

    block = max(1, min(block, max_count, n))
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n - block + 1, size=max(1, max_count // block))
    return np.unique((starts[:, None] + np.arange(block)).reshape(-1))


def sample_values(values: np.ndarray, max_count: int = PREVIEW_SAMPLES, seed: int = 0, block: int = 256) -> np.ndarray:
    """A bounded, seeded sample of a (possibly memory-mapped) array, as a flat array.

    Random runs of ``block`` consecutive elements rather than single positions: the preview then
    touches a few hundred pages of a mapped file instead of tens of thousands.
    """
    import numpy as np

    n = int(np.size(values))
    if n <= max_count:
        return np.asarray(values).reshape(-1)
    flat = sample_positions(n, max_count, seed, block)
    picked: np.ndarray = values.reshape(-1)[flat] if values.flags.c_contiguous else \
        values[np.unravel_index(flat, values.shape)]
    return picked


def sample_histogram(
    values: np.ndarray, bins: int = DEFAULT_BINS, log_x: bool = False,
    value_range: tuple[float, float] | None = None, max_count: int = PREVIEW_SAMPLES, seed: int = 0,
) -> Histogram:
    """A quick preview histogram from a seeded sample of ``values`` (``exact`` is False when sampled)."""
    import numpy as np

    sample = sample_values(values, max_count, seed)
    hist = histogram_of_array(sample, bins, value_range, log_x, exact=sample.size == np.size(values))
    return hist


def iter_tensor_histogram(
    info: TensorInfo, bins: int = DEFAULT_BINS, log_x: bool = False,
    value_range: tuple[float, float] | None = None, summary: Summary | None = None,
    token: CancelToken | None = None, chunk_elems: int = DEFAULT_CHUNK_ELEMS,
) -> Generator[Progress, None, Histogram]:
    """Exact histogram of one tensor's values, streamed from its lazy chunks (an expanded tensor's:
    from the values it stores, each counted as often as it repeats)."""
    part, weight = stored_part(info)
    return iter_exact_histogram(
        chunk_source(part, chunk_elems), bins, value_range, log_x, part.numel, token, summary, weight
    )


def tensor_sample_histogram(
    info: TensorInfo, bins: int = DEFAULT_BINS, log_x: bool = False,
    value_range: tuple[float, float] | None = None, max_count: int = PREVIEW_SAMPLES,
) -> Histogram:
    """Preview histogram of one tensor from a bounded sample of its values (only the sampled runs are read)."""
    part, _weight = stored_part(info)  # the same distribution, from the values actually stored
    if part.numel > max_count and part.is_contiguous:
        flat = sample_positions(part.numel, max_count, seed=0)
        sample = read_flat(part, flat)
        if sample is not None:
            return histogram_of_array(sample, bins, value_range, log_x, exact=False)
    return sample_histogram(read_values(part), bins, log_x, value_range, max_count)

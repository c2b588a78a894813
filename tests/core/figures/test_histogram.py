"""Histograms compared with numpy.histogram and torch.histc on the finite values of the same tensor."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ckptview.core.figures.histogram import (
    histogram_of_array,
    iter_exact_histogram,
    sample_histogram,
    sample_values,
)
from ckptview.core.figures.stats import iter_summary
from ckptview.core.jobs import drain
from tests.core.figures.test_stats import chunked, make, to_numpy


def exact(t: torch.Tensor, bins: int = 100, chunk: int = 97, **kw):
    chunks = chunked(t, chunk)
    return drain(iter_exact_histogram(lambda: iter(chunks), bins, total=t.numel(), **kw))


def finite64(t: torch.Tensor) -> np.ndarray:
    x = t.to(torch.float64).reshape(-1).numpy()
    return x[np.isfinite(x)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8,
                                   torch.int32, torch.float8_e4m3fn])
@pytest.mark.parametrize("bins", [1, 7, 100])
def test_exact_histogram_matches_numpy(dtype: torch.dtype, bins: int) -> None:
    t = make(dtype, (41, 29), dtype.is_floating_point)
    h = exact(t, bins)
    ref = finite64(t)
    want, edges = np.histogram(ref, bins=bins, range=(ref.min(), ref.max()))
    np.testing.assert_array_equal(h.counts, want)
    np.testing.assert_allclose(h.edges, edges)
    x = t.to(torch.float64)
    assert (h.nan, h.posinf, h.neginf) == (int(x.isnan().sum()), int((x == math.inf).sum()),
                                           int((x == -math.inf).sum()))
    assert h.exact and h.counts.sum() + h.nan + h.posinf + h.neginf == t.numel()


def test_exact_histogram_matches_torch_histc() -> None:
    t = make(torch.float32, (300, 70), True)
    fin = t[torch.isfinite(t)].double()
    h = exact(t, 64, chunk=1000)
    want = torch.histc(fin, bins=64, min=float(fin.min()), max=float(fin.max())).long().numpy()
    # histc settles edge ties by float rounding rather than by the edges; on random data they agree.
    np.testing.assert_array_equal(h.counts, want)


def test_small_dtype_uses_the_value_table_and_reuses_a_summary() -> None:
    t = make(torch.bfloat16, (5000,), True)
    chunks = chunked(t, 512)
    summary = drain(iter_summary(chunks))
    assert summary.table is not None
    calls = []

    def source():
        calls.append(1)
        return iter(chunks)

    for bins in (10, 333):
        h = drain(iter_exact_histogram(source, bins, summary=summary))
        ref = finite64(t)
        np.testing.assert_array_equal(h.counts, np.histogram(ref, bins, (ref.min(), ref.max()))[0])
    assert calls == []  # the table answers any bin count without reading the tensor again


def test_log_magnitude_histogram() -> None:
    for dtype in (torch.float32, torch.bfloat16):
        t = make(dtype, (2000,), True)
        h = exact(t, 50, log_x=True)
        fin = finite64(t)
        mags = np.log10(np.abs(fin[fin != 0]))
        want = np.histogram(mags, 50, (mags.min(), mags.max()))[0]
        np.testing.assert_array_equal(h.counts, want)
        assert h.zeros == int((fin == 0).sum()) > 0 and h.log_x


def test_explicit_range_counts_outside_values() -> None:
    t = torch.arange(-10, 11, dtype=torch.float32)
    h = exact(t, 4, value_range=(-2.0, 2.0))
    np.testing.assert_array_equal(h.counts, np.histogram(t.numpy(), 4, (-2, 2))[0])
    assert h.outside == 16


def test_constant_and_empty_tensors() -> None:
    h = exact(torch.full((10,), 3.0), 4)
    assert h.counts.sum() == 10 and h.edges[0] == 2.5 and h.edges[-1] == 3.5
    h = exact(torch.empty(0), 4)
    assert h.counts.sum() == 0
    h = exact(torch.full((3,), math.nan), 4)
    assert h.counts.sum() == 0 and h.nan == 3


def test_sample_preview_is_bounded_seeded_and_drawn_from_the_values() -> None:
    big = np.random.default_rng(1).standard_normal((600, 500)).astype(np.float32)
    a = sample_values(big, max_count=4096, seed=3)
    b = sample_values(big, max_count=4096, seed=3)
    np.testing.assert_array_equal(a, b)
    assert 0 < a.size <= 4096 and np.isin(a, big).all()
    # A transposed (non-contiguous) view samples without copying the whole array.
    assert np.isin(sample_values(big.T, max_count=1000), big).all()
    h = sample_histogram(big, bins=20, max_count=4096)
    assert not h.exact and h.counts.sum() == h.looked_at == a.size
    small = sample_histogram(big[:2], bins=20)
    assert small.exact and small.counts.sum() == 1000


def test_sample_preview_of_bf16_looks_like_the_exact_histogram() -> None:
    t = torch.randn(200_000).to(torch.bfloat16)
    h_exact = exact(t, 20, chunk=1 << 16)
    values = to_numpy(t)
    preview = sample_histogram(values, 20, value_range=(float(h_exact.edges[0]), float(h_exact.edges[-1])))
    share = preview.counts / preview.counts.sum()
    want = h_exact.counts / h_exact.counts.sum()
    assert np.abs(share - want).max() < 0.02


def test_histogram_of_array_counts_non_finite_apart() -> None:
    h = histogram_of_array(np.array([1.0, np.nan, np.inf, -np.inf, 2.0]), bins=2)
    assert list(h.counts) == [1, 1] and (h.nan, h.posinf, h.neginf) == (1, 1, 1)

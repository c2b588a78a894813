"""The diff kernel works in cache-sized blocks: figures over many blocks equal one float64 pass."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from ckptview.core.compare.diff import BLOCK_ELEMS, compare_arrays


def _figures(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """The module's figures computed directly in float64, in one pass (the reference)."""
    x, y = a.astype(np.float64), b.astype(np.float64)
    fin = np.isfinite(x) & np.isfinite(y)
    both_nan = np.isnan(x) & np.isnan(y)
    with np.errstate(invalid="ignore"):
        same_inf = np.isinf(x) & (x == y)
    nonfinite_changed = int((~fin & ~(both_nan | same_inf)).sum())
    d = y[fin] - x[fin]
    changed = int(np.count_nonzero(d)) + nonfinite_changed
    norm_a, norm_b = math.sqrt((x[fin] ** 2).sum()), math.sqrt((y[fin] ** 2).sum())
    return {"changed": changed, "nonfinite_changed": nonfinite_changed, "max_abs": float(np.abs(d).max()),
            "sum_abs": float(np.abs(d).sum()), "rel": math.sqrt((d ** 2).sum()) / norm_a,
            "cosine": float((x[fin] * y[fin]).sum()) / (norm_a * norm_b)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_many_blocks_match_one_pass(dtype):
    rng = np.random.default_rng(7)
    n = 3 * BLOCK_ELEMS + 12_345  # several blocks and a partial one
    a = rng.standard_normal(n).astype(dtype)
    b = a.copy()
    b[BLOCK_ELEMS:] = (b[BLOCK_ELEMS:].astype(np.float32) + rng.standard_normal(n - BLOCK_ELEMS)
                       .astype(np.float32) * 0.01).astype(dtype)  # the first block byte-equal
    b[2 * BLOCK_ELEMS + 5] = np.nan  # a NaN on one side only, in the third block
    a[-3], b[-3] = np.inf, np.inf  # the same infinity: unchanged
    a[-2], b[-2] = np.nan, np.nan  # NaN on both sides: unchanged
    want = _figures(a, b)
    for chunk in (1 << 20, BLOCK_ELEMS - 1, 50_000):
        sums = compare_arrays(a, b, chunk_elems=chunk)
        got = sums.figures()
        assert sums.changed == want["changed"] and sums.nonfinite_changed == want["nonfinite_changed"] == 1
        assert got["max_abs_diff"] == want["max_abs"]
        assert got["mean_abs_diff"] == pytest.approx(want["sum_abs"] / sums.finite, rel=1e-12)
        assert got["rel_l2"] == pytest.approx(want["rel"], rel=1e-9)
        assert got["cosine"] == pytest.approx(want["cosine"], rel=1e-12)


def test_identical_blocks_and_signed_zeros():
    a = np.zeros(2 * BLOCK_ELEMS + 3, np.float32)
    b = a.copy()
    b[::2] = -0.0  # different bytes, equal values
    sums = compare_arrays(a, b)
    assert sums.changed == 0 and sums.figures()["rel_l2"] == 0.0
    c = np.arange(2 * BLOCK_ELEMS + 3, dtype=np.int64)
    sums = compare_arrays(c, c.copy())
    assert sums.changed == 0 and sums.aa == pytest.approx(float((c.astype(np.float64) ** 2).sum()), rel=1e-12)

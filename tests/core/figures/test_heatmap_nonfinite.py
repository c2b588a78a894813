"""NaN, +Inf and -Inf are never hidden in a heat-map (issue 25, finding 2): a block holding one is drawn as
that value (NaN first, then the infinity of its sign), and the heat-map counts each kind."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from ckptview.core.figures.heatmap import heatmap, iter_heatmap
from ckptview.core.jobs import drain


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("max_shape", [(1000, 1000), (4, 4)])
def test_one_nan_and_infinities_survive_downsampling_and_are_counted(dtype, max_shape):
    t = torch.randn(40, 60) * 100
    t[3, 7] = float("nan")
    t[20, 30] = float("inf")
    t[35, 2] = float("-inf")
    t[36, 3] = float("-inf")
    values = t.to(getattr(torch, dtype))
    arr = values.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if dtype == "bfloat16" else values.numpy()
    hm = heatmap(arr, max_shape=max_shape)
    br, bc = hm.block
    assert np.isnan(hm.image[3 // br, 7 // bc])
    assert hm.image[20 // br, 30 // bc] == np.inf
    assert hm.image[35 // br, 2 // bc] == -np.inf
    assert (hm.nan, hm.posinf, hm.neginf) == (1, 1, 2)
    assert int(np.isnan(values.double().numpy()).sum()) == hm.nan  # as torch counts them


def test_streamed_counts_equal_the_whole():
    m = np.random.default_rng(1).standard_normal((203, 61)).astype(np.float32)
    m[::17, ::5] = np.nan
    m[5, ::3] = np.inf
    whole = heatmap(m, max_shape=(20, 20))
    for chunk in (1, 61, 10_000):
        streamed = drain(iter_heatmap(m, max_shape=(20, 20), chunk_elems=chunk))
        np.testing.assert_array_equal(streamed.image, whole.image)
        assert (streamed.nan, streamed.posinf, streamed.neginf) == (whole.nan, whole.posinf, whole.neginf)
    assert whole.nan == int(np.isnan(m).sum()) and whole.posinf == int(np.isposinf(m).sum())


def test_integers_and_finite_floats_count_nothing():
    for arr in (np.arange(12).reshape(3, 4), np.ones((5, 5), dtype=np.float32)):
        hm = heatmap(arr)
        assert (hm.nan, hm.posinf, hm.neginf) == (0, 0, 0)

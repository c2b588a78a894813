"""Heat-map downsampling keeps outliers; slice specs parse, check shapes and select like torch indexing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ckptview.core.errors import Cancelled
from ckptview.core.figures.heatmap import heatmap, iter_heatmap, matrix_shape
from ckptview.core.jobs import CancelToken, drain
from ckptview.core.read.values.slicing import SliceError, default_spec, parse_slice, resolve, view_2d


def test_parse_slice_specs() -> None:
    assert parse_slice("[0, :, :]") == (0, slice(None), slice(None))
    assert parse_slice("-1, 2:10:2, ...") == (-1, slice(2, 10, 2), Ellipsis)
    assert parse_slice("[]") == ()
    for bad, words in [("[0, :", "missing ']'"), ("[a]", "not an index"), ("[::0]", "step"),
                       ("[0,,1]", "empty index"), ("[..., ...]", "one '...'")]:
        with pytest.raises(SliceError, match=words):
            parse_slice(bad)


def test_resolve_checks_the_shape() -> None:
    assert resolve((4, 5, 6), "[1]")[1] == (5, 6)
    assert resolve((4, 5, 6), "[..., 2]")[1] == (4, 5)
    with pytest.raises(SliceError, match="index 4 out of range for dimension 0 of size 4"):
        resolve((4, 5), "[4, :]")
    with pytest.raises(SliceError, match="3 indices for a tensor with 2 dimensions"):
        resolve((4, 5), "[0, 0, 0]")
    assert default_spec((2, 3, 4, 5)) == "[0, 0, :, :]" and default_spec((3, 4)) == "[:, :]"


def test_view_2d_selects_what_torch_indexing_selects() -> None:
    t = torch.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    a = t.numpy()
    np.testing.assert_array_equal(view_2d(a, "[1, 2, :, :]"), t[1, 2, :, :].numpy())
    np.testing.assert_array_equal(view_2d(a, "[-1, :, 1, ::2]"), t[-1, :, 1, ::2].numpy())
    assert view_2d(a, "[0, 0, 0, :]").shape == (1, 5)
    assert view_2d(a, "[0, 0, 0, 0]").shape == (1, 1)
    assert np.shares_memory(view_2d(a, "[1, 2]"), a)  # a view: a mapped tensor is not read
    with pytest.raises(SliceError, match="leaves 3 dimensions"):
        view_2d(a, "[0]")


def test_matrix_shape_views_conv_kernels() -> None:
    assert matrix_shape((64, 3, 7, 7)) == (64, 147)
    assert matrix_shape((64, 3, 7, 7), axis=1) == (3, 64 * 49)
    assert matrix_shape((10,)) == (1, 10) and matrix_shape(()) == (1, 1)


def test_heatmap_without_downsampling_is_the_matrix() -> None:
    w = np.random.default_rng(0).standard_normal((8, 3, 2, 2)).astype(np.float32)
    hm = heatmap(w, max_shape=(100, 100))
    assert not hm.downsampled
    np.testing.assert_array_equal(hm.image, w.reshape(8, 12))
    hm1 = heatmap(w, axis=1, max_shape=(100, 100))
    np.testing.assert_array_equal(hm1.image, np.moveaxis(w, 1, 0).reshape(3, 32))


def test_downsampling_keeps_the_signed_outlier_of_each_block() -> None:
    rng = np.random.default_rng(1)
    m = rng.uniform(-1, 1, (1000, 777))
    m[503, 401] = -50.0  # one exploded weight
    m[10, 10] = np.nan
    hm = heatmap(m, max_shape=(100, 100))
    br, bc = hm.block
    assert hm.image.shape == (-(-1000 // br), -(-777 // bc))
    assert hm.image[503 // br, 401 // bc] == -50.0
    # Every pixel is the signed max-abs of its block, checked the slow way; the NaN's block is NaN.
    for i, j in [(0, 0), (5, 7), (hm.image.shape[0] - 1, hm.image.shape[1] - 1)]:
        block = m[i * br : (i + 1) * br, j * bc : (j + 1) * bc].ravel()
        assert hm.image[i, j] == block[np.argmax(np.abs(block))]
    assert np.isnan(hm.image[10 // br, 10 // bc]) and np.isnan(hm.image).sum() == 1 and hm.nan == 1


def test_heatmap_reads_row_groups_and_can_be_cancelled() -> None:
    m = np.ones((400, 50), dtype=np.float32)
    steps = list(iter_heatmap(m, max_shape=(100, 50), chunk_elems=1000))
    assert len(steps) > 5 and steps[-1].done == 400
    token = CancelToken()
    gen = iter_heatmap(m, max_shape=(100, 50), chunk_elems=1000, token=token)
    next(gen)
    token.cancel()
    with pytest.raises(Cancelled):
        drain(gen)


def test_heatmap_of_bf16_and_empty() -> None:
    t = torch.randn(64, 64).to(torch.bfloat16)
    import ml_dtypes

    a = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    hm = heatmap(a, max_shape=(32, 32))
    blocks = t.float().reshape(32, 2, 32, 2).permute(0, 2, 1, 3).reshape(32, 32, 4)
    idx = blocks.abs().argmax(-1, keepdim=True)
    want = blocks.gather(-1, idx).squeeze(-1).double().numpy()
    # Equal magnitudes of opposite sign are a tie either way: compare magnitudes, then membership.
    np.testing.assert_array_equal(np.abs(hm.image), np.abs(want))
    assert (hm.image[..., None] == blocks.double().numpy()).any(-1).all()
    assert heatmap(np.zeros((0, 5))).image.size == 0

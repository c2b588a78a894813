"""The vectorised heat-map (rows first, in the block's own dtype) against a block-by-block reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from ckptview.core.figures.heatmap import heatmap, iter_heatmap
from ckptview.core.jobs import drain


def _reference(m: np.ndarray, br: int, bc: int) -> np.ndarray:
    """Signed max-abs of each block, ties to the positive value; a block holding a NaN is NaN."""
    rows, cols = m.shape
    out = np.empty((-(-rows // br), -(-cols // bc)))
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            block = m[i * br : (i + 1) * br, j * bc : (j + 1) * bc].astype(np.float64).ravel()
            if np.isnan(block).any():
                out[i, j] = np.nan
                continue
            hi, lo = block.max(), block.min()
            out[i, j] = lo if -lo > hi else hi
    return out


@pytest.mark.parametrize("shape", [(37, 53), (64, 64), (1, 1000), (1000, 1), (101, 7)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int8", "int64", "bool",
                                   "float8_e4m3fn"])
def test_blocks_match_the_reference(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    torch_dtype = getattr(torch, dtype)
    t = (torch.randn(shape) * 10)
    if not torch_dtype.is_floating_point:
        t = t.round()
    t = t.to(torch_dtype)
    if torch_dtype.is_floating_point and t.numel() > 4:
        t.view(-1)[rng.integers(0, t.numel(), 3)] = float("nan")
    if dtype == "bfloat16":
        values = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    elif dtype == "float8_e4m3fn":
        values = t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    else:
        values = t.numpy()
    exact = t.double().numpy()
    for max_shape in [(8, 8), (5, 13), (1000, 1000)]:
        hm = heatmap(values, max_shape=max_shape)
        want = _reference(exact, *hm.block)
        assert hm.image.dtype == np.float64 and hm.image.shape == want.shape
        np.testing.assert_array_equal(hm.image, want)


def test_row_groups_of_any_size_give_the_same_picture():
    m = np.random.default_rng(3).standard_normal((203, 61)).astype(np.float32)
    m[99:110, 4:8] = np.nan  # NaN blocks stay NaN
    whole = heatmap(m, max_shape=(20, 20)).image
    for chunk in (1, 61, 500, 10_000):
        streamed = drain(iter_heatmap(m, max_shape=(20, 20), chunk_elems=chunk)).image
        np.testing.assert_array_equal(streamed, whole)
    assert np.isnan(whole).any()


def test_axis_and_complex_values():
    c = (np.arange(24) - 12).reshape(2, 3, 4) * (1 - 1j)
    hm = heatmap(c, axis=2, max_shape=(2, 3))
    want = _reference(np.abs(np.moveaxis(c, 2, 0).reshape(4, 6)), *hm.block)
    np.testing.assert_array_equal(hm.image, want)


def test_a_tensor_heatmap_reads_groups_of_rows_never_the_whole_tensor(tmp_path, monkeypatch) -> None:
    import torch

    from ckptview.core import open_checkpoint
    from ckptview.core.figures.heatmap import iter_heatmap, iter_tensor_heatmap
    from ckptview.core.jobs import drain
    from ckptview.core.read.values import reading as values

    g = torch.Generator().manual_seed(5)
    t = torch.randn(300, 7, 9, generator=g).to(torch.bfloat16)
    torch.save({"w": t}, tmp_path / "w.pt")
    ck = open_checkpoint(str(tmp_path / "w.pt"))
    try:
        info = ck.tensor("w")
        whole = values.read_values(info)
        largest = []
        from ckptview.core.figures import heatmap as heatmap_module

        real = values.read_region  # as the heat-map reads regions
        monkeypatch.setattr(heatmap_module, "read_region", lambda i, idx: largest.append(i) or real(i, idx))
        for axis in (0, 1, 2):
            lazy = drain(iter_tensor_heatmap(info, axis, max_shape=(50, 20), chunk_elems=900))
            eager = drain(iter_heatmap(whole, axis, max_shape=(50, 20), chunk_elems=900))
            np.testing.assert_array_equal(lazy.image, eager.image)
            assert lazy.block == eager.block and lazy.matrix_shape == eager.matrix_shape
        assert len(largest) > 3  # several reads, one group of rows each
    finally:
        ck.close()

"""MLX affine weights (bits 2, 3, 4, 6, 8; groups of 32, 64, 128), packed as MLX documents them and held to its
formula `scale * q + bias` computed in float64: within one unit in the last place of the scales' dtype."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ckptview.core.read import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.quantized import mlx_quantize, write_folder


def _ulps(ours: np.ndarray, reference: torch.Tensor, dtype: torch.dtype) -> int:
    """The largest distance, in units in the last place of `dtype`, between ours and the float64 reference."""
    rounded = reference.to(dtype).float().numpy()
    spacing = np.abs(np.spacing(rounded.astype(np.float16 if dtype == torch.float16 else np.float32)))
    if dtype == torch.bfloat16:
        spacing = np.abs(rounded) * 2.0 ** -7 + 1e-30
    return int(np.max(np.round(np.abs(ours - rounded) / spacing)))


@pytest.mark.parametrize("bits, group", [(4, 64), (8, 32), (3, 64), (6, 128), (2, 32)])
def test_equal_to_the_documented_formula(tmp_path, bits, group):
    torch.manual_seed(bits)
    w = (torch.randn(24, 256) * 0.02).to(torch.float16)
    parts, reference = mlx_quantize(w, bits, group)
    write_folder(tmp_path, {f"model.layers.0.mlp.up_proj.{k}": v for k, v in parts.items()},
                 {"quantization": {"group_size": 64, "bits": 4, "model.layers.0.mlp.up_proj": {
                     "group_size": group, "bits": bits}}})
    ckpt = open_checkpoint(str(tmp_path))
    info = ckpt.tensor("model.layers.0.mlp.up_proj.weight")
    assert info.quant.problem is None and info.quant.label == f"int{bits} MLX affine, group {group}"
    assert info.shape == (24, 256)
    values = read_values(info)
    assert _ulps(values, reference, torch.float16) <= 1
    assert np.mean(values == reference.to(torch.float16).float().numpy()) > 0.99
    codes = np.concatenate(list(info.storage.source.iter_codes(1000)))
    assert codes.max() < 2 ** bits
    ckpt.close()


def test_without_a_config_the_shapes_say_bits_and_group(tmp_path):
    torch.manual_seed(0)
    parts, reference = mlx_quantize((torch.randn(8, 128) * 0.02).to(torch.bfloat16), 4, 64)
    write_folder(tmp_path, {f"l.{k}": v for k, v in parts.items()}, {})
    ckpt = open_checkpoint(str(tmp_path))
    info = ckpt.tensor("l.weight")
    assert info.quant.bits == 4 and info.quant.group_size == 64
    assert _ulps(read_values(info), reference, torch.bfloat16) <= 1
    ckpt.close()


def test_a_group_that_does_not_divide_is_one_line(tmp_path):
    parts, _reference = mlx_quantize((torch.randn(8, 128) * 0.02).to(torch.float16), 4, 64)
    write_folder(tmp_path, {f"l.{k}": v for k, v in parts.items()}, {"quantization": {"bits": 4, "group_size": 48}})
    ckpt = open_checkpoint(str(tmp_path))
    assert ckpt.tensor("l.weight").broken == "group size 48 does not divide the 128 columns of 'l.weight'"
    ckpt.close()

"""compressed-tensors' `pack-quantized` (2..8 bits; tensor, channel and group scales; symmetric and not) and
`nvfp4-pack-quantized`, compressed by its own compressors and held bit for bit to their `decompress`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ckptview.core.read import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_values
from tests.support.quantized import compressed_linear, write_folder


def _config(fmt: str, args: dict) -> dict:
    return {"dtype": "bfloat16", "quantization_config": {
        "quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": args, "format": fmt}}, "ignore": ["lm_head"]}}


@pytest.mark.parametrize("fmt, options, label", [
    ("pack-quantized", {"bits": 4, "symmetric": True, "strategy": "group", "group_size": 32},
     "int4 compressed-tensors, group 32"),
    ("pack-quantized", {"bits": 4, "symmetric": False, "strategy": "group", "group_size": 32},
     "int4 compressed-tensors, group 32, asymmetric"),
    ("pack-quantized", {"bits": 3, "symmetric": False, "strategy": "channel"},
     "int3 compressed-tensors, per-channel, asymmetric"),
    ("pack-quantized", {"bits": 8, "symmetric": True, "strategy": "tensor"}, "int8 compressed-tensors, per-tensor"),
    ("pack-quantized", {"bits": 2, "symmetric": True, "strategy": "group", "group_size": 16},
     "int2 compressed-tensors, group 16"),
    ("nvfp4-pack-quantized", {}, "nvfp4 (e2m1, fp8 scale per 16, global scale)"),
])
def test_equal_to_the_compressors_own_decompress(tmp_path, fmt, options, label):
    torch.manual_seed(0)
    w = (torch.randn(48, 96) * 0.02).to(torch.bfloat16)
    parts, reference, args = compressed_linear(w, fmt, **options)
    write_folder(tmp_path, {f"model.proj.{k}": v for k, v in parts.items()}, _config(fmt, args))
    ckpt = open_checkpoint(str(tmp_path))
    info = ckpt.tensor("model.proj.weight")
    assert info.quant is not None and info.quant.problem is None, info.quant
    assert info.quant.label == label and info.shape == (48, 96)
    values = read_values(info)
    assert np.array_equal(values, reference.float().numpy())
    assert np.array_equal(np.concatenate(list(iter_chunks(info, chunk_elems=200))), values.reshape(-1))
    assert {e.name for e in ckpt.tensors(with_parts=True) if e.info.part_of} == {f"model.proj.{k}" for k in parts}
    ckpt.close()


def test_a_packed_size_that_disagrees_with_the_shape_is_one_line(tmp_path):
    torch.manual_seed(0)
    parts, _reference, args = compressed_linear((torch.randn(48, 96) * 0.02).to(torch.bfloat16), "pack-quantized")
    parts["weight_shape"] = torch.tensor([48, 200])
    write_folder(tmp_path, {f"m.{k}": v for k, v in parts.items()}, _config("pack-quantized", args))
    ckpt = open_checkpoint(str(tmp_path))
    assert ckpt.tensor("m.weight").broken == "packed 'm.weight_packed' is 48x12 int32; 48x200 in 4-bit codes needs 48x25"
    ckpt.close()


def test_float_quantized_is_fp8(tmp_path):
    torch.manual_seed(0)
    w = torch.randn(32, 64) * 0.02
    scale = (w.abs().amax(dim=1, keepdim=True) / 448).to(torch.bfloat16)
    codes = (w / scale.float()).to(torch.float8_e4m3fn)
    args = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}
    write_folder(tmp_path, {"m.weight": codes, "m.weight_scale": scale}, _config("float-quantized", args))
    ckpt = open_checkpoint(str(tmp_path))
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    ref = dequantize(codes, scale, args=QuantizationArgs(**args))
    info = ckpt.tensor("m.weight")
    assert info.quant.scheme == "fp8" and np.array_equal(read_values(info), ref.float().numpy())
    ckpt.close()

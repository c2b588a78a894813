"""Hostile quantized checkpoints: parts that lie about what they hold get one line each, their raw parts still
listed, and nothing is computed past the stored bytes; dequantizing a large weight holds a block, not the weight."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
import torch

from ckptview.core.figures.stats import tensor_stats
from ckptview.core.read import open_checkpoint
from ckptview.core.read.quant.source import QuantSource
from ckptview.core.read.values.reading import read_values
from tests.support.quantized import bnb_4bit, gptq_pack, write_folder


def _open(folder, tensors, config=None):
    write_folder(folder, tensors, config or {})
    return open_checkpoint(str(folder))


def test_a_quant_state_claiming_a_trillion_weights_computes_nothing(tmp_path):
    parts, _ref = bnb_4bit(torch.randn(16, 16).to(torch.bfloat16), nested=False)
    state = {"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [1_000_000, 1_000_000]}
    parts["weight.quant_state.bitsandbytes__nf4"] = torch.tensor(list(json.dumps(state).encode()), dtype=torch.uint8)
    ckpt = _open(tmp_path, {f"l.{k}": v for k, v in parts.items()})
    info = ckpt.tensor("l.weight")
    assert info.broken == "codes 'l.weight' hold 128 bytes; 1000000x1000000 in 4-bit codes needs 500000000000"
    with pytest.raises(Exception, match="codes 'l.weight' hold 128 bytes"):
        read_values(info)
    ckpt.close()


def test_an_oversized_quant_state_is_not_read(tmp_path):
    parts, _ref = bnb_4bit(torch.randn(16, 16).to(torch.bfloat16), nested=False)
    parts["weight.quant_state.bitsandbytes__nf4"] = torch.full((1 << 17,), ord(" "), dtype=torch.uint8)
    ckpt = _open(tmp_path, {f"l.{k}": v for k, v in parts.items()})
    assert "holds no shape" in ckpt.tensor("l.weight").broken
    assert len(ckpt.tensors(with_parts=True)) == len(parts) + 1
    ckpt.close()


@pytest.mark.parametrize("config, problem", [
    ({"quantization": {"bits": 1, "group_size": 64}}, "1-bit MLX codes do not fill"),
    ({"quantization": {"bits": 4, "group_size": 0}}, "group size 0 does not divide"),
])
def test_mlx_settings_that_lie(tmp_path, config, problem):
    tensors = {"l.weight": torch.zeros(4, 8, dtype=torch.uint32), "l.scales": torch.ones(4, 1).half(),
               "l.biases": torch.zeros(4, 1).half()}
    ckpt = _open(tmp_path, tensors, config)
    assert problem in ckpt.tensor("l.weight").broken
    ckpt.close()


def test_fp8_block_sizes_that_are_no_sizes_fall_back_to_the_scale_grid(tmp_path):
    codes = torch.randn(64, 64).to(torch.float8_e4m3fn)
    ckpt = _open(tmp_path, {"l.weight": codes, "l.weight_scale_inv": torch.ones(2, 2)},
                 {"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, -3]}})
    info = ckpt.tensor("l.weight")
    assert info.quant.facts["block"] == [32, 32] and info.broken is None
    assert np.array_equal(read_values(info), codes.float().numpy())
    ckpt.close()


def test_the_work_of_a_weight_is_paid_for_by_its_parts(tmp_path):
    parts, _ref = gptq_pack(torch.randn(64, 128) * 0.02, bits=4, group_size=32)
    ckpt = _open(tmp_path, {f"l.{k}": v for k, v in parts.items()}, {"quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 32}})
    source = ckpt.tensor("l.weight").storage.source
    assert isinstance(source, QuantSource)
    budget = source._budget()
    assert budget.limit == max(4_000_000, 64 * source.stored_bytes)
    ckpt.close()


def test_dequantizing_holds_a_block_not_the_weight(tmp_path):
    """Statistics of a 2048 x 4096 int4 weight (32 MiB as float32) read a block of rows at a time."""
    torch.manual_seed(0)
    out_f, in_f, per = 2048, 4096, 8
    qweight = torch.randint(-(2 ** 31), 2 ** 31 - 1, (in_f // per, out_f), dtype=torch.int32)
    scales = (torch.rand(in_f // 128, out_f) * 1e-3).half()
    qzeros = torch.randint(-(2 ** 31), 2 ** 31 - 1, (in_f // 128, out_f // per), dtype=torch.int32)
    ckpt = _open(tmp_path, {"l.qweight": qweight, "l.scales": scales, "l.qzeros": qzeros},
                 {"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}})
    info = ckpt.tensor("l.weight")
    tensor_stats(info, chunk_elems=1 << 18)  # warm: imports, first-use caches
    tracemalloc.start()
    try:
        stats = tensor_stats(info, chunk_elems=1 << 18)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stats.numel == out_f * in_f
    assert peak < 16 << 20, f"{peak / 2**20:.1f} MiB at its peak for a 32 MiB weight"
    ckpt.close()

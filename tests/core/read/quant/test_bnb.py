"""bitsandbytes 4-bit NF4/FP4 (nested or not) and LLM.int8, quantized by bitsandbytes' own functions on CPU and
named as its modules save them, held to its own `dequantize_4bit` / `int8_vectorwise_dequant`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ckptview.core.inspect.summary import size_facts
from ckptview.core.read import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_region, read_values
from tests.support.quantized import bnb_4bit, bnb_llama, model_parameters, write_folder

W = "model.layers.0.mlp.down_proj.weight"


@pytest.mark.parametrize("mode, label", [
    ("nf4", "nf4 (bitsandbytes), block 64, double-quantized"),
    ("fp4", "fp4 (bitsandbytes), block 64, double-quantized"),
    ("nf4-plain", "nf4 (bitsandbytes), block 64"),
    ("int8", "int8 LLM.int8 (bitsandbytes), per row"),
])
def test_llama_weights_equal_bitsandbytes(tmp_path, mode, label):
    config, reference = bnb_llama(tmp_path, mode)
    ckpt = open_checkpoint(str(tmp_path))
    for name, ref in reference.items():
        info = ckpt.tensor(name)
        assert info.quant is not None and info.quant.problem is None, (name, info.quant)
        assert info.shape == tuple(ref.shape)
        assert np.array_equal(read_values(info), ref.float().numpy()), name
    info = ckpt.tensor(W)
    assert info.quant.label == label
    ref = reference[W].float().numpy()
    assert np.array_equal(np.concatenate(list(iter_chunks(info, chunk_elems=999))), ref.reshape(-1))
    assert np.array_equal(read_region(info, (slice(7, 100, 3), slice(2, 40))), ref[7:100:3, 2:40])
    assert size_facts(ckpt).parameters == model_parameters(config)
    ckpt.close()


def test_codes_are_the_sixteen_levels(tmp_path):
    torch.manual_seed(0)
    parts, _ref = bnb_4bit(torch.randn(32, 64).to(torch.bfloat16))
    write_folder(tmp_path, {f"l.{k}": v for k, v in parts.items()}, {})
    ckpt = open_checkpoint(str(tmp_path))
    codes = np.concatenate(list(ckpt.tensor("l.weight").storage.source.iter_codes(100)))
    assert codes.size == 32 * 64 and set(np.unique(codes)) <= set(range(16)) and len(np.unique(codes)) == 16
    ckpt.close()


@pytest.mark.parametrize("change, problem", [
    ("absmax", "absmax 'l.weight.absmax' is 5 values; 2048 codes in blocks of 64 need 32"),
    ("codes", "codes 'l.weight' hold 1000 bytes; 32x64 in 4-bit codes needs 1024"),
    ("state", "quant state 'l.weight.quant_state.bitsandbytes__nf4' holds no shape (its JSON could not be read)"),
])
def test_bad_parts_are_one_line(tmp_path, change, problem):
    torch.manual_seed(0)
    parts, _ref = bnb_4bit(torch.randn(32, 64).to(torch.bfloat16), nested=False)
    if change == "absmax":
        parts["weight.absmax"] = parts["weight.absmax"][:5]
    elif change == "codes":
        parts["weight"] = parts["weight"][:1000]
    else:
        parts["weight.quant_state.bitsandbytes__nf4"] = torch.tensor(list(b"{not json"), dtype=torch.uint8)
    write_folder(tmp_path, {f"l.{k}": v for k, v in parts.items()}, {})
    ckpt = open_checkpoint(str(tmp_path))
    assert ckpt.tensor("l.weight").broken == problem
    assert {f"l.{k}" for k in parts} <= {e.name for e in ckpt.tensors(with_parts=True)}
    ckpt.close()

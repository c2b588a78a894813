"""GPTQ (2/4/8-bit, groups, act-order) and AWQ (4-bit GEMM) weights, packed as AutoGPTQ's `QuantLinear.pack`
and AutoAWQ's `WQLinear_GEMM.from_linear` pack them (their published code, reproduced in tests/support/quantized.py:
gptqmodel, AutoGPTQ and AutoAWQ build CUDA kernels at install and do not install here), held bit for bit to
their own torch dequantization; parameter counts to the model transformers builds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ckptview.core.figures.stats import tensor_stats
from ckptview.core.inspect.summary import size_facts
from ckptview.core.read import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_region, read_values
from tests.support.quantized import (
    awq_pack,
    gptq3_pack,
    gptq_pack,
    model_parameters,
    packed_llama,
    write_folder,
)

W = "model.layers.0.mlp.down_proj.weight"


@pytest.mark.parametrize("scheme, options, label", [
    ("gptq", {"bits": 4, "group_size": 32, "act_order": True}, "int4 GPTQ, group 32, act-order"),
    ("gptq", {"bits": 8, "group_size": 64}, "int8 GPTQ, group 64"),
    ("gptq", {"bits": 2, "group_size": 128}, "int2 GPTQ, group 128"),
    ("awq", {"group_size": 32}, "int4 AWQ, group 32"),
])
def test_llama_weights_equal_the_reference(tmp_path, scheme, options, label):
    base, config, reference = packed_llama(tmp_path, scheme, **options)
    ckpt = open_checkpoint(str(tmp_path))
    for name, ref in reference.items():
        info = ckpt.tensor(name)
        assert info.quant is not None and info.quant.scheme == scheme and info.quant.problem is None, name
        assert info.shape == tuple(ref.shape)
        assert np.array_equal(read_values(info), ref.float().numpy()), name
    quant = ckpt.tensor(W).quant
    assert quant.label == label
    assert size_facts(ckpt).parameters == model_parameters(config)
    stem = W[: -len(".weight")]
    assert [n for _r, n in quant.parts][:3] == [f"{stem}.qweight", f"{stem}.qzeros", f"{stem}.scales"]
    bits = options.get("bits", 4)
    assert quant.bits_per_weight == pytest.approx(bits + (16 + bits) / options["group_size"]
                                                  + (32 / 256 if scheme == "gptq" else 0), abs=1e-3)  # g_idx: 32 bits an input
    info = ckpt.tensor(W)
    ref = reference[W].float().numpy()
    assert np.array_equal(np.concatenate(list(iter_chunks(info, chunk_elems=3000))), ref.reshape(-1))
    assert np.array_equal(read_region(info, (slice(5, 200, 9), slice(1, 300, 2))), ref[5:200:9, 1:300:2])
    stats = tensor_stats(info)
    assert stats.mean == pytest.approx(ref.astype(np.float64).mean(), rel=1e-9, abs=1e-12)
    assert abs(stats.std - float(base[W].float().std())) < 0.005  # the weight's, not the packed int32's
    ckpt.close()


def test_codes_are_the_stored_levels(tmp_path):
    torch.manual_seed(0)
    parts, _ref = gptq_pack(torch.randn(64, 128) * 0.02, bits=4, group_size=32)
    write_folder(tmp_path, {f"l.{k}": v for k, v in parts.items()}, {"quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 32}})
    ckpt = open_checkpoint(str(tmp_path))
    source = ckpt.tensor("l.weight").storage.source
    codes = np.concatenate(list(source.iter_codes(1000)))
    assert codes.size == 64 * 128 and codes.max() <= 15 and len(np.unique(codes)) > 8
    ckpt.close()


def test_gptq_and_awq_are_told_apart_without_a_config(tmp_path):
    torch.manual_seed(0)
    w = torch.randn(64, 128) * 0.02
    gparts, gref = gptq_pack(w, group_size=32)
    aparts, aref = awq_pack(w, group_size=32)
    tensors = {**{f"g.{k}": v for k, v in gparts.items()}, **{f"a.{k}": v for k, v in aparts.items()}}
    write_folder(tmp_path, tensors, {})
    ckpt = open_checkpoint(str(tmp_path))
    assert ckpt.tensor("g.weight").quant.scheme == "gptq" and ckpt.tensor("a.weight").quant.scheme == "awq"
    assert np.array_equal(read_values(ckpt.tensor("a.weight")), aref.float().numpy())
    assert np.array_equal(read_values(ckpt.tensor("g.weight")), gref.float().numpy())  # group from the scales
    assert ckpt.tensor("g.weight").quant.group_size == 32
    ckpt.close()


@pytest.mark.parametrize("case, problem", [
    ("group", "group size 48 does not divide the 128 input features of 'l.weight'"),
    ("scales", "scales 'l.scales' are 3x64; 4 groups of 64 outputs need 4x64"),
    ("zeros", "zero points 'l.qzeros' are missing"),
    ("g_idx", "g_idx 'l.g_idx' has 100 entries for 128 input features"),
    ("bits", "5-bit GPTQ packing is recognised but not decoded ('l.weight')"),
])
def test_bad_parts_are_one_line_and_stay_listed(tmp_path, case, problem):
    torch.manual_seed(0)
    parts, _ref = gptq_pack(torch.randn(64, 128) * 0.02, bits=4, group_size=32)
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 32}
    if case == "group":
        qc["group_size"] = 48
    elif case == "scales":
        parts["scales"] = parts["scales"][:3]
    elif case == "zeros":
        del parts["qzeros"]
    elif case == "g_idx":
        parts["g_idx"] = parts["g_idx"][:100]
    else:
        qc["bits"] = 5
    write_folder(tmp_path, {f"l.{k}": v for k, v in parts.items()}, {"quantization_config": qc})
    ckpt = open_checkpoint(str(tmp_path))
    info = ckpt.tensor("l.weight")
    assert info.broken == problem
    listed = {e.name for e in ckpt.tensors(with_parts=True)}
    assert {f"l.{k}" for k in parts} <= listed
    with pytest.raises(Exception, match="^"):
        read_values(info)
    ckpt.close()


def test_a_g_idx_naming_a_missing_group_is_refused_in_one_line(tmp_path):
    torch.manual_seed(0)
    parts, _ref = gptq_pack(torch.randn(64, 128) * 0.02, bits=4, group_size=32)
    parts["g_idx"] = parts["g_idx"].clone()
    parts["g_idx"][7] = 1000
    write_folder(tmp_path, {f"l.{k}": v for k, v in parts.items()}, {"quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 32}})
    ckpt = open_checkpoint(str(tmp_path))
    with pytest.raises(Exception, match="g_idx names group 1000 of 4"):
        read_values(ckpt.tensor("l.weight"))
    ckpt.close()


def test_three_bit_codes_straddle_words(tmp_path):
    """AutoGPTQ's 3-bit packing (32 codes in 3 words), held to the integers it packed."""
    torch.manual_seed(0)
    parts, reference = gptq3_pack(torch.randn(64, 128) * 0.02, group_size=32)
    write_folder(tmp_path, {f"l.{k}": v for k, v in parts.items()}, {"quantization_config": {
        "quant_method": "gptq", "bits": 3, "group_size": 32}})
    ckpt = open_checkpoint(str(tmp_path))
    info = ckpt.tensor("l.weight")
    assert info.quant.label == "int3 GPTQ, group 32" and info.shape == (64, 128)
    assert np.array_equal(read_values(info), reference.float().numpy())
    ckpt.close()

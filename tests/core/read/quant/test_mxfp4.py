"""MXFP4 experts as gpt-oss ships them (`_blocks` of E2M1 pairs, `_scales` of E8M0 exponents), held bit for bit to
transformers' own `convert_moe_packed_tensors`; the parameter count to the gpt-oss transformers builds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ckptview.core.inspect.summary import size_facts
from ckptview.core.read import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_region, read_values
from tests.support.quantized import model_parameters, mxfp4_gpt_oss, mxfp4_pack, write_folder

GU = "model.layers.0.mlp.experts.gate_up_proj"


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mxfp4")
    base, config, reference = mxfp4_gpt_oss(folder)
    ckpt = open_checkpoint(str(folder))
    yield base, config, reference, ckpt
    ckpt.close()


def test_experts_equal_transformers_dequantization(gpt_oss):
    _base, _config, reference, ckpt = gpt_oss
    assert len(reference) == 2
    for name, ref in reference.items():
        info = ckpt.tensor(name)
        assert info.quant.scheme == "mxfp4" and info.shape == tuple(ref.shape)
        assert np.array_equal(read_values(info), ref.float().numpy()), name
        flat = np.concatenate(list(iter_chunks(info, chunk_elems=500)))
        assert np.array_equal(flat, ref.float().numpy().reshape(-1))
        assert np.array_equal(read_region(info, (2, slice(3, 50, 5))), ref.float().numpy()[2, 3:50:5])


def test_the_count_and_the_facts_are_the_models(gpt_oss):
    base, config, _reference, ckpt = gpt_oss
    assert size_facts(ckpt).parameters == model_parameters(config)
    info = ckpt.tensor(GU)
    assert info.shape == tuple(base[GU].shape) == (4, 64, 128)
    q = info.quant
    assert q.parts == (("blocks", GU + "_blocks"), ("scales", GU + "_scales"))
    assert q.bits == 4 and q.group_size == 32 and q.bits_per_weight == 4.25
    codes = np.concatenate(list(info.storage.source.iter_codes(1000)))
    assert codes.size == info.numel and set(np.unique(codes)) <= set(range(16))


def test_misshapen_scales_are_one_line(tmp_path):
    blocks, scales = mxfp4_pack(torch.randn(2, 64, 32) * 0.02)
    write_folder(tmp_path, {"e.w_blocks": blocks, "e.w_scales": scales[:, :3]}, {"quantization_config": {
        "quant_method": "mxfp4"}})
    ckpt = open_checkpoint(str(tmp_path))
    assert ckpt.tensor("e.w").broken == "scales 'e.w_scales' are 2x3x2 uint8; blocks of 2x32x2x16 need 2x32x2 uint8"
    assert {e.name for e in ckpt.tensors(with_parts=True)} == {"e.w", "e.w_blocks", "e.w_scales"}
    ckpt.close()

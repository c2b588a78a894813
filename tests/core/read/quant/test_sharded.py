"""A quantized weight whose parts lie in two shards of an index: the index is looked at as a whole, so the
weight is one logical tensor (a shard alone would have half its parts)."""

from __future__ import annotations

import json

import numpy as np
import torch
from safetensors.torch import save_file

from ckptview.core.read import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.quantized import gptq_pack


def test_parts_in_two_shards_make_one_weight(tmp_path):
    torch.manual_seed(0)
    parts, reference = gptq_pack(torch.randn(64, 128) * 0.02, bits=4, group_size=32)
    first = {"l.qweight": parts["qweight"], "l.g_idx": parts["g_idx"]}
    second = {"l.qzeros": parts["qzeros"], "l.scales": parts["scales"]}
    save_file(first, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file(second, str(tmp_path / "model-00002-of-00002.safetensors"))
    weight_map = {**{k: "model-00001-of-00002.safetensors" for k in first},
                  **{k: "model-00002-of-00002.safetensors" for k in second}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 32}}))
    ckpt = open_checkpoint(str(tmp_path))
    info = ckpt.tensor("l.weight")
    assert info.quant is not None and info.quant.problem is None
    assert {name for _role, name in info.quant.parts} == set(weight_map)
    assert np.array_equal(read_values(info), reference.float().numpy())
    ckpt.close()

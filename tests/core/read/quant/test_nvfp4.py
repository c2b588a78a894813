"""NVFP4 as ModelOpt exports it (uint8 or safetensors `F4` packed pairs, FP8 block scales, a global scale), held
bit for bit to ModelOpt's published dequantization (ModelOpt needs CUDA: its formula, in the test)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ckptview.core.read import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.quantized import modelopt_nvfp4, write_folder


@pytest.mark.parametrize("as_f4", [False, True])
def test_equal_to_modelopt(tmp_path, as_f4):
    torch.manual_seed(0)
    parts, reference = modelopt_nvfp4(torch.randn(32, 64) * 0.02, as_f4=as_f4)
    write_folder(tmp_path, {f"m.proj.{k}": v for k, v in parts.items()}, {"dtype": "bfloat16", "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}})
    ckpt = open_checkpoint(str(tmp_path))
    codes = next(e.info for e in ckpt.tensors(with_parts=True) if e.name == "m.proj.weight" and e.info.part_of)
    stored = load_file(str(tmp_path / "model.safetensors"))["m.proj.weight"]
    assert codes.shape == tuple(stored.shape)  # F4: torch's shape (pairs), not the file's count of values
    info = ckpt.tensor("m.proj.weight")
    assert info.quant.scheme == "nvfp4" and info.shape == (32, 64) and info.quant.problem is None
    assert np.array_equal(read_values(info), reference.float().numpy())
    ckpt.close()


def test_an_f4_entry_with_an_odd_count_is_broken_in_one_line(tmp_path):
    import json
    import struct

    header = json.dumps({"w": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]}}).encode()
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00\x00\x00")
    ckpt = open_checkpoint(str(path))
    assert ckpt.tensor("w").broken == "F4 shape [2, 3] has an odd last dimension: its 4-bit values are no whole bytes"
    ckpt.close()

"""Exporting a quantized checkpoint: its stored parts bit for bit (the default), or its weights dequantized
(`--dequantize float32` / `bf16`), bit for bit with the library's dequantization (bf16: as torch rounds it)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import torch
from safetensors.torch import load_file

from tests.support.quantized import fp8_llama, packed_llama

W = "model.layers.0.mlp.down_proj.weight"


def _export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckptview", "export", *args], capture_output=True, text=True,
                          timeout=120)


def test_the_parts_by_default_bit_for_bit(tmp_path):
    packed_llama(tmp_path / "gptq", "gptq", group_size=32)
    proc = _export(str(tmp_path / "gptq"), "--out", str(tmp_path / "raw.safetensors"))
    assert proc.returncode == 0, proc.stderr
    original = load_file(str(tmp_path / "gptq" / "model.safetensors"))
    written = load_file(str(tmp_path / "raw.safetensors"))
    assert sorted(written) == sorted(original)
    for name, tensor in original.items():
        assert written[name].dtype == tensor.dtype and torch.equal(written[name], tensor), name


def test_dequantized_float32_and_bf16(tmp_path):
    _base, _config, reference = fp8_llama(tmp_path / "fp8")
    for choice, dtype in (("float32", torch.float32), ("bf16", torch.bfloat16)):
        out = tmp_path / f"deq-{choice}.safetensors"
        proc = _export(str(tmp_path / "fp8"), "--out", str(out), "--dequantize", choice)
        assert proc.returncode == 0, proc.stderr
        written = load_file(str(out))
        assert not any(k.endswith("_scale_inv") for k in written)  # the weights, not their parts
        for name, ref in reference.items():
            assert written[name].dtype == dtype
            assert torch.equal(written[name], ref.to(dtype)), (choice, name)  # ref is float32: .to rounds as torch


def test_a_key_selects_a_weights_parts_or_its_dequantized_tensor(tmp_path):
    packed_llama(tmp_path / "awq", "awq", group_size=32)
    proc = _export(str(tmp_path / "awq"), "--out", str(tmp_path / "one"), "--key", W)
    assert proc.returncode == 0, proc.stderr
    stem = W[: -len(".weight")]
    assert sorted(p.name for p in (tmp_path / "one").glob("*.npy")) == sorted(
        f"{stem}.{part}.npy" for part in ("qweight", "qzeros", "scales"))
    proc = _export(str(tmp_path / "awq"), "--out", str(tmp_path / "w.npy"), "--key", W, "--dequantize", "float32")
    assert proc.returncode == 0, proc.stderr
    assert np.load(tmp_path / "w.npy").shape == (256, 512)

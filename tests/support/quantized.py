"""Quantized checkpoints written at test time, by the libraries' own quantization code, in tiny sizes.

Each builder writes a Hugging Face folder (`model.safetensors` and `config.json` with its
`quantization_config`) and returns what the library's own dequantization gives for every quantized weight
(the reference ckptview's values are held to).
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

TINY_LLAMA = {"vocab_size": 96, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 1,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def tiny_llama(dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> tuple[Any, dict[str, torch.Tensor]]:
    """(config, state dict) of a tiny Llama built by transformers (weights ~ N(0, 0.02), as its init gives)."""
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**TINY_LLAMA)
    model = transformers.LlamaForCausalLM(config).to(dtype)
    return config, {k: v.detach().clone() for k, v in model.state_dict().items()}


def model_parameters(config: Any) -> int:
    """sum(p.numel()) of the model transformers builds from `config` (on meta: nothing allocated)."""
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def write_folder(folder: Path, tensors: dict[str, torch.Tensor], config: dict[str, Any]) -> Path:
    """`model.safetensors` and `config.json` in `folder` (made)."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def fp8_quantizer(block: list[int] | None, scale_fmt: str | None = None) -> Any:
    """transformers' own FP8 quantization op (`Fp8Quantize`), for weights in blocks of `block`."""
    from transformers.integrations.finegrained_fp8 import Fp8Quantize

    qconfig = types.SimpleNamespace(weight_block_size=block, scale_fmt=scale_fmt)
    return Fp8Quantize(types.SimpleNamespace(quantization_config=qconfig))


def fp8_reference(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """transformers' own FP8 dequantization (`Fp8Dequantize._dequantize_one`), as it loads a checkpoint."""
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    return Fp8Dequantize(None)._dequantize_one(codes, scale)


def fp8_llama(folder: Path, block: list[int] | None = None, seed: int = 0) -> tuple[dict[str, torch.Tensor], Any,
                                                                                   dict[str, torch.Tensor]]:
    """A tiny Llama whose linear weights transformers' `Fp8Quantize` quantized (block 128x128 by default), as
    a DeepSeek-V3-style FP8 checkpoint: (base state dict, config, the library's dequantized weights)."""
    block = block or [128, 128]
    config, base = tiny_llama(seed=seed)
    quantize = fp8_quantizer(block)
    out: dict[str, torch.Tensor] = {}
    reference: dict[str, torch.Tensor] = {}
    for key, value in base.items():
        if key.endswith("proj.weight"):
            parts = quantize._quantize_one(key, value)
            out.update(parts)
            reference[key] = fp8_reference(parts[key], parts[key + "_scale_inv"])
        else:
            out[key] = value
    cfg = config.to_dict()
    cfg["dtype"] = "bfloat16"  # as save_pretrained records the weights' dtype
    cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": block, "activation_scheme": "dynamic",
                                  "fmt": "e4m3"}
    write_folder(folder, out, cfg)
    return base, config, reference

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


ARCHITECTURES = {"llama": "LlamaForCausalLM", "gpt_oss": "GptOssForCausalLM"}


def write_folder(folder: Path, tensors: dict[str, torch.Tensor], config: dict[str, Any]) -> Path:
    """`model.safetensors` and `config.json` in `folder` (made)."""
    folder.mkdir(parents=True, exist_ok=True)
    if config.get("model_type") in ARCHITECTURES and not config.get("architectures"):  # as save_pretrained writes it
        config = {**config, "architectures": [ARCHITECTURES[config["model_type"]]]}
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


def _groups(w: torch.Tensor, group_size: int, g_idx: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric min/max scales (fp16) and integer zero points per (group, output) of `w` (out, in), as the
    GPTQ and AWQ quantizers compute them: scales (groups, out), zeros (groups, out)."""
    maxq = 2 ** bits - 1
    groups = int(g_idx.max()) + 1
    scales = torch.empty(groups, w.shape[0])
    zeros = torch.empty(groups, w.shape[0])
    for g in range(groups):
        cols = w[:, g_idx == g]
        lo = torch.minimum(cols.min(dim=1).values, torch.zeros(w.shape[0]))
        hi = torch.maximum(cols.max(dim=1).values, torch.zeros(w.shape[0]))
        scale = ((hi - lo) / maxq).clamp(min=1e-8)
        scales[g] = scale
        zeros[g] = torch.round(-lo / scale).clamp(0, maxq)
    return scales.half(), zeros.to(torch.int32)


def gptq_pack(w: torch.Tensor, bits: int = 4, group_size: int = 32, act_order: bool = False,
              seed: int = 0) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`w` (out, in) quantized and packed as AutoGPTQ's `QuantLinear.pack` packs it (its code, reproduced:
    gptqmodel and AutoGPTQ build CUDA kernels at install and cannot be installed here), with its torch
    dequantization (`dequantize_weight`) as the reference: ({qweight, qzeros, scales, g_idx}, W (out, in) fp16)."""
    import numpy as np

    out_f, in_f = w.shape
    if act_order:
        order = torch.randperm(in_f, generator=torch.Generator().manual_seed(seed))
        g_idx = torch.empty(in_f, dtype=torch.int32)
        g_idx[order] = (torch.arange(in_f) // group_size).to(torch.int32)
    else:
        g_idx = (torch.arange(in_f) // group_size).to(torch.int32)
    scales, zeros = _groups(w.float(), group_size, g_idx, bits)
    sf = scales.float()
    intweight = torch.stack([torch.round(w[:, i].float() / sf[g_idx[i]] + zeros[g_idx[i]]).clamp(0, 2 ** bits - 1)
                             for i in range(in_f)], dim=0).to(torch.int64).numpy().astype(np.uint32)  # (in, out)
    per = 32 // bits
    qweight = np.zeros((in_f // per, out_f), dtype=np.uint32)
    for row in range(qweight.shape[0]):
        for j in range(per):
            qweight[row] |= intweight[row * per + j] << (bits * j)
    zeros_m1 = (zeros - 1).numpy().astype(np.uint32)  # the v1 format stores zero - 1
    qzeros = np.zeros((zeros.shape[0], out_f // per), dtype=np.uint32)
    for col in range(qzeros.shape[1]):
        for j in range(per):
            qzeros[:, col] |= (zeros_m1[:, col * per + j] & np.uint32(2 ** bits - 1)) << (bits * j)
    parts = {"qweight": torch.from_numpy(qweight.view(np.int32)), "qzeros": torch.from_numpy(qzeros.view(np.int32)),
             "scales": scales, "g_idx": g_idx}
    return parts, gptq_reference(parts, bits)


def gptq_reference(parts: dict[str, torch.Tensor], bits: int) -> torch.Tensor:
    """AutoGPTQ's torch dequantization of packed parts (`dequantize_weight`), transposed to (out, in)."""
    qweight, qzeros, scales, g_idx = parts["qweight"], parts["qzeros"], parts["scales"], parts["g_idx"]
    wf = torch.tensor(list(range(0, 32, bits)), dtype=torch.int32).unsqueeze(0)
    small = torch.int16 if bits == 8 else torch.int8
    zeros = torch.bitwise_right_shift(torch.unsqueeze(qzeros, 2).expand(-1, -1, 32 // bits), wf.unsqueeze(0)).to(small)
    zeros = torch.bitwise_and(zeros, (2 ** bits) - 1) + 1
    zeros = zeros.reshape(scales.shape)
    weight = torch.bitwise_right_shift(torch.unsqueeze(qweight, 1).expand(-1, 32 // bits, -1),
                                       wf.unsqueeze(-1)).to(small)
    weight = torch.bitwise_and(weight, (2 ** bits) - 1)
    weight = weight.reshape(weight.shape[0] * weight.shape[1], weight.shape[2])
    return (scales[g_idx.long()] * (weight - zeros[g_idx.long()])).t().contiguous()


def awq_pack(w: torch.Tensor, group_size: int = 32) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`w` (out, in) quantized and packed as AutoAWQ's `WQLinear_GEMM.from_linear` packs it (its code,
    reproduced: AutoAWQ needs CUDA kernels), with its `dequantize_gemm` as the reference:
    ({qweight, qzeros, scales}, W (out, in) fp16)."""
    out_f, in_f = w.shape
    g_idx = (torch.arange(in_f) // group_size).to(torch.int32)
    scales, zeros = _groups(w.float(), group_size, g_idx, 4)
    sf = scales.float()
    intweight = torch.stack([torch.round(w[:, i].float() / sf[i // group_size] + zeros[i // group_size]).clamp(0, 15)
                             for i in range(in_f)], dim=0).to(torch.int32)  # (in, out)
    order_map = [0, 2, 4, 6, 1, 3, 5, 7]
    qweight = torch.zeros((in_f, out_f // 8), dtype=torch.int32)
    for col in range(out_f // 8):
        for i in range(8):
            qweight[:, col] |= intweight[:, col * 8 + order_map[i]] << (i * 4)
    qzeros = torch.zeros((zeros.shape[0], out_f // 8), dtype=torch.int32)
    for col in range(out_f // 8):
        for i in range(8):
            qzeros[:, col] |= zeros[:, col * 8 + order_map[i]] << (i * 4)
    parts = {"qweight": qweight, "qzeros": qzeros, "scales": scales}
    return parts, awq_reference(parts, group_size)


def awq_reference(parts: dict[str, torch.Tensor], group_size: int) -> torch.Tensor:
    """AutoAWQ's `dequantize_gemm` (awq/utils/packing_utils.py), transposed to (out, in)."""
    qweight, qzeros, scales = parts["qweight"], parts["qzeros"], parts["scales"]
    shifts = torch.arange(0, 32, 4)
    iweights = torch.bitwise_right_shift(qweight[:, :, None], shifts[None, None, :]).to(torch.int8)
    iweights = iweights.view(iweights.shape[0], -1)
    izeros = torch.bitwise_right_shift(qzeros[:, :, None], shifts[None, None, :]).to(torch.int8)
    izeros = izeros.view(izeros.shape[0], -1)
    reverse = torch.arange(iweights.shape[-1], dtype=torch.int32).view(-1, 8)[:, [0, 4, 1, 5, 2, 6, 3, 7]].view(-1)
    iweights, izeros = iweights[:, reverse], izeros[:, reverse]
    iweights = torch.bitwise_and(iweights, 15)
    izeros = torch.bitwise_and(izeros, 15)
    scales_full = scales.repeat_interleave(group_size, dim=0)
    izeros = izeros.repeat_interleave(group_size, dim=0)
    return ((iweights - izeros) * scales_full).t().contiguous()


def packed_llama(folder: Path, scheme: str, seed: int = 0, **options: Any) -> tuple[dict[str, torch.Tensor], Any,
                                                                                   dict[str, torch.Tensor]]:
    """A tiny Llama whose linear weights are GPTQ- or AWQ-packed (`options`: bits, group_size, act_order):
    (base state dict, config, the reference dequantized weights, fp16 (out, in))."""
    config, base = tiny_llama(dtype=torch.float16, seed=seed)
    group_size = options.get("group_size", 32)
    out: dict[str, torch.Tensor] = {}
    reference: dict[str, torch.Tensor] = {}
    for key, value in base.items():
        if key.endswith("proj.weight"):
            stem = key[: -len(".weight")]
            if scheme == "gptq":
                parts, ref = gptq_pack(value, options.get("bits", 4), group_size, options.get("act_order", False),
                                       seed=len(out))
            else:
                parts, ref = awq_pack(value, group_size)
            out.update({f"{stem}.{k}": v for k, v in parts.items()})
            reference[key] = ref
        else:
            out[key] = value
    cfg = config.to_dict()
    cfg["dtype"] = "float16"
    if scheme == "gptq":
        cfg["quantization_config"] = {"quant_method": "gptq", "bits": options.get("bits", 4), "group_size": group_size,
                                      "desc_act": options.get("act_order", False), "sym": False,
                                      "checkpoint_format": "gptq"}
    else:
        cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": group_size, "version": "gemm",
                                      "zero_point": True}
    write_folder(folder, out, cfg)
    return base, config, reference


E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4_pack(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An experts' weight (E, in, out), as the model holds it, in gpt-oss's MXFP4 layout: (blocks (E, out, in/32,
    16) uint8, scales (E, out, in/32) uint8), each group of 32 scaled by a power of two and rounded to E2M1."""
    t = w.float().transpose(1, 2).contiguous()  # (E, out, in): the stored orientation
    e, rows, inputs = t.shape
    g = t.reshape(e, rows, inputs // 32, 32)
    amax = g.abs().amax(dim=-1).clamp(min=1e-30)
    exp = torch.ceil(torch.log2(amax / 6.0)).to(torch.int32)
    scaled = g / torch.pow(2.0, exp.float())[..., None]
    codes = (scaled[..., None] - E2M1).abs().argmin(dim=-1).to(torch.uint8)  # nearest code
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed.contiguous(), (exp + 127).to(torch.uint8)


def tiny_gpt_oss(seed: int = 0) -> tuple[Any, dict[str, torch.Tensor]]:
    """(config, bf16 state dict) of a tiny gpt-oss built by transformers."""
    import transformers

    torch.manual_seed(seed)
    config = transformers.GptOssConfig(vocab_size=96, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                                       num_experts_per_tok=2, max_position_embeddings=64)
    model = transformers.GptOssForCausalLM(config).to(torch.bfloat16)
    return config, {k: v.detach().clone() for k, v in model.state_dict().items()}


def mxfp4_gpt_oss(folder: Path) -> tuple[dict[str, torch.Tensor], Any, dict[str, torch.Tensor]]:
    """A tiny gpt-oss with its experts in MXFP4 as OpenAI ships it: (base, config, transformers'
    `convert_moe_packed_tensors` of each, the reference)."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    config, base = tiny_gpt_oss()
    out: dict[str, torch.Tensor] = {}
    reference: dict[str, torch.Tensor] = {}
    for key, value in base.items():
        if key.endswith(("experts.gate_up_proj", "experts.down_proj")):
            blocks, scales = mxfp4_pack(value)
            out[key + "_blocks"], out[key + "_scales"] = blocks, scales
            reference[key] = convert_moe_packed_tensors(blocks, scales, dtype=torch.bfloat16)
        else:
            out[key] = value
    cfg = config.to_dict()
    cfg["dtype"] = "bfloat16"
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
                                                                                     "model.embed_tokens", "lm_head"]}
    write_folder(folder, out, cfg)
    return base, config, reference


def compressed_linear(w: torch.Tensor, fmt: str, bits: int = 4, symmetric: bool = True, strategy: str = "group",
                      group_size: int | None = 32) -> tuple[dict[str, torch.Tensor], torch.Tensor, dict[str, Any]]:
    """One weight compressed by compressed-tensors' own compressor for `fmt` ("pack-quantized",
    "nvfp4-pack-quantized", "float-quantized"), scales from its own `calculate_qparams`; the reference is the
    same compressor's `decompress`. (parts without the module prefix, reference weight, the config group's
    weights arguments)."""
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    rows, cols = w.shape
    if fmt == "nvfp4-pack-quantized":
        args = QuantizationArgs(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16)
        scheme = QuantizationScheme(targets=["Linear"], weights=args)
        glob = generate_gparam(w.float().amin(), w.float().amax())
        g = w.float().reshape(rows, cols // 16, 16)
        scale, _zero = calculate_qparams(g.amin(-1), g.amax(-1), args, global_scale=glob)
        state = {"weight": w, "weight_scale": scale, "weight_global_scale": glob}
        compressor: Any = NVFP4PackedCompressor
    else:
        args = QuantizationArgs(num_bits=bits, type="int", symmetric=symmetric, strategy=strategy,
                                group_size=group_size if strategy == "group" else None)
        scheme = QuantizationScheme(targets=["Linear"], weights=args)
        if strategy == "group":
            assert group_size is not None
            g = w.float().reshape(rows, cols // group_size, group_size)
            lo, hi = g.amin(-1), g.amax(-1)
        elif strategy == "channel":
            lo, hi = w.float().amin(-1, keepdim=True), w.float().amax(-1, keepdim=True)
        else:
            lo, hi = w.float().amin().reshape(1), w.float().amax().reshape(1)
        scale, zero = calculate_qparams(lo, hi, args)
        state = {"weight": w, "weight_scale": scale.to(w.dtype), "weight_zero_point": zero}
        compressor = PackedQuantizationCompressor
    parts = compressor.compress(state, scheme)
    reference = compressor.decompress(dict(parts), scheme)["weight"]
    return dict(parts), reference, args.model_dump(exclude_none=True)


def bnb_4bit(w: torch.Tensor, quant_type: str = "nf4", nested: bool = True, blocksize: int = 64
             ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`w` quantized by bitsandbytes' own `functional.quantize_4bit` on CPU, its parts named as `Linear4bit`
    saves them (`weight` and `weight.` + `QuantState.as_dict(packed=True)`), and `dequantize_4bit` of them."""
    import bitsandbytes.functional as bnb_f

    packed, state = bnb_f.quantize_4bit(w, blocksize=blocksize, compress_statistics=nested, quant_type=quant_type)
    parts = {"weight": packed, **{f"weight.{k}": v for k, v in state.as_dict(packed=True).items()}}
    return parts, bnb_f.dequantize_4bit(packed, state)


def bnb_int8(w: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`w` quantized as `Linear8bitLt` stores it (`int8_vectorwise_quant`: `weight` int8, `SCB`), and bitsandbytes'
    `int8_vectorwise_dequant` of it."""
    import bitsandbytes.functional as bnb_f

    codes, scb, _outliers = bnb_f.int8_vectorwise_quant(w.half())
    return {"weight": codes, "SCB": scb}, bnb_f.int8_vectorwise_dequant(codes, scb)


def bnb_llama(folder: Path, mode: str) -> tuple[Any, dict[str, torch.Tensor]]:
    """A tiny Llama whose linear weights bitsandbytes quantized ("nf4", "fp4", "nf4-plain" without nesting,
    "int8"): (config, the reference dequantized weights)."""
    config, base = tiny_llama(dtype=torch.bfloat16)
    out: dict[str, torch.Tensor] = {}
    reference: dict[str, torch.Tensor] = {}
    for key, value in base.items():
        if key.endswith("proj.weight"):
            stem = key[: -len("weight")]
            if mode == "int8":
                parts, ref = bnb_int8(value)
            else:
                parts, ref = bnb_4bit(value, mode.split("-")[0], nested=not mode.endswith("plain"))
            out.update({stem + k: v for k, v in parts.items()})
            reference[key] = ref
        else:
            out[key] = value
    cfg = config.to_dict()
    cfg["dtype"] = "bfloat16"
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": mode != "int8",
                                  "load_in_8bit": mode == "int8", "bnb_4bit_quant_type": mode.split("-")[0],
                                  "bnb_4bit_use_double_quant": not mode.endswith("plain")}
    write_folder(folder, out, cfg)
    return config, reference


def mlx_quantize(w: torch.Tensor, bits: int = 4, group_size: int = 64) -> tuple[dict[str, torch.Tensor], Any]:
    """`w` (rows, cols) quantized as MLX documents `mlx.core.quantize` (affine: per group, scale = (max - min) /
    (2**bits - 1), bias = min, q = round((w - bias) / scale); the codes of a row laid end to end in its
    little-endian bit stream, packed in uint32), scales and biases in w's dtype; and the reference,
    `scale * q + bias` in float64 (MLX does not run on Linux x86)."""
    import numpy as np

    rows, cols = w.shape
    g = w.float().reshape(rows, cols // group_size, group_size)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / (2 ** bits - 1)).clamp(min=1e-8).to(w.dtype)
    bias = lo.to(w.dtype)
    q = torch.round((g - bias.float()[..., None]) / scale.float()[..., None]).clamp(0, 2 ** bits - 1)
    q = q.reshape(rows, cols).to(torch.int64).numpy()
    bits_total = cols * bits
    stream = np.zeros((rows, bits_total), dtype=np.uint8)  # one bit a cell, lowest first
    for b in range(bits):
        stream[:, b::bits] = (q >> b) & 1
    as_bytes = np.packbits(stream.reshape(rows, -1, 8), axis=-1, bitorder="little").reshape(rows, -1)
    words = as_bytes.view("<u4")
    reference = (scale.double().repeat_interleave(group_size, 1) * torch.from_numpy(q).double()
                 + bias.double().repeat_interleave(group_size, 1))
    parts = {"weight": torch.from_numpy(words.astype(np.uint32).copy()), "scales": scale, "biases": bias}
    return parts, reference


def modelopt_nvfp4(w: torch.Tensor, as_f4: bool = False) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`w` (rows, cols) quantized as ModelOpt's published NVFP4 recipe does (global scale amax / (6 * 448),
    an FP8 e4m3 scale per 16 inputs, E2M1 codes packed two a byte, the low nibble first) and the reference,
    its `NVFP4QTensor.dequantize`: fp4 * (scale.float() * scale_2) in float32, to bf16 (ModelOpt needs CUDA)."""
    rows, cols = w.shape
    x = w.float()
    scale_2 = (x.abs().max() / (6.0 * 448.0)).reshape(())
    blocks = x.reshape(rows, cols // 16, 16)
    scale = (blocks.abs().amax(-1) / 6.0 / scale_2).to(torch.float8_e4m3fn)
    per = (scale.float() * scale_2)
    scaled = blocks / per.clamp(min=1e-30)[..., None]
    codes = (scaled[..., None] - E2M1).abs().argmin(dim=-1).to(torch.uint8).reshape(rows, cols)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()
    values = E2M1[codes.long()]
    reference = (values * per.repeat_interleave(16, dim=1)).to(torch.bfloat16)
    weight = packed.view(torch.float4_e2m1fn_x2) if as_f4 else packed
    return {"weight": weight, "weight_scale": scale, "weight_scale_2": scale_2.float()}, reference


def _pack3_autogptq(values: Any, along_rows: bool) -> Any:
    """AutoGPTQ's 3-bit packing loop (`QuantLinear.pack`, bits == 3): 32 codes in 3 words, two of them
    straddling words; `along_rows`: qweight's (packed down each column), else qzeros' (along each row)."""
    import numpy as np

    v = values if along_rows else values.T  # pack down axis 0
    out = np.zeros((v.shape[0] // 32 * 3, v.shape[1]), dtype=np.uint32)
    i = row = 0
    while row < out.shape[0]:
        for j in range(i, i + 10):
            out[row] |= v[j] << (3 * (j - i))
        i += 10
        out[row] |= v[i] << 30
        row += 1
        out[row] |= (v[i] >> 2) & 1
        i += 1
        for j in range(i, i + 10):
            out[row] |= v[j] << (3 * (j - i) + 1)
        i += 10
        out[row] |= v[i] << 31
        row += 1
        out[row] |= (v[i] >> 1) & 0x3
        i += 1
        for j in range(i, i + 10):
            out[row] |= v[j] << (3 * (j - i) + 2)
        i += 10
        row += 1
    return out if along_rows else out.T


def gptq3_pack(w: torch.Tensor, group_size: int = 32) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`w` (out, in) quantized to 3 bits and packed by AutoGPTQ's 3-bit loop; the reference is computed from the
    integers before packing, as its dequantization gives them: fp16(scale[g] * (q - (stored zero + 1)))."""
    import numpy as np

    out_f, in_f = w.shape
    g_idx = (torch.arange(in_f) // group_size).to(torch.int32)
    scales, zeros = _groups(w.float(), group_size, g_idx, 3)
    sf = scales.float()
    q = torch.stack([torch.round(w[:, i].float() / sf[g_idx[i]] + zeros[g_idx[i]]).clamp(0, 7)
                     for i in range(in_f)], dim=0).to(torch.int64)  # (in, out)
    stored_zeros = ((zeros - 1) & 7).to(torch.int64)  # the v1 format stores zero - 1, in 3 bits
    qweight = _pack3_autogptq(q.numpy().astype(np.uint32), along_rows=True)
    qzeros = _pack3_autogptq(stored_zeros.numpy().astype(np.uint32), along_rows=False)
    reference = (scales[g_idx.long()] * (q - (stored_zeros + 1)[g_idx.long()]).to(torch.float16)).t().contiguous()
    parts = {"qweight": torch.from_numpy(qweight.view(np.int32).copy()),
             "qzeros": torch.from_numpy(np.ascontiguousarray(qzeros).view(np.int32).copy()),
             "scales": scales, "g_idx": g_idx}
    return parts, reference

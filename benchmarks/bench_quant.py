"""Statistics of a 4-bit GPTQ checkpoint: ckptview against the library's own dequantization plus torch float64
statistics (issue 42). Benchmarks are not tests: nothing is asserted.

    .venv/bin/python benchmarks/bench_quant.py [--layers 22] [--repeat 1]

Writes (once, into benchmarks/_data) a GPTQ folder shaped as TinyLlama-1.1B (hidden 2048, intermediate 5632,
22 layers: 0.97 billion quantized weights, int4, group 128, fp16 scales; 0.53 GB), its codes random, and
times in fresh processes, on a warm page cache:

- ckptview: `open_checkpoint` and `tensor_stats` of every quantized weight (its parts dequantized in blocks);
- the reference: each weight's parts loaded with safetensors, dequantized by AutoGPTQ's torch
  `dequantize_weight` (tests/support/quantized.py, the code gptqmodel and AutoGPTQ run; they build CUDA
  kernels and do not install here), then torch's float64 count, mean, std, min, max.

Prints each side's wall time and peak RSS and the paired ratios (ckptview / reference). The GGUF rows of the
issue's benchmark are another module's (bench_gguf.py, with the GGUF reader).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from common import DATA, run_side, warm

HIDDEN, INTER, HEADS, KV_HEADS, GROUP = 2048, 5632, 32, 4, 128

OURS = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from ckptview.core.read import open_checkpoint
from ckptview.core.figures.stats import tensor_stats
t0 = time.perf_counter()
ckpt = open_checkpoint(sys.argv[1])
n = total = 0
for entry in ckpt.tensors():
    if entry.info.quant is not None:
        s = tensor_stats(entry.info)
        n += 1
        total += s.numel
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "tensors": n, "elements": total}))
"""

REFERENCE = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
import torch
from safetensors import safe_open
from tests.support.quantized import gptq_reference
t0 = time.perf_counter()
n = total = 0
with safe_open(sys.argv[1] + "/model.safetensors", "pt") as f:
    stems = sorted(k[: -len(".qweight")] for k in f.keys() if k.endswith(".qweight"))
    for stem in stems:
        parts = {p: f.get_tensor(f"{stem}.{p}") for p in ("qweight", "qzeros", "scales", "g_idx")}
        w = gptq_reference(parts, 4).double()
        stats = (w.numel(), w.mean().item(), w.std().item(), w.min().item(), w.max().item())
        n += 1
        total += stats[0]
        del w, parts
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "tensors": n, "elements": total}))
"""


def gptq_folder(layers: int) -> str:
    """The GPTQ folder of `layers` TinyLlama-shaped layers (written once)."""
    import numpy as np
    from safetensors.numpy import save_file

    folder = os.path.join(DATA, f"gptq_tinyllama_{layers}")
    if os.path.exists(os.path.join(folder, "model.safetensors")):
        return folder
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    head = HIDDEN // HEADS
    shapes = {"self_attn.q_proj": (HIDDEN, HIDDEN), "self_attn.k_proj": (KV_HEADS * head, HIDDEN),
              "self_attn.v_proj": (KV_HEADS * head, HIDDEN), "self_attn.o_proj": (HIDDEN, HIDDEN),
              "mlp.gate_proj": (INTER, HIDDEN), "mlp.up_proj": (INTER, HIDDEN), "mlp.down_proj": (HIDDEN, INTER)}
    tensors = {}
    for layer in range(layers):
        for name, (out_f, in_f) in shapes.items():
            stem = f"model.layers.{layer}.{name}"
            tensors[f"{stem}.qweight"] = rng.integers(-2**31, 2**31 - 1, (in_f // 8, out_f), dtype=np.int32)
            tensors[f"{stem}.qzeros"] = rng.integers(-2**31, 2**31 - 1, (in_f // GROUP, out_f // 8), dtype=np.int32)
            tensors[f"{stem}.scales"] = (rng.random((in_f // GROUP, out_f)) * 1e-3 + 1e-3).astype(np.float16)
            tensors[f"{stem}.g_idx"] = (np.arange(in_f) // GROUP).astype(np.int32)
    save_file(tensors, os.path.join(folder, "model.safetensors"))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
              "intermediate_size": INTER, "num_hidden_layers": layers, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "dtype": "float16",
              "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": False,
                                      "sym": True, "checkpoint_format": "gptq"}}
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump(config, fh)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=22)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    folder = gptq_folder(args.layers)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = os.path.join(root, "src")
    warm([os.path.join(folder, "model.safetensors")])
    size = os.path.getsize(os.path.join(folder, "model.safetensors"))
    print(f"GPTQ int4 group {GROUP}, {args.layers} TinyLlama layers, {size / 2**30:.2f} GiB (page cache warm)")
    for _ in range(args.repeat):
        ours = run_side(OURS, folder, src)
        theirs = run_side(REFERENCE, folder, root)
        print(f"  ckptview statistics     {ours['seconds']:8.2f} s  {ours['peak_mb']:8.0f} MiB  "
              f"({ours['tensors']} weights, {ours['elements'] / 1e9:.3f} G elements)")
        print(f"  dequantize + torch f64  {theirs['seconds']:8.2f} s  {theirs['peak_mb']:8.0f} MiB  "
              f"({theirs['tensors']} weights, {theirs['elements'] / 1e9:.3f} G elements)")
        print(f"  ratio (ckptview / reference): time {ours['seconds'] / theirs['seconds']:.2f}x, "
              f"peak memory {ours['peak_mb'] / theirs['peak_mb']:.2f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

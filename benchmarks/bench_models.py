"""`ckptview run FOLDER` (no model code) against transformers' `from_pretrained` + one forward pass.

Builds a Llama-shaped causal LM folder in benchmarks/_data (once; sizes from the flags), then times each
side in a fresh process, best of --repeat, with the peak RSS of the process tree: ckptview's parent and
its worker, and a script that does `from_pretrained(folder)` and one forward pass on the same inputs.

    .venv/bin/python benchmarks/bench_models.py                  # ~0.5 B parameters in bf16 (1 GB)
    .venv/bin/python benchmarks/bench_models.py --layers 22 --hidden 2048   # ~1.1 B parameters
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from common import DATA, measure

REFERENCE = r"""
import sys, time, torch, transformers
t0 = time.perf_counter()
model = transformers.LlamaForCausalLM.from_pretrained(sys.argv[1]).eval()
loaded = time.perf_counter() - t0
ids = torch.randint(0, model.config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
print(f"from_pretrained load {loaded:.2f} s", file=sys.stderr)
"""


def build(folder: str, layers: int, hidden: int, vocab: int) -> int:
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                                      num_hidden_layers=layers, num_attention_heads=hidden // 64,
                                      num_key_value_heads=max(1, hidden // 256), max_position_embeddings=512,
                                      tie_word_embeddings=False, dtype="bfloat16")
    with torch.device("meta"):
        meta = transformers.LlamaForCausalLM(config)
    params = sum(p.numel() for p in meta.parameters())
    if not os.path.exists(os.path.join(folder, "config.json")):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
        model.save_pretrained(folder)
    return params


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=1536)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    folder = os.path.join(DATA, f"llama_{args.layers}x{args.hidden}_v{args.vocab}")
    params = build(folder, args.layers, args.hidden, args.vocab)
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"Llama-shaped causal LM: {params / 1e9:.2f} B parameters, {size / 2**30:.2f} GiB on disk (bf16)")
    ckptview = [sys.executable, "-m", "ckptview", "run", folder, "--json", "--runs", "1", "--warmup", "0"]
    ours = measure(ckptview, args.repeat)
    theirs = measure([sys.executable, "-c", REFERENCE, folder], args.repeat)
    ours_json = json.loads(__import__("subprocess").run(ckptview, capture_output=True, text=True).stdout)
    print(f"ckptview run (parent + worker):   {ours['seconds']:.2f} s wall, peak RSS {ours['peak_mb']:.0f} MiB; "
          f"load {ours_json['load_seconds']:.2f} s, {ours_json['load']['bytes_moved'] / 2**30:.2f} GiB moved")
    print(f"from_pretrained + one forward:    {theirs['seconds']:.2f} s wall, peak RSS {theirs['peak_mb']:.0f} MiB")
    print(f"ratio (ckptview / from_pretrained): time {ours['seconds'] / theirs['seconds']:.2f}x, "
          f"peak memory {ours['peak_mb'] / theirs['peak_mb']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

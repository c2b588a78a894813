"""`ckptview run FOLDER` (no model code) against transformers' `from_pretrained` + one forward pass.

Builds a Llama-shaped causal LM folder in benchmarks/_data (once; sizes from the flags), then runs the two
sides in pairs, each in a fresh process, alternating which goes first: `ckptview run FOLDER` (its load: the
worker's `load_seconds`, importing transformers included; its peak: the worker's RSS) and a script that
imports transformers, does `from_pretrained(folder)` and one forward pass. It prints each pair's ratios and
their medians: the load, the load and the first forward (from_pretrained maps the file, so its pages are read
during that forward; ckptview reads them while loading), and peak memory; the budget is 1.2x.

    .venv/bin/python benchmarks/bench_models.py                  # ~0.5 B parameters in bf16 (1 GB)
    .venv/bin/python benchmarks/bench_models.py --layers 22 --hidden 2048   # ~1.1 B parameters
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from common import DATA

REFERENCE = r"""
import json, sys, time, torch
t0 = time.perf_counter()
import transformers
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
loaded = time.perf_counter() - t0
ids = torch.randint(0, model.config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(0))
t1 = time.perf_counter()
with torch.no_grad():
    model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
print(json.dumps({"load_seconds": loaded, "forward_seconds": time.perf_counter() - t1}))
"""

# One side in a fresh process: wall time, the peak RSS of its largest process (ckptview's worker; the
# reference's own interpreter), and its last line of output.
_SIDE = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.run(json.loads(sys.argv[1]), capture_output=True, text=True)
elapsed = time.perf_counter() - t0
peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"seconds": elapsed, "peak_mb": peak_kb / 1024, "rc": proc.returncode,
                  "out": proc.stdout, "err": proc.stderr[-500:]}))
"""


def side(cmd: list[str]) -> dict:
    """One measured run of `cmd`; its JSON output parsed ("result")."""
    out = subprocess.run([sys.executable, "-c", _SIDE, json.dumps(cmd)], capture_output=True, text=True,
                         check=True)
    measured = json.loads(out.stdout)
    if measured["rc"] != 0:
        raise RuntimeError(f"{cmd[:4]} failed: {measured['err']}")
    measured["result"] = json.loads(measured["out"])  # one JSON object on each side
    return measured


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
    parser.add_argument("--pairs", type=int, default=3, help="ckptview / from_pretrained runs, alternating")
    args = parser.parse_args()
    folder = os.path.join(DATA, f"llama_{args.layers}x{args.hidden}_v{args.vocab}")
    params = build(folder, args.layers, args.hidden, args.vocab)
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"Llama-shaped causal LM: {params / 1e9:.2f} B parameters, {size / 2**30:.2f} GiB on disk (bf16)")
    ckptview = [sys.executable, "-m", "ckptview", "run", folder, "--json", "--runs", "1", "--warmup", "0"]
    reference = [sys.executable, "-c", REFERENCE, folder]
    load_ratios, ready_ratios, peak_ratios = [], [], []
    for pair in range(args.pairs):  # paired: each ckptview run next to a from_pretrained run, order alternating
        first, second = (ckptview, reference) if pair % 2 == 0 else (reference, ckptview)
        a, b = side(first), side(second)
        ours, theirs = (a, b) if first is ckptview else (b, a)
        # from_pretrained maps the file: its pages come in during the first forward, not the load; ckptview
        # has read them. Load + first forward is the same work on both sides.
        ours_ready = ours["result"]["load_seconds"] + ours["result"]["latency_ms"]["median"] / 1000
        theirs_ready = theirs["result"]["load_seconds"] + theirs["result"]["forward_seconds"]
        load = ours["result"]["load_seconds"] / theirs["result"]["load_seconds"]
        ready = ours_ready / theirs_ready
        peak = ours["peak_mb"] / theirs["peak_mb"]
        load_ratios.append(load)
        ready_ratios.append(ready)
        peak_ratios.append(peak)
        print(f"pair {pair + 1}: ckptview load {ours['result']['load_seconds']:.2f} s (+ forward "
              f"{ours_ready:.2f} s), worker peak RSS {ours['peak_mb']:.0f} MiB, wall {ours['seconds']:.2f} s | "
              f"from_pretrained load {theirs['result']['load_seconds']:.2f} s (+ forward {theirs_ready:.2f} s), "
              f"peak RSS {theirs['peak_mb']:.0f} MiB, wall {theirs['seconds']:.2f} s | ratios: load {load:.2f}x, "
              f"load + forward {ready:.2f}x, peak {peak:.2f}x")
    print(f"median ratios (ckptview / from_pretrained): load {statistics.median(load_ratios):.2f}x, load + first "
          f"forward {statistics.median(ready_ratios):.2f}x, peak memory {statistics.median(peak_ratios):.2f}x "
          f"(budget 1.2x each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

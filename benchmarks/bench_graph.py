"""`ckptview graph` against torch's own ways to the same graph, paired in one run; prints the ratios.

1. A .pt2 of ~2,000 ops: `ckptview graph F --json` (the program's JSON read as data, no torch) against
   `torch.export.load(F).graph`, each in a fresh process, and each side's own work timed inside the process
   (imports apart). Goal: under 0.5x.
2. A ~1.1 B-parameter Llama folder whose weights are never read (its safetensors file is sparse: a header,
   then holes): `ckptview graph FOLDER --json` with an empty cache (the worker builds the class on meta and
   traces it) against a script that imports transformers, builds the same model on meta and runs
   `torch.export` with the same inputs. Goal: within 1.2x, under 1 GiB.
3. The same command again, the traced graph now in the cache; and the in-process `read_graph` of the reopen
   (what the window pays). Goal: under 0.2 s.

    .venv/bin/python benchmarks/bench_graph.py              # defaults: 700 blocks, TinyLlama's shape
    .venv/bin/python benchmarks/bench_graph.py --layers 4   # a quicker smaller run
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile

from common import DATA, measure, run_side

EXPORT_LOAD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
graph = torch.export.load(sys.argv[1]).graph
ops = sum(1 for n in graph.nodes if n.op == "call_function")
print(json.dumps({"import": t1 - t0, "work": time.perf_counter() - t1, "ops": ops}))
"""

OURS = r"""
import json, sys, time
t0 = time.perf_counter()
from ckptview.core.graph import read_graph
from ckptview.core.read.open import open_checkpoint
t1 = time.perf_counter()
checkpoint = open_checkpoint(sys.argv[1])
graph = read_graph(checkpoint)
ops = sum(1 for n in graph.nodes if n.op not in ("input", "output"))
print(json.dumps({"import": t1 - t0, "work": time.perf_counter() - t1, "ops": ops, "torch": "torch" in sys.modules}))
"""

META_EXPORT = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, transformers
config = transformers.LlamaConfig.from_pretrained(sys.argv[1])
config.use_cache = False
with torch.device("meta"):
    model = transformers.LlamaForCausalLM(config).eval()
model.tie_weights()
inputs = {"input_ids": torch.zeros((1, 8), dtype=torch.int64, device="meta"),
          "attention_mask": torch.ones((1, 8), dtype=torch.int64, device="meta")}
with torch.no_grad():
    program = torch.export.export(model, (), inputs, strict=False)
print(json.dumps({"seconds": time.perf_counter() - t0, "nodes": len(program.graph.nodes)}))
"""

REOPEN = r"""
import json, sys, time
from ckptview.core.graph import read_graph
from ckptview.core.read.open import open_checkpoint
checkpoint = open_checkpoint(sys.argv[1])
t0 = time.perf_counter()
graph = read_graph(checkpoint)
print(json.dumps({"seconds": time.perf_counter() - t0, "nodes": len(graph.nodes)}))
"""


def build_pt2(path: str, blocks: int) -> None:
    import torch
    from torch import nn

    layers: list[nn.Module] = []
    for _ in range(blocks):
        layers += [nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU()]
    model = nn.Sequential(*layers).eval()
    torch.export.save(torch.export.export(model, (torch.randn(2, 16),)), path)


def build_llama(folder: str, layers: int, hidden: int, vocab: int) -> int:
    """config.json and a sparse model.safetensors: the header of every bf16 weight, no bytes behind it."""
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                                      num_hidden_layers=layers, num_attention_heads=hidden // 64,
                                      num_key_value_heads=max(1, hidden // 512), max_position_embeddings=2048,
                                      tie_word_embeddings=False, dtype="bfloat16")
    config.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        meta = transformers.LlamaForCausalLM(config)
    os.makedirs(folder, exist_ok=True)
    config.to_json_file(os.path.join(folder, "config.json"))
    header, offset = {}, 0
    for name, tensor in meta.state_dict().items():
        nbytes = tensor.numel() * 2
        header[name] = {"dtype": "BF16", "shape": list(tensor.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        fh.truncate(8 + len(text) + offset)  # holes: nothing is written, nothing is read
    return sum(p.numel() for p in meta.parameters())


def graph_cmd(path: str) -> list[str]:
    return [sys.executable, "-m", "ckptview", "graph", path, "--json"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=700, help="Linear+LayerNorm+GELU blocks of the .pt2")
    parser.add_argument("--layers", type=int, default=22)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--library-only", action="store_true", help="skip the .pt2 comparison")
    args = parser.parse_args()
    os.makedirs(DATA, exist_ok=True)
    if not args.library_only:
        compare_pt2(args)
    compare_library(args)
    return 0


def compare_pt2(args: argparse.Namespace) -> None:
    pt2 = os.path.join(DATA, f"graph_{args.blocks}_blocks.pt2")
    if not os.path.exists(pt2):
        build_pt2(pt2, args.blocks)
    ours, theirs = run_side(OURS, pt2), run_side(EXPORT_LOAD, pt2)
    assert ours["ops"] == theirs["ops"] and not ours["torch"], (ours, theirs)
    ours_cli = measure(graph_cmd(pt2), args.repeat)
    theirs_cli = measure([sys.executable, "-c", EXPORT_LOAD, pt2], args.repeat)
    print(f".pt2 of {ours['ops']:,} ops ({os.path.getsize(pt2) / 2**20:.1f} MiB)")
    print(f"  in process   ckptview read_graph {ours['work']:.3f} s   torch.export.load(...).graph "
          f"{theirs['work']:.3f} s (+ import torch {theirs['import']:.2f} s)   ratio {ours['work'] / theirs['work']:.2f}x")
    print(f"  fresh process ckptview graph --json {ours_cli['seconds']:.2f} s, {ours_cli['peak_mb']:.0f} MB   "
          f"torch {theirs_cli['seconds']:.2f} s, {theirs_cli['peak_mb']:.0f} MB   "
          f"ratio {ours_cli['seconds'] / theirs_cli['seconds']:.2f}x (goal < 0.5x)")


def compare_library(args: argparse.Namespace) -> None:
    folder = os.path.join(DATA, f"llama_meta_{args.layers}x{args.hidden}_v{args.vocab}")
    params = build_llama(folder, args.layers, args.hidden, args.vocab)
    apparent = os.path.getsize(os.path.join(folder, "model.safetensors"))
    print(f"Llama {params / 1e9:.2f} B parameters ({apparent / 2**30:.2f} GiB of bf16 weights, sparse: never read)")
    reference = run_side(META_EXPORT, folder)
    cold: dict = {}
    reference_cli: dict = {}
    for _ in range(max(1, args.repeat - 1)):  # paired: each cold run in a cache folder of its own
        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="ckptview-bench-cache-")
        run = measure(graph_cmd(folder), 1)
        cold = run if not cold or run["seconds"] < cold["seconds"] else cold
        ref = measure([sys.executable, "-c", META_EXPORT, folder], 1)
        reference_cli = ref if not reference_cli or ref["seconds"] < reference_cli["seconds"] else reference_cli
    warm = measure(graph_cmd(folder), args.repeat)
    reopen = run_side(REOPEN, folder)
    print(f"  cold  ckptview graph --json (worker traces) {cold['seconds']:.2f} s, peak {cold['peak_mb']:.0f} MB   "
          f"import transformers + meta build + torch.export {reference_cli['seconds']:.2f} s "
          f"({reference['seconds']:.2f} s inside), peak {reference_cli['peak_mb']:.0f} MB   "
          f"ratio {cold['seconds'] / reference_cli['seconds']:.2f}x (goal <= 1.2x, < 1024 MB)")
    print(f"  cached ckptview graph --json {warm['seconds']:.2f} s, peak {warm['peak_mb']:.0f} MB;   "
          f"in-process reopen read_graph {reopen['seconds']:.3f} s ({reopen['nodes']:,} nodes; torch's program "
          f"{reference['nodes']:,} with its {reference['nodes'] - reopen['nodes']:,} placeholders of state) "
          f"(goal < 0.2 s)")


if __name__ == "__main__":
    sys.exit(main())

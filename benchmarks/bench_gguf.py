"""GGUF files: ckptview against the gguf package's own reader and dequantization (issue 42). Benchmarks are not
tests: nothing is asserted.

    .venv/bin/python benchmarks/bench_gguf.py [--listing-only | --stats-only] [--layers 22] [--repeat 3]

Writes (once, into benchmarks/_data) two files with gguf's own `GGUFWriter`:

- listing: a Llama-2-7B-shaped Q4_K_M file (291 tensors, 6.7 billion weights, a 32,000-token vocabulary with its
  scores and token types: the header llama.cpp's converter writes), its 3.8 GiB of blocks left a sparse hole
  (only the header is written: a listing never reads them). Timed in fresh processes, best of `--repeat`:
  ckptview's `open_checkpoint` and its tensor list against `gguf.GGUFReader(path)` and its tensor list;
- statistics: a TinyLlama-1.1B-shaped Q4_K_M-like file (22 layers, Q4_K matrices, Q6_K `attn_v`, `ffn_down` and
  `output`, F32 norms: 1.1 billion weights, 0.6 GiB), its blocks random with finite scales (gguf cannot write
  K-quants). ckptview's `tensor_stats` of every quantized tensor (its blocks dequantized a few rows at a time)
  against each tensor dequantized whole by `gguf.quants.dequantize` (from `GGUFReader`'s memory map) and
  numpy's float64 count, mean, std, min and max, on a warm page cache.

Prints each side's time (in-process, imports excluded; and the whole process) and peak RSS, and the paired
ratios (ckptview / gguf).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from common import DATA, run_side, warm

HIDDEN7, INTER7, LAYERS7, VOCAB = 4096, 11008, 32, 32000
HIDDEN1, INTER1, HEADS1, KV1 = 2048, 5632, 32, 4

LIST_OURS = r"""
import json, resource, sys, time
t_import = time.perf_counter()
sys.path.insert(0, sys.argv[2])
from ckptview.core.read import open_checkpoint
t0 = time.perf_counter()
ckpt = open_checkpoint(sys.argv[1])
listed = [(e.name, e.info.shape, e.info.quant.label if e.info.quant else e.info.dtype) for e in ckpt.tensors()]
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "process": time.perf_counter() - t_import, "tensors": len(listed),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

LIST_GGUF = r"""
import json, resource, sys, time
t_import = time.perf_counter()
import gguf
t0 = time.perf_counter()
reader = gguf.GGUFReader(sys.argv[1])
listed = [(t.name, tuple(reversed(t.shape.tolist())), t.tensor_type.name) for t in reader.tensors]
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "process": time.perf_counter() - t_import, "tensors": len(listed),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

STATS_OURS = r"""
import json, resource, sys, time
t_import = time.perf_counter()
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
print(json.dumps({"seconds": seconds, "process": time.perf_counter() - t_import, "tensors": n, "elements": total,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

STATS_GGUF = r"""
import json, resource, sys, time
t_import = time.perf_counter()
import gguf
import numpy as np
t0 = time.perf_counter()
reader = gguf.GGUFReader(sys.argv[1])
n = total = 0
for t in reader.tensors:
    if t.tensor_type.name in ("F32", "F16", "BF16"):
        continue
    w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
    stats = (w.size, w.mean(), w.std(), w.min(), w.max())
    n += 1
    total += stats[0]
    del w
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "process": time.perf_counter() - t_import, "tensors": n, "elements": total,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _llama_metadata(writer, layers: int, hidden: int, inter: int, heads: int, kv: int) -> None:
    """The key/values llama.cpp's converter writes for a Llama with a SentencePiece vocabulary."""
    import gguf

    writer.add_name("bench")
    writer.add_context_length(4096)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(inter)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "<s>", "</s>"] + [f"\u2581tok{i}" for i in range(VOCAB - 3)])
    writer.add_token_scores([-float(i) for i in range(VOCAB)])
    writer.add_token_types([2, 3, 3] + [1] * (VOCAB - 3))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_quantization_version(2)


def _shapes(layers: int, hidden: int, inter: int, heads: int, kv: int) -> dict[str, tuple[tuple[int, int], str]]:
    """name -> ((rows, cols), ggml type) of a Q4_K_M-like Llama (Q6_K for attn_v, ffn_down and the output)."""
    kv_dim = hidden // heads * kv
    out = {"token_embd.weight": ((VOCAB, hidden), "Q4_K")}
    for i in range(layers):
        out |= {f"blk.{i}.attn_norm.weight": ((1, hidden), "F32"), f"blk.{i}.ffn_norm.weight": ((1, hidden), "F32"),
                f"blk.{i}.attn_q.weight": ((hidden, hidden), "Q4_K"), f"blk.{i}.attn_k.weight": ((kv_dim, hidden), "Q4_K"),
                f"blk.{i}.attn_v.weight": ((kv_dim, hidden), "Q6_K"), f"blk.{i}.attn_output.weight": ((hidden, hidden), "Q4_K"),
                f"blk.{i}.ffn_gate.weight": ((inter, hidden), "Q4_K"), f"blk.{i}.ffn_up.weight": ((inter, hidden), "Q4_K"),
                f"blk.{i}.ffn_down.weight": ((hidden, inter), "Q6_K")}
    out |= {"output_norm.weight": ((1, hidden), "F32"), "output.weight": ((VOCAB, hidden), "Q6_K")}
    return out


def sparse_7b() -> str:
    """The 7B listing file: header and tensor infos written, the data a hole (written once)."""
    import gguf
    import numpy as np

    path = os.path.join(DATA, "llama7b_q4_k_m_sparse.gguf")
    if os.path.exists(path):
        return path
    os.makedirs(DATA, exist_ok=True)
    writer = gguf.GGUFWriter(path, "llama")
    _llama_metadata(writer, LAYERS7, HIDDEN7, INTER7, 32, 32)
    end = 0
    for name, ((rows, cols), kind) in _shapes(LAYERS7, HIDDEN7, INTER7, 32, 32).items():
        qtype = gguf.GGMLQuantizationType[kind]
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        shape = (cols,) if rows == 1 else (rows, cols)
        nbytes = rows * cols // block * size
        writer.add_tensor_info(name, shape, np.dtype(np.float32) if kind == "F32" else np.dtype(np.float16),
                               nbytes, raw_dtype=qtype)
        end += -(-nbytes // 32) * 32
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header = os.path.getsize(path)
    os.truncate(path, -(-header // 32) * 32 + end)  # a sparse hole where the blocks would be
    return path


def dense_1b(layers: int) -> str:
    """The 1.1B statistics file: random blocks with finite float16 scales (written once)."""
    import gguf
    import numpy as np

    path = os.path.join(DATA, f"tinyllama_q4_k_m_{layers}.gguf")
    if os.path.exists(path):
        return path
    os.makedirs(DATA, exist_ok=True)
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    _llama_metadata(writer, layers, HIDDEN1, INTER1, HEADS1, KV1)
    scale_at = {"Q4_K": (0, 2), "Q6_K": (208,)}  # the float16 d (and dmin) of each block
    for name, ((rows, cols), kind) in _shapes(layers, HIDDEN1, INTER1, HEADS1, KV1).items():
        if kind == "F32":
            writer.add_tensor(name, np.ones(cols, np.float32))
            continue
        qtype = gguf.GGMLQuantizationType[kind]
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        data = rng.integers(0, 256, (rows, cols // block * size), dtype=np.uint8)
        blocks = data.reshape(-1, size)
        for at in scale_at[kind]:
            scales = (rng.random(len(blocks), dtype=np.float32) * 1e-3 + 1e-4).astype(np.float16)
            blocks[:, at : at + 2] = scales.view(np.uint8).reshape(-1, 2)
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _pair(title: str, ours: dict, theirs: dict, what: str) -> None:
    print(f"  ckptview                {ours['seconds']:8.3f} s  (process {ours['process']:6.2f} s)  "
          f"{ours['peak_mb']:7.0f} MiB  {what.format(**ours)}")
    print(f"  gguf                    {theirs['seconds']:8.3f} s  (process {theirs['process']:6.2f} s)  "
          f"{theirs['peak_mb']:7.0f} MiB  {what.format(**theirs)}")
    print(f"  ratio (ckptview / gguf): {title} time {ours['seconds'] / theirs['seconds']:.2f}x, "
          f"peak memory {ours['peak_mb'] / theirs['peak_mb']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=22)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--listing-only", action="store_true")
    parser.add_argument("--stats-only", action="store_true")
    parser.add_argument("--build", choices=("listing", "stats"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:  # in a process of its own: a child inherits its parent's peak RSS (the writer's buffers)
        sparse_7b() if args.build == "listing" else dense_1b(args.layers)
        return
    kinds = [k for k, skip in (("listing", args.stats_only), ("stats", args.listing_only)) if not skip]
    for kind in kinds:
        subprocess.run([sys.executable, os.path.abspath(__file__), "--build", kind, "--layers", str(args.layers)],
                       check=True)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = os.path.join(root, "src")
    if not args.stats_only:
        path = sparse_7b()
        print(f"Listing a 7B Q4_K_M GGUF ({os.path.getsize(path) / 2**30:.2f} GiB, sparse), best of {args.repeat}")
        ours = min((run_side(LIST_OURS, path, src) for _ in range(args.repeat)), key=lambda r: r["seconds"])
        theirs = min((run_side(LIST_GGUF, path) for _ in range(args.repeat)), key=lambda r: r["seconds"])
        _pair("listing", ours, theirs, "{tensors} tensors")
    if not args.listing_only:
        path = dense_1b(args.layers)
        warm([path])
        print(f"Statistics of a {args.layers}-layer TinyLlama Q4_K_M GGUF ({os.path.getsize(path) / 2**30:.2f} GiB, "
              "page cache warm)")
        for _ in range(max(1, args.repeat // 3)):
            ours = run_side(STATS_OURS, path, src)
            theirs = run_side(STATS_GGUF, path)
            _pair("statistics", ours, theirs, "({tensors} tensors, {elements} elements)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

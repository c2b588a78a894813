"""Exact histogram of the largest tensor of a bf16 checkpoint vs torch.histc on a fully loaded copy.

    .venv/bin/python benchmarks/bench_stats.py                 # 20M-element bf16 tensor (modest)
    .venv/bin/python benchmarks/bench_stats.py --size 750000000 --path big.pt   # the 1.5 GB case

Prints times, peak Python-heap memory (tracemalloc; the mapped file pages are not heap) and ratios.
Goal: exact histogram <= 1.5x torch.histc's time, peak memory bounded by the chunk, preview < 0.3 s.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any


def measure(fn: Callable[[], Any]) -> tuple[float, int, Any]:
    """(seconds, peak traced bytes, result) of one call."""
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak, result


def bench(path: str, bins: int) -> dict[str, float]:
    """Measure on the largest tensor of ``path``; returns the figures."""
    import torch

    from ckptview.core import open_checkpoint
    from ckptview.core.figures.histogram import iter_tensor_histogram, tensor_sample_histogram
    from ckptview.core.figures.stats import DEFAULT_CHUNK_ELEMS
    from ckptview.core.jobs import drain

    ckpt = open_checkpoint(path)
    entry = max(ckpt.tensors(), key=lambda e: e.info.nbytes)
    info = entry.info
    t_prev, _, preview = measure(lambda: tensor_sample_histogram(info, bins))
    t_ours, peak_ours, hist = measure(lambda: drain(iter_tensor_histogram(info, bins)))
    loaded = torch.load(path, weights_only=True, mmap=False)
    tensor = loaded
    for key in entry.path:
        tensor = tensor[key]
    torch.histc(tensor[:1000], bins=bins)  # warm-up (thread pool, dispatch)
    t_torch, _, ref = measure(lambda: torch.histc(tensor, bins=bins))
    ckpt.close()
    # histc on bf16 returns bf16 counts (rounded), so check the bins against histc in float32, untimed.
    lo, hi = float(hist.edges[0]), float(hist.edges[-1])
    check = torch.histc(tensor.float(), bins=bins, min=lo, max=hi).long().numpy()
    agree = int(abs(check - hist.counts).max())
    del ref
    print(f"tensor {entry.name}: {info.dtype} {list(info.shape)} ({info.nbytes / 2**20:.0f} MiB)")
    print(f"exact histogram (ckptview, streamed): {t_ours:.3f} s, peak heap {peak_ours / 2**20:.1f} MiB "
          f"(chunk {DEFAULT_CHUNK_ELEMS * info.nbytes // max(info.numel, 1) / 2**20:.0f} MiB)")
    print(f"torch.histc on the loaded tensor:     {t_torch:.3f} s (tensor itself {info.nbytes / 2**20:.0f} MiB)")
    print(f"ratio ckptview / torch.histc:         {t_ours / t_torch:.2f}x (goal <= 1.5x)")
    print(f"sampled preview:                      {t_prev:.3f} s from {preview.looked_at:,} values (goal < 0.3 s)")
    print(f"max bin difference vs float32 histc: {agree} (edge rounding only)")
    return {"ours_s": t_ours, "torch_s": t_torch, "ratio": t_ours / t_torch, "preview_s": t_prev,
            "peak_bytes": peak_ours}


def main() -> None:
    """Build (or take) a bf16 checkpoint and benchmark it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20_000_000, help="elements of the bf16 tensor to build")
    parser.add_argument("--path", help="benchmark this checkpoint instead of building one")
    parser.add_argument("--bins", type=int, default=100)
    args = parser.parse_args()
    if args.path and os.path.exists(args.path):
        bench(args.path, args.bins)
        return
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        path = args.path or os.path.join(tmp, "bf16.pt")
        rows = max(1, args.size // 4096)
        big = torch.randn(rows, 4096, dtype=torch.bfloat16)
        torch.save({"embed.weight": big, "norm.weight": torch.ones(4096, dtype=torch.bfloat16)}, path)
        del big
        bench(path, args.bins)


if __name__ == "__main__":
    main()

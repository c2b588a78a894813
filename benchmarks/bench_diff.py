"""`ckptview diff` (streamed) against a plain script that torch.loads both files and computes the same figures.

    .venv/bin/python benchmarks/bench_diff.py                  # two ~100 MB float32 checkpoints
    .venv/bin/python benchmarks/bench_diff.py --size-mb 500    # the issue's case (two ~500 MB files)

Each side runs in a fresh subprocess and reports its peak resident memory, interpreter and imports
included: VmHWM of /proc/self/status, because ru_maxrss of a child inherits the high-water mark of the
parent at fork (which holds torch and the tensors it built). The files are read once before timing so both sides start from a warm page cache.
Goal: ckptview's peak under 300 MB and its time no worse than 1.2x the torch script's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from common import run_side, warm  # the benchmarks run as scripts from this folder

# Both measured scripts start with this: peak memory from the kernel (VmHWM).
PRELUDE = r"""
import json, resource, sys, time
def peak_kb():
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM"))
    except (OSError, StopIteration):  # not Linux: ru_maxrss (kB on Linux, bytes on macOS)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""

OURS = PRELUDE + r"""
t0 = time.perf_counter()
from ckptview.core import open_checkpoint
from ckptview.core.compare.diff import diff_checkpoints
a, b = open_checkpoint(sys.argv[1]), open_checkpoint(sys.argv[2])
result = diff_checkpoints(a, b)
seconds = time.perf_counter() - t0
rel = {t.name: t.rel_l2 for t in result.tensors}
print(json.dumps({"seconds": seconds, "maxrss_kb": peak_kb(),
                  "rel": rel, "summary": result.summary()}))
"""

TORCH = PRELUDE + r"""
t0 = time.perf_counter()
import torch
imported = time.perf_counter() - t0
a = torch.load(sys.argv[1], weights_only=True)
b = torch.load(sys.argv[2], weights_only=True)
rel = {}
for name, ta in a.items():
    tb = b[name]
    x, y = ta.double(), tb.double()
    d = y - x
    ad = d.abs()
    figures = (ad.max().item(), ad.mean().item(), (d.norm() / x.norm()).item(),
               ((x * y).sum() / (x.norm() * y.norm())).item(), (ta != tb).double().mean().item())
    rel[name] = figures[2]
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "import_s": imported, "maxrss_kb": peak_kb(), "rel": rel}))
"""



def make_pair(folder: str, size_mb: int) -> tuple[str, str]:
    """Two float32 state dicts of about ``size_mb`` MB each, B a perturbed copy of A (plus a few equal tensors)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    layer = 2048 * 2048  # 16 MiB float32 per big weight
    count = max(1, size_mb * 2**20 // (4 * layer))
    a, b = {}, {}
    for i in range(count):
        w = torch.randn(2048, 2048, generator=gen)
        a[f"layers.{i}.weight"] = w
        b[f"layers.{i}.weight"] = w + 1e-3 * torch.randn(2048, 2048, generator=gen)
        bias = torch.randn(2048, generator=gen)
        a[f"layers.{i}.bias"] = bias
        b[f"layers.{i}.bias"] = bias.clone()  # identical: the byte fast path
    pa, pb = os.path.join(folder, "a.pth"), os.path.join(folder, "b.pth")
    torch.save(a, pa)
    torch.save(b, pb)
    return pa, pb




def main() -> None:
    """Build the pair, time both sides, print the ratio and peak memory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100, help="approximate size of each checkpoint")
    parser.add_argument("--dir", help="folder for the two files (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        t0 = time.perf_counter()
        pa, pb = make_pair(tmp, args.size_mb)
        size = os.path.getsize(pa) / 2**20
        print(f"two checkpoints of {size:.0f} MiB each, built in {time.perf_counter() - t0:.1f} s")
        warm([pa, pb])
        ours = run_side(OURS, pa, pb)
        warm([pa, pb])
        ref = run_side(TORCH, pa, pb)
    worst = max(abs(ours["rel"][k] - v) / max(abs(v), 1e-30) for k, v in ref["rel"].items() if v)
    print(f"ckptview diff (streamed): {ours['seconds']:.2f} s, peak RSS {ours['maxrss_kb'] / 1024:.0f} MiB "
          f"({ours['summary']})")
    print(f"torch.load both + figures: {ref['seconds']:.2f} s ({ref['import_s']:.2f} s of it importing torch), "
          f"peak RSS {ref['maxrss_kb'] / 1024:.0f} MiB")
    print(f"time ratio ckptview / torch: {ours['seconds'] / ref['seconds']:.2f}x (goal <= 1.2x); without "
          f"torch's import {ours['seconds'] / (ref['seconds'] - ref['import_s']):.2f}x; "
          f"peak {ours['maxrss_kb'] / 1024:.0f} MiB (goal < 300 MiB)")
    print(f"largest relative disagreement of rel_l2 with torch: {worst:.2e}")


if __name__ == "__main__":
    main()

"""`ckptview series` (streamed) against a plain script that torch.loads a run's checkpoints one by one.

    .venv/bin/python benchmarks/bench_series.py                 # 10 checkpoints of ~100 MB float32
    .venv/bin/python benchmarks/bench_series.py --size-mb 500   # the issue's case (10 x ~500 MB)

Both sides compute the same figures per tensor and checkpoint in float64: L2 norm, mean, std, max |x|,
NaN/Inf counts, update ratio against the previous checkpoint and the fraction of elements changed. The
torch script keeps the previous checkpoint in memory to compare (what such a script does); ckptview
streams both files chunk by chunk. Each side runs in a fresh subprocess and reports its peak resident
memory (VmHWM) and the bytes it read through read(2) (``rchar`` of /proc/self/io), as a multiple of the
run's size. The files are read once before timing so both sides start from a warm page cache.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from common import run_side, warm  # the benchmarks run as scripts from this folder

PRELUDE = r"""
import json, resource, sys, time
def peak_kb():
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
def read_bytes():
    try:
        with open("/proc/self/io") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("rchar"))
    except (OSError, StopIteration):
        return 0
"""

OURS = PRELUDE + r"""
t0 = time.perf_counter()
r0 = read_bytes()
from ckptview.core.analyze.series import run_series
result = run_series([sys.argv[1]])
seconds = time.perf_counter() - t0
norm = {n: s.figure("norm")[-1] for n, s in result.tensors.items()}
ratio = {n: s.update_ratio[-1] for n, s in result.tensors.items()}
print(json.dumps({"seconds": seconds, "maxrss_kb": peak_kb(), "read": read_bytes() - r0,
                  "norm": norm, "ratio": ratio, "findings": len(result.findings)}))
"""

TORCH = PRELUDE + r"""
import os
t0 = time.perf_counter()
r0 = read_bytes()
import torch
imported = time.perf_counter() - t0
paths = sorted((os.path.join(sys.argv[1], n) for n in os.listdir(sys.argv[1])),
               key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))
prev = None
figures = {}
for path in paths:
    sd = torch.load(path, weights_only=True)["model"]
    for name, t in sd.items():
        x = t.double()
        fin = x[torch.isfinite(x)]
        row = {"norm": fin.norm().item(), "mean": fin.mean().item(), "std": fin.std().item(),
               "abs_max": fin.abs().max().item(), "nan": int(torch.isnan(x).sum()), "inf": int(torch.isinf(x).sum())}
        if prev is not None and name in prev:
            p = prev[name].double()
            row["ratio"] = ((x - p).norm() / p.norm()).item()
            row["changed"] = (t != prev[name]).double().mean().item()
        figures[name] = row
    prev = sd
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "import_s": imported, "maxrss_kb": peak_kb(), "read": read_bytes() - r0,
                  "norm": {k: v["norm"] for k, v in figures.items()},
                  "ratio": {k: v.get("ratio") for k, v in figures.items()}}))
"""



def make_run(folder: str, size_mb: int, count: int) -> list[str]:
    """``count`` float32 state dicts of about ``size_mb`` MB, each a small update of the previous one."""
    import torch

    gen = torch.Generator().manual_seed(0)
    layer = 2048 * 2048  # 16 MiB float32 per weight
    layers = max(1, size_mb * 2**20 // (4 * layer))
    state = {}
    for i in range(layers):
        state[f"layers.{i}.weight"] = torch.randn(2048, 2048, generator=gen)
        state[f"layers.{i}.bias"] = torch.randn(2048, generator=gen)
    paths = []
    for step in range(count):
        for i in range(layers):
            if i != 0:  # layers.0 is frozen: a "stalled" finding per run
                state[f"layers.{i}.weight"].add_(torch.randn(2048, 2048, generator=gen), alpha=1e-3)
        path = os.path.join(folder, f"step_{step * 100}.pt")
        torch.save({"model": state, "global_step": step * 100}, path)
        paths.append(path)
    return paths




def main() -> None:
    """Build the run, time both sides, print time, peak memory and bytes read."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100, help="approximate size of each checkpoint")
    parser.add_argument("--count", type=int, default=10, help="number of checkpoints")
    parser.add_argument("--dir", help="folder for the run (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        t0 = time.perf_counter()
        paths = make_run(tmp, args.size_mb, args.count)
        total = sum(os.path.getsize(p) for p in paths)
        print(f"{len(paths)} checkpoints of {total / len(paths) / 2**20:.0f} MiB each "
              f"({total / 2**30:.2f} GiB), built in {time.perf_counter() - t0:.1f} s")
        warm(paths)
        ours = run_side(OURS, tmp)
        warm(paths)
        ref = run_side(TORCH, tmp)
    ours_model = {k.removeprefix("model."): v for k, v in ours["norm"].items() if k.startswith("model.")}
    worst_norm = max(abs(ours_model[k] - v) / abs(v) for k, v in ref["norm"].items() if v)
    ours_ratio = {k.removeprefix("model."): v for k, v in ours["ratio"].items() if k.startswith("model.")}
    worst_ratio = max(abs(ours_ratio[k] - v) / abs(v) for k, v in ref["ratio"].items() if v)
    print(f"ckptview series (streamed): {ours['seconds']:.2f} s, peak RSS {ours['maxrss_kb'] / 1024:.0f} MiB, "
          f"read {ours['read'] / total:.2f}x the run's bytes, {ours['findings']} findings")
    print(f"torch.load one by one + figures: {ref['seconds']:.2f} s ({ref['import_s']:.2f} s of it importing "
          f"torch), peak RSS {ref['maxrss_kb'] / 1024:.0f} MiB, read {ref['read'] / total:.2f}x")
    print(f"time ratio ckptview / torch: {ours['seconds'] / ref['seconds']:.2f}x; peak memory ratio "
          f"{ours['maxrss_kb'] / ref['maxrss_kb']:.2f}x")
    print(f"largest relative disagreement with torch: norm {worst_norm:.2e}, update ratio {worst_ratio:.2e}")


if __name__ == "__main__":
    main()

"""Benchmark: list a DCP folder (time, peak memory) against torch loading it, each in a fresh process.

    python benchmarks/bench_dcp.py                 # modest: 64 MB over 8 files
    python benchmarks/bench_dcp.py --size-mb 1024  # the issue's >= 1 GB across 8 shards

The folder is written by one process with `FileSystemWriter(thread_count=8)`, which spreads the
records over 8 `.distcp` files as 8 writers would (each tensor is one chunk record; multi-rank chunking
is covered by tests/core/read/formats/test_dcp.py). Every measurement runs in a fresh process started from this small
one (Linux keeps ru_maxrss across exec, so the parent must not have loaded torch or the data).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

LIST = """
import json, resource, sys, time
t0 = time.perf_counter()
from ckptview.core.read.open import open_checkpoint
from ckptview.commands.info import info_dict
ckpt = open_checkpoint(sys.argv[1])
data = info_dict(ckpt)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "tensors": len(data["tensors"]),
                  "shards": sum(len(t.get("shards", [])) for t in data["tensors"]),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

STREAM = """
import json, resource, sys, time
import numpy as np
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks
ckpt = open_checkpoint(sys.argv[1])
info = max((e.info for e in ckpt.tensors()), key=lambda i: i.nbytes)
t0 = time.perf_counter()
total = 0.0
for chunk in iter_chunks(info, 1 << 20):
    total += float(np.asarray(chunk, dtype=np.float64).sum())
print(json.dumps({"seconds": time.perf_counter() - t0, "nbytes": info.nbytes,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

TORCH = """
import json, resource, sys, time, warnings
warnings.simplefilter("ignore")
t0 = time.perf_counter()
import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
sd = {}
_load_state_dict(sd, storage_reader=FileSystemReader(sys.argv[1]), planner=_EmptyStateDictLoadPlanner(),
                 no_dist=True)
print(json.dumps({"seconds": time.perf_counter() - t0, "tensors": len(sd),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


WRITE = """
import sys, warnings
import torch
import torch.distributed.checkpoint as dcp
folder, size_mb, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
layers = 32
per_layer = size_mb * (1 << 20) // (4 * layers)
cols = 1024
rows = max(1, per_layer // cols)
state = {"model": {f"layers.{i}.weight": torch.randn(rows, cols) for i in range(layers)},
         "optim": {"param_groups": [{"lr": 1e-3, "betas": (0.9, 0.95), "params": list(range(layers))}]},
         "step": 1000}
warnings.simplefilter("ignore")
dcp.save(state, storage_writer=dcp.FileSystemWriter(folder, thread_count=files))
"""


def run(script: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=64)
    parser.add_argument("--folder", help="use this DCP folder instead of writing one")
    parser.add_argument("--skip-torch", action="store_true", help="do not time torch's full load")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or os.path.join(tmp, "dcp")
        if not args.folder:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", WRITE, folder, str(args.size_mb), "8"], check=True)
            print(f"wrote {folder} in {time.perf_counter() - t0:.1f} s")
        files = sorted(f for f in os.listdir(folder) if f.endswith(".distcp"))
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in files)
        print(f"{len(files)} .distcp files, {size / 2**20:.0f} MB, .metadata "
              f"{os.path.getsize(os.path.join(folder, '.metadata')) / 1024:.1f} KB")
        ours = run(LIST, folder)
        print(f"ckptview list:   {ours['seconds']:.2f} s, peak {ours['peak_mb']:.0f} MB, "
              f"{ours['tensors']} tensors, {ours['shards']} chunk records")
        stream = run(STREAM, folder)
        print(f"ckptview stream of the largest tensor ({stream['nbytes'] / 2**20:.0f} MB): "
              f"{stream['seconds']:.2f} s, peak {stream['peak_mb']:.0f} MB")
        if not args.skip_torch:
            theirs = run(TORCH, folder)
            print(f"torch DCP load:  {theirs['seconds']:.2f} s, peak {theirs['peak_mb']:.0f} MB")
            print(f"ratio: {theirs['seconds'] / max(ours['seconds'], 1e-9):.1f}x faster, "
                  f"{theirs['peak_mb'] / max(ours['peak_mb'], 1e-9):.1f}x less memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`ckptview diff` (streamed) against a plain script that torch.loads both files and computes the same figures.

    .venv/bin/python benchmarks/bench_diff.py                  # two ~100 MB float32 checkpoints
    .venv/bin/python benchmarks/bench_diff.py --size-mb 500    # the issue's case (two ~500 MB files)
    .venv/bin/python benchmarks/bench_diff.py --gpt2           # `ckptview diff --json` of a GPT-2 pair

`--gpt2` builds (once, under benchmarks/_data/) two GPT-2 small state dicts (124M parameters, ~500 MB of
fp32 each, lm_head tied to wte as saved by torch): A a seeded random init, B = A plus small noise on most
parameters. It then times the command `ckptview diff A B --json` against the torch script (`TORCH`, the
same figures per tensor in float64), alternating, 3 rounds: medians of wall and CPU time (user + sys),
each side's peak memory (the child's own, from wait4) and the load average before and after.
Goal (issue 38): ckptview's wall time <= 0.25x the torch script's.

Each side runs in a fresh subprocess and reports its peak resident memory, interpreter and imports
included: VmHWM of /proc/self/status, because ru_maxrss of a child inherits the high-water mark of the
parent at fork (which holds torch and the tensors it built). The files are read once before timing so both sides start from a warm page cache.
Goal: ckptview's peak under 300 MB and its time no worse than 1.2x the torch script's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import DATA, run_side, warm  # the benchmarks run as scripts from this folder

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
def load(path):
    if path.endswith(".safetensors"):  # --gpt2 --safetensors: torch.load cannot read them
        from safetensors.torch import load_file
        return load_file(path)
    return torch.load(path, weights_only=True)
a, b = load(sys.argv[1]), load(sys.argv[2])
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



# Built in a child process, so this one never holds torch (nor its memory) while it times the two sides.
MAKE_GPT2 = r"""
import os, sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
folder, safetensors = sys.argv[1], sys.argv[2] == "1"
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config())
torch.save(model.state_dict(), os.path.join(folder, "gpt2_a.pt"))  # lm_head.weight shares wte's storage
if safetensors:
    model.save_pretrained(os.path.join(folder, "gpt2_a"), safe_serialization=True)
gen = torch.Generator().manual_seed(1)
with torch.no_grad():
    for i, (name, p) in enumerate(model.named_parameters()):
        if i % 7 != 3:  # most tensors move a little; every seventh stays identical (the byte fast path)
            p.add_(1e-3 * torch.randn(p.shape, generator=gen))
torch.save(model.state_dict(), os.path.join(folder, "gpt2_b.pt"))
if safetensors:
    model.save_pretrained(os.path.join(folder, "gpt2_b"), safe_serialization=True)
"""


def gpt2_pair(safetensors: bool = False) -> tuple[str, str]:
    """The GPT-2 pair under benchmarks/_data/ (built the first time: about 20 s); .pt files or safetensors."""
    os.makedirs(DATA, exist_ok=True)
    pa, pb = (os.path.join(DATA, name) for name in (("gpt2_a", "gpt2_b") if safetensors
                                                     else ("gpt2_a.pt", "gpt2_b.pt")))
    if not (os.path.exists(pa) and os.path.exists(pb)):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", MAKE_GPT2, DATA, "1" if safetensors else "0"], check=True)
        print(f"built the GPT-2 pair in {time.perf_counter() - t0:.0f} s", flush=True)
    if safetensors:
        pa, pb = (os.path.join(p, "model.safetensors") for p in (pa, pb))
    return pa, pb


def run_timed(cmd: list[str]) -> dict:
    """Wall and CPU seconds and the peak RSS of one run of `cmd` (its own, from wait4), its stdout kept."""
    # As installed, Python caches bytecode; PYTHONDONTWRITEBYTECODE would time compiling every module.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024,
            "rc": proc.returncode, "stdout": out}


def bench_gpt2(rounds: int, safetensors: bool) -> None:
    """`ckptview diff A B --json` of the GPT-2 pair against the torch script, alternating, medians."""
    pa, pb = gpt2_pair(safetensors)
    print(f"GPT-2 pair: {os.path.getsize(pa) / 2**20:.0f} MiB each ({os.path.basename(pa)})")
    load_before = os.getloadavg()
    warm([pa, pb])
    sides: dict[str, list[dict]] = {"ckptview": [], "torch": []}
    ours_cmd = [sys.executable, "-m", "ckptview", "diff", pa, pb, "--json"]
    torch_cmd = [sys.executable, "-c", TORCH, pa, pb]
    for _ in range(rounds):
        for name, cmd in (("ckptview", ours_cmd), ("torch", torch_cmd)):
            got = run_timed(cmd)
            if got["rc"] not in (0, 1):  # diff exits 1 when the checkpoints differ
                raise RuntimeError(f"{name} failed with status {got['rc']}")
            sides[name].append(got)
    load_after = os.getloadavg()
    ours_rel = {t["name"]: t["rel_l2"] for t in json.loads(sides["ckptview"][0]["stdout"])["tensors"]}
    ref_rel = json.loads(sides["torch"][0]["stdout"].decode().strip().splitlines()[-1])["rel"]
    worst = max((abs(ours_rel[k] - v) / max(abs(v), 1e-30) for k, v in ref_rel.items()
                 if v and ours_rel.get(k) is not None), default=0.0)
    med = {name: {key: statistics.median(r[key] for r in runs) for key in ("wall", "cpu", "peak_mb")}
           for name, runs in sides.items()}
    for name, m in med.items():
        walls = ", ".join(f"{r['wall']:.2f}" for r in sides[name])
        print(f"{name:9}: wall {m['wall']:.2f} s (runs {walls}), CPU {m['cpu']:.2f} s (user + sys), "
              f"peak RSS {m['peak_mb']:.0f} MiB")
    print(f"ratio ckptview / torch: wall {med['ckptview']['wall'] / med['torch']['wall']:.3f}x (goal <= 0.25x), "
          f"CPU {med['ckptview']['cpu'] / med['torch']['cpu']:.3f}x")
    print(f"largest relative disagreement of rel_l2 with torch: {worst:.2e}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load_before)}; "
          f"after: {' '.join(f'{x:.2f}' for x in load_after)}")


def main() -> None:
    """Build the pair, time both sides, print the ratio and peak memory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100, help="approximate size of each checkpoint")
    parser.add_argument("--dir", help="folder for the two files (default: a temporary folder)")
    parser.add_argument("--gpt2", action="store_true", help="the GPT-2 small pair, ckptview diff --json vs torch")
    parser.add_argument("--safetensors", action="store_true", help="with --gpt2: the pair as safetensors")
    parser.add_argument("--rounds", type=int, default=3, help="with --gpt2: alternating rounds (medians)")
    args = parser.parse_args()
    if args.gpt2:
        bench_gpt2(args.rounds, args.safetensors)
        return
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

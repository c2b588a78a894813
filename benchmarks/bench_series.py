"""`ckptview series --json` (first read, then reopened with its cache) against a plain torch script.

    .venv/bin/python benchmarks/bench_series.py                  # the issue's run: 6 x 48 MiB (12 x 1024^2 f32)
    .venv/bin/python benchmarks/bench_series.py --workers 2      # ckptview on a pool of 2
    .venv/bin/python benchmarks/bench_series.py --size-mb 500    # bigger checkpoints

Both sides compute the same figures per tensor and checkpoint in float64: L2 norm, mean, std, max |x|,
NaN/Inf counts, update ratio against the previous checkpoint and the fraction of elements changed. The
torch script keeps the previous checkpoint in memory to compare (what such a script does); ckptview
reads each checkpoint's bytes once, piece by piece, in its own process unless the run is large enough
for a pool (executor.choose_workers; --workers N forces N), and keeps the figures in its cache (a fresh
XDG_CACHE_HOME per round: each first read is cold, the reopen finds everything). Both are timed as the
command a person runs: a fresh interpreter, start-up and imports included, wall clock and CPU (user+sys
of the process and its children). The sides alternate for --rounds rounds and the medians are compared;
the load average before and after says how busy the machine was. The files are read once before each
timing so every side starts from a warm page cache. Goals (issue 38): first read <= 0.33x the torch
script's time; reopen under 0.1x of the first read.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from common import warm  # the benchmarks run as scripts from this folder

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
    """``count`` state dicts of 1024x1024 float32 matrices (``size_mb`` MiB each), each a small update."""
    import torch

    gen = torch.Generator().manual_seed(0)
    layers = max(1, size_mb // 4)  # 4 MiB per matrix: 24 matrices for 96 MiB
    state = {f"layers.{i}.weight": torch.randn(1024, 1024, generator=gen) for i in range(layers)}
    paths = []
    for step in range(count):
        for i in range(1, layers):  # layers.0 is frozen: a "stalled" finding per run
            state[f"layers.{i}.weight"].add_(torch.randn(1024, 1024, generator=gen), alpha=1e-3)
        path = os.path.join(folder, f"step_{step * 100}.pt")
        torch.save({"model": state, "global_step": step * 100}, path)
        paths.append(path)
    return paths


# Runs a command and reports the largest resident set of it and its workers. A small interpreter of its
# own: a child forked from this script (torch imported, a run built) would count this script's pages.
WRAP = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "print(f'largest_kb {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str, str]:
    """(wall seconds, CPU seconds of it and its children, stdout, stderr) of ``cmd``."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, _children_cpu() - cpu0, out.stdout, out.stderr


def run_ckptview(folder: str, cache_home: str, workers: int | None) -> dict:
    """`ckptview series FOLDER --json` in a fresh interpreter: wall and CPU time, the figures it printed."""
    cmd = [sys.executable, "-m", "ckptview", "series", folder, "--json"]
    if workers:
        cmd += ["--workers", str(workers)]
    env = dict(os.environ, XDG_CACHE_HOME=cache_home)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached, not compiled at every start
    seconds, cpu, stdout, stderr = _timed([sys.executable, "-c", WRAP, *cmd], env)
    result = json.loads(stdout)
    largest_kb = int(stderr.strip().splitlines()[-1].split()[-1])
    return {"seconds": seconds, "cpu": cpu, "largest_kb": largest_kb,
            "norm": {t["name"]: t["norm"][-1] for t in result["tensors"]},
            "ratio": {t["name"]: t["update_ratio"][-1] for t in result["tensors"]},
            "findings": len(result["findings"])}


def run_torch(folder: str) -> dict:
    """The torch script in a fresh interpreter: wall and CPU time, and what it reported of itself."""
    seconds, cpu, stdout, _ = _timed([sys.executable, "-c", TORCH, folder])
    inner = json.loads(stdout.strip().splitlines()[-1])
    return dict(inner, inner_seconds=inner["seconds"], seconds=seconds, cpu=cpu)


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    """Build the run, time the sides in alternation, print medians, the ratio and the machine's load."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=48, help="size of each checkpoint (4 MiB matrices)")
    parser.add_argument("--count", type=int, default=6, help="number of checkpoints")
    parser.add_argument("--workers", type=int, default=None,
                        help="ckptview's local workers (default: chosen by the run's size)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of both sides (medians)")
    parser.add_argument("--dir", help="folder for the run (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        run = os.path.join(tmp, "run")
        os.makedirs(run)
        t0 = time.perf_counter()
        paths = make_run(run, args.size_mb, args.count)
        total = sum(os.path.getsize(p) for p in paths)
        print(f"{len(paths)} checkpoints of {total / len(paths) / 2**20:.0f} MiB each "
              f"({total / 2**30:.2f} GiB), built in {time.perf_counter() - t0:.1f} s; {os.cpu_count()} cores")
        load_before = os.getloadavg()
        firsts, agains, refs = [], [], []
        for k in range(max(1, args.rounds)):
            cache_home = os.path.join(tmp, f"cache{k}")
            warm(paths)
            firsts.append(run_ckptview(run, cache_home, args.workers))
            warm(paths)
            agains.append(run_ckptview(run, cache_home, args.workers))
            warm(paths)
            refs.append(run_torch(run))
        load_after = os.getloadavg()
    first, ref = firsts[0], refs[0]
    assert all(a["norm"] == f["norm"] and a["ratio"] == f["ratio"] for a, f in zip(agains, firsts, strict=True)), \
        "the cache changed a figure"
    ours_model = {k.removeprefix("model."): v for k, v in first["norm"].items() if k.startswith("model.")}
    worst_norm = max(abs(ours_model[k] - v) / abs(v) for k, v in ref["norm"].items() if v)
    ours_ratio = {k.removeprefix("model."): v for k, v in first["ratio"].items() if k.startswith("model.")}
    worst_ratio = max(abs(ours_ratio[k] - v) / abs(v) for k, v in ref["ratio"].items() if v)
    f_wall, f_cpu = _median(firsts, "seconds"), _median(firsts, "cpu")
    a_wall, a_cpu = _median(agains, "seconds"), _median(agains, "cpu")
    r_wall, r_cpu = _median(refs, "seconds"), _median(refs, "cpu")
    rounds = len(firsts)
    print(f"medians of {rounds} alternating rounds (wall, CPU user+sys of the process and its children)")
    print(f"ckptview series --json, first read: {f_wall:.2f} s wall, {f_cpu:.2f} s CPU ({first['findings']} "
          f"findings), largest process {max(f['largest_kb'] for f in firsts) / 1024:.0f} MiB")
    print(f"ckptview series --json, reopened with the cache: {a_wall:.2f} s wall, {a_cpu:.2f} s CPU")
    print(f"torch.load one by one + figures: {r_wall:.2f} s wall, {r_cpu:.2f} s CPU ({_median(refs, 'import_s'):.2f} s "
          f"of it importing torch), peak RSS {max(r['maxrss_kb'] for r in refs) / 1024:.0f} MiB")
    print(f"ckptview / torch script: {f_wall / r_wall:.2f}x wall, {f_cpu / r_cpu:.2f}x CPU (goal <= 0.33x); "
          f"reopen / first read: {a_wall / f_wall:.3f}x (goal < 0.1x)")
    print(f"load average before {', '.join(f'{x:.2f}' for x in load_before)}; "
          f"after {', '.join(f'{x:.2f}' for x in load_after)} (1, 5, 15 min; {os.cpu_count()} cores)")
    print(f"largest relative disagreement with torch: norm {worst_norm:.2e}, update ratio {worst_ratio:.2e}")


if __name__ == "__main__":
    main()

"""Issue 38's table in one run: each row ckptview against what a user would do instead, as a paired ratio.

    .venv/bin/python benchmarks/bench_floor.py                  # every row, medians of 3 paired rounds
    .venv/bin/python benchmarks/bench_floor.py --only series diff --repeat 5

Rows (each side in a fresh process, the two alternating round by round; the files are built once under
benchmarks/_data/ and read before timing, so both sides start from a warm page cache):

- series: `ckptview series RUN --json --no-cache` of 6 checkpoints of 48 MiB against a torch script
  (torch.load each, float64 figures per tensor: norm, mean, std, max |x|, NaN/Inf, update ratio).
- diff: `ckptview diff A B --json` of two GPT-2 small state dicts (124M parameters, ~500 MB each) against
  torch.load of both and float64 figures per tensor.
- info: `ckptview info FILE --json` of a file of 100,000 tensors against torch.load + listing its keys, with
  the floor of any listing through CPython's C unpickler in the same rounds (bench_scale.FLOOR_UNPICKLE).
- window: the window's launch to a usable tree of that file (benchmarks/launch_timing.py) against
  `torch.load` of the same file.

The load average is printed before and after: figures are only worth quoting on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench_scale import DIFF_WITH_TORCH, FLOOR_UNPICKLE, LAUNCH_TIMING, LIST_WITH_TORCH, many_keys, run_once
from bench_series import TORCH as SERIES_WITH_TORCH
from bench_series import make_run
from common import DATA, warm

TORCH_LOAD = "import sys, torch\ntorch.load(sys.argv[1], weights_only=True, map_location='cpu')\n"

GOALS = {"series": 0.33, "diff": 0.25, "info": 1 / 12, "window": 0.15}


def gpt2_pair() -> tuple[str, str]:
    """Two GPT-2 small state dicts (transformers' own model, random weights, seed 0): the second has 6 of
    every 7 parameters moved by 1e-3 noise. Built once."""
    a, b = os.path.join(DATA, "gpt2_a.pt"), os.path.join(DATA, "gpt2_b.pt")
    if os.path.exists(a) and os.path.exists(b):
        return a, b
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config())
    torch.save(model.state_dict(), a + ".part")
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for i, (_, p) in enumerate(model.named_parameters()):
            if i % 7 != 3:
                p.add_(1e-3 * torch.randn(p.shape, generator=gen))
    torch.save(model.state_dict(), b + ".part")
    os.replace(a + ".part", a)
    os.replace(b + ".part", b)
    return a, b


def series_run() -> str:
    folder = os.path.join(DATA, "series_6x48")
    if not os.path.isdir(folder):
        os.makedirs(folder + ".part", exist_ok=True)
        make_run(folder + ".part", 48, 6)
        os.replace(folder + ".part", folder)
    return folder


def ckptview(*args: str) -> list[str]:
    return [sys.executable, "-m", "ckptview", *args]


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def launch_seconds(path: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, LAUNCH_TIMING, path], capture_output=True, text=True, timeout=900,
                         env=env, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {"seconds": result["seconds"], "peak_mb": float("nan"), "phases": result}


def paired(ours: object, theirs: list[str], repeat: int) -> tuple[list[dict], list[dict]]:
    """`repeat` rounds, ours then theirs in each; `ours` a command or a function returning run_once's dict."""
    mine, ref = [], []
    for _ in range(repeat):
        mine.append(ours() if callable(ours) else run_once(ours))  # type: ignore[arg-type]
        ref.append(run_once(theirs))
    return mine, ref


def report(label: str, key: str, mine: list[dict], ref: list[dict]) -> dict:
    ours_s = statistics.median(r["seconds"] for r in mine)
    ref_s = statistics.median(r["seconds"] for r in ref)
    ratios = sorted(m["seconds"] / r["seconds"] for m, r in zip(mine, ref, strict=True))
    ratio = ours_s / ref_s
    peak = statistics.median(r["peak_mb"] for r in mine)
    met = "met" if ratio <= GOALS[key] else "NOT met"
    print(f"{label:<40} ckptview {ours_s:6.2f} s {peak:6.0f} MiB | alternative {ref_s:6.2f} s "
          f"{statistics.median(r['peak_mb'] for r in ref):6.0f} MiB | ratio {ratio:.3f}x "
          f"(rounds {ratios[0]:.3f}-{ratios[-1]:.3f}; {1 / ratio:.1f}x faster) goal <= {GOALS[key]:.3f}x: {met}",
          flush=True)
    return {"row": key, "ours_s": ours_s, "alternative_s": ref_s, "ratio": ratio, "peak_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="paired rounds per row (medians)")
    parser.add_argument("--only", nargs="*", default=None, help="rows: series diff info window")
    args = parser.parse_args()
    rows = args.only or ["series", "diff", "info", "window"]
    os.makedirs(DATA, exist_ok=True)
    t0 = time.perf_counter()
    inputs = {}
    if "series" in rows:
        inputs["series"] = series_run()
    if "diff" in rows:
        inputs["diff"] = gpt2_pair()
    if {"info", "window"} & set(rows):
        inputs["keys"] = many_keys(100_000)
    print(f"inputs ready in {time.perf_counter() - t0:.0f} s; {os.cpu_count()} CPUs; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; medians of {args.repeat} paired rounds", flush=True)
    results = []
    if "series" in rows:
        run = inputs["series"]
        warm([os.path.join(run, n) for n in os.listdir(run)])
        mine, ref = paired(ckptview("series", run, "--json", "--no-cache"), python(SERIES_WITH_TORCH, run),
                           args.repeat)
        results.append(report("series first read, 6 x 48 MiB", "series", mine, ref))
    if "diff" in rows:
        a, b = inputs["diff"]
        warm([a, b])
        mine, ref = paired(ckptview("diff", a, b, "--json"), python(DIFF_WITH_TORCH, a, b), args.repeat)
        results.append(report("diff of a GPT-2 small pair", "diff", mine, ref))
    if "info" in rows:
        keys = inputs["keys"]
        floor: list[dict] = []

        def ours_then_floor() -> dict:  # the C-unpickler floor in the same rounds: ours, floor, torch
            mine = run_once(ckptview("info", keys, "--json"))
            floor.append(run_once(python(FLOOR_UNPICKLE, keys)))
            return mine

        mine, ref = paired(ours_then_floor, python(LIST_WITH_TORCH, keys), args.repeat)
        results.append(report("info --json, 100,000 tensors", "info", mine, ref))
        floor_s = statistics.median(r["seconds"] for r in floor)
        results[-1]["floor_s"] = floor_s
        print(f"{'':<40} peak {results[-1]['peak_mb']:.0f} MiB, goal < 150 MiB; the C-unpickler floor (zip "
              f"directory + data.pkl through inert stubs, no checks, no output) {floor_s:.2f} s "
              f"{statistics.median(r['peak_mb'] for r in floor):.0f} MiB: ckptview at "
              f"{results[-1]['ours_s'] / floor_s:.2f}x the floor, the floor at "
              f"{results[-1]['alternative_s'] / floor_s:.1f}x faster than torch", flush=True)
    if "window" in rows:
        keys = inputs["keys"]
        mine, ref = paired(lambda: launch_seconds(keys), python(TORCH_LOAD, keys), args.repeat)
        results.append(report("window launch to a usable tree, 100,000", "window", mine, ref))
        phases = [m["phases"] for m in mine]
        split = ", ".join(f"{k.removesuffix('_seconds')} {statistics.median(p[k] for p in phases):.2f}"
                          for k in ("startup_seconds", "read_seconds", "prepare_seconds", "build_seconds")
                          if all(k in p for p in phases))
        print(f"{'':<40} phases: {split}", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{time.perf_counter() - t0:.0f} s in all", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()

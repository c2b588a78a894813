"""Benchmark: listing costs what the metadata costs (issue 46's last rows), paired in one run.

    python benchmarks/bench_listing_cost.py                  # both rows, 3 rounds
    python benchmarks/bench_listing_cost.py --only trainer --before 245b0df

1. An HF Trainer step folder (a BERT written by transformers' `save_pretrained`, its AdamW state by
   `torch.save`): `ckptview info FOLDER/optimizer.pt` and `ckptview info FOLDER` against `ckptview info
   FOLDER/model.safetensors`, with the parameter order already in the user's cache (every run after the
   first) and with an empty cache (the first run: the command line waits for the model's order once).
   `--before REF`: the same command at a git revision (which built the model on every run).
2. A safetensors header of 900,000 tensors: ckptview's listing against `safetensors.safe_open` listing the
   same names, shapes and dtypes, in-process CPU time of the listing and of the whole process.

Every command runs in a fresh process, the pair alternating; medians; peak RSS of the process and its
children; the load average printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
DATA = os.path.join(HERE, "_data")

BERT = """
import json, sys, torch, transformers
folder = sys.argv[1]
config = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                                 intermediate_size=256, max_position_embeddings=128, num_labels=3)
torch.manual_seed(0)
model = transformers.BertForSequenceClassification(config)
model.save_pretrained(folder)
named = list(model.named_parameters())
opt = torch.optim.AdamW([{"params": [p for n, p in named if "bias" not in n and "LayerNorm" not in n]},
                         {"params": [p for n, p in named if "bias" in n or "LayerNorm" in n], "weight_decay": 0.0}])
for p in model.parameters():
    p.grad = torch.randn_like(p)
opt.step()
torch.save(opt.state_dict(), folder + "/optimizer.pt")
json.dump({"global_step": 2}, open(folder + "/trainer_state.json", "w"))
"""
CKPT_LIST = """
import sys, time, json
from ckptview.core.gc_policy import keep_out_of_collections
from ckptview.core.read.open import open_checkpoint
t0 = time.process_time()
ck = open_checkpoint(sys.argv[1])
keep_out_of_collections()  # what the window and the commands do with a tree they keep (core/gc_policy.py)
rows = [(e.name, e.info.shape, e.info.dtype) for e in ck.tensors()]
print(json.dumps({"cpu": time.process_time() - t0, "n": len(rows)}))
"""
SAFE_LIST = """
import sys, time, json
from safetensors import safe_open
t0 = time.process_time()
with safe_open(sys.argv[1], "np") as f:
    rows = []
    for k in f.keys():
        s = f.get_slice(k)
        rows.append((k, s.get_shape(), s.get_dtype()))
print(json.dumps({"cpu": time.process_time() - t0, "n": len(rows)}))
"""


def trainer_folder() -> str:
    folder = os.path.join(DATA, "trainer", "checkpoint-2")
    if not os.path.exists(os.path.join(folder, "optimizer.pt")):
        os.makedirs(folder, exist_ok=True)
        subprocess.run([sys.executable, "-c", BERT, folder], check=True)
    return folder


def header_file(n: int = 900_000) -> str:
    """A safetensors file of `n` one-element tensors whose header the safetensors library still reads (< 100 MB)."""
    path = os.path.join(DATA, f"header_{n // 1000}k_lib.safetensors")
    if not os.path.exists(path):
        header = {"__metadata__": {"format": "pt"}}
        for i in range(n):
            header[f"model.layers.{i // 64}.experts.{i % 64}.w"] = {"dtype": "F32", "shape": [1],
                                                                   "data_offsets": [4 * i, 4 * i + 4]}
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(path + ".tmp", "wb") as fh:
            fh.write(len(raw).to_bytes(8, "little") + raw + bytes(4 * n))
        os.replace(path + ".tmp", path)
    return path


# Runs a command and prints the peak RSS of it and its children (their own rusage: this process's own
# RUSAGE_CHILDREN keeps the largest child it ever waited for).
PEAK = ("import resource, subprocess, sys\n"
        "code = subprocess.run(sys.argv[1:]).returncode\n"
        "sys.stderr.write('\\npeak %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(code)")


def run(cmd: list[str], env: dict[str, str]) -> dict:
    """One fresh process: wall, CPU and peak RSS (MiB) of it and its children, and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", PEAK, *cmd], capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{out.stderr[-2000:]}")
    peak = int(out.stderr.strip().splitlines()[-1].split()[-1])
    result = {"s": wall, "cpu": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
              "mb": peak / 1024}
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if last.startswith('{"cpu": '):  # what CKPT_LIST and SAFE_LIST print
        result["inner"] = json.loads(last)
    return result


def env_with(src: str, cache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPTVIEW_")}
    env.update(PYTHONPATH=src, XDG_CACHE_HOME=cache)
    return env


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def trainer_rows(rounds: int, before_src: str | None) -> None:
    folder = trainer_folder()
    src = os.path.join(ROOT, "src")
    warm = tempfile.mkdtemp(prefix="bench-cache-")
    info = [sys.executable, "-m", "ckptview", "info", "--json"]
    run(info + [folder], env_with(src, warm))  # learns the order into the warm cache
    cases = {"info model.safetensors": (info + [os.path.join(folder, "model.safetensors")], src, warm),
             "info optimizer.pt (order cached)": (info + [os.path.join(folder, "optimizer.pt")], src, warm),
             "info FOLDER (order cached)": (info + [folder], src, warm),
             "info optimizer.pt (empty cache: learns once)": (info + [os.path.join(folder, "optimizer.pt")], src,
                                                             None)}
    if before_src is not None:
        cases["info optimizer.pt at the --before revision"] = (info + [os.path.join(folder, "optimizer.pt")],
                                                             before_src, warm)
    results: dict[str, list[dict]] = {k: [] for k in cases}
    for _ in range(rounds):
        for label, (cmd, code, cache) in cases.items():
            fresh = cache or tempfile.mkdtemp(prefix="bench-cold-")
            try:
                results[label].append(run(cmd, env_with(code, fresh)))
            finally:
                if cache is None:
                    shutil.rmtree(fresh, ignore_errors=True)
    base = med(results["info model.safetensors"], "s")
    size = os.path.getsize(os.path.join(folder, "optimizer.pt"))
    print(f"\nTrainer folder of a BERT ({os.path.getsize(os.path.join(folder, 'model.safetensors')) / 1e6:.1f} MB "
          f"model.safetensors, {size / 1e6:.1f} MB optimizer.pt):\n")
    print("| command | wall | CPU | peak RSS (with children) | vs model.safetensors |")
    print("|---|---|---|---|---|")
    for label, runs in results.items():
        print(f"| `{label}` | {med(runs, 's'):.2f} s | {med(runs, 'cpu'):.2f} s | {med(runs, 'mb'):.0f} MiB | "
              f"{med(runs, 's') / base:.2f}x |", flush=True)
    print("\ntarget: info of the folder within 1.5x of info of its model.safetensors")
    shutil.rmtree(warm, ignore_errors=True)


def header_rows(rounds: int) -> None:
    path = header_file()
    src = os.path.join(ROOT, "src")
    env = env_with(src, tempfile.gettempdir())
    cases = {"ckptview open_checkpoint + names, shapes, dtypes": [sys.executable, "-c", CKPT_LIST, path],
             "ckptview info --json (whole command)": [sys.executable, "-m", "ckptview", "info", "--json", path],
             "safetensors safe_open + keys, get_slice shapes, dtypes": [sys.executable, "-c", SAFE_LIST, path]}
    results: dict[str, list[dict]] = {k: [] for k in cases}
    for _ in range(rounds):
        for label, cmd in cases.items():
            results[label].append(run(cmd, env))
    safe = results["safetensors safe_open + keys, get_slice shapes, dtypes"]
    safe_cpu, safe_inner = med(safe, "cpu"), statistics.median(r["inner"]["cpu"] for r in safe)
    print(f"\nA {os.path.getsize(path) / 2**20:.0f} MiB safetensors header of 900,000 tensors (CPU time: the load "
          f"on this shared machine moves wall time):\n")
    print("| listing | listing CPU | process CPU | wall | peak RSS | process CPU vs safe_open |")
    print("|---|---|---|---|---|---|")
    for label, runs in results.items():
        inner = f"{statistics.median(r['inner']['cpu'] for r in runs):.2f} s" if "inner" in runs[0] else "-"
        print(f"| {label} | {inner} | {med(runs, 'cpu'):.2f} s | {med(runs, 's'):.2f} s | {med(runs, 'mb'):.0f} MiB "
              f"| {med(runs, 'cpu') / safe_cpu:.2f}x |", flush=True)
    print(f"\n(safe_open's listing alone: {safe_inner:.2f} s of CPU) target: at most 1x safe_open")


def before_tree(ref: str) -> str:
    target = tempfile.mkdtemp(prefix="bench-before-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", ref, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", target], input=archive.stdout, check=True)
    return os.path.join(target, "src")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["trainer", "header"])
    parser.add_argument("--before", metavar="REF", help="also `info optimizer.pt` at this git revision")
    args = parser.parse_args()
    os.makedirs(DATA, exist_ok=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; "
          f"medians of {args.rounds}", flush=True)
    if args.only in (None, "trainer"):
        trainer_rows(args.rounds, before_tree(args.before) if args.before else None)
    if args.only in (None, "header"):
        header_rows(args.rounds)
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

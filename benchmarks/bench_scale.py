"""Issue 18's table in one run: each row as ckptview against a plain torch script, medians of paired runs.

    .venv/bin/python benchmarks/bench_scale.py                 # every row, 3 paired runs each
    .venv/bin/python benchmarks/bench_scale.py --repeat 5 --only info diff
    .venv/bin/python benchmarks/bench_scale.py --small          # small files, to check the script

Every measured command runs in a fresh process; ckptview and torch alternate (paired runs), so a
machine that gets busier slows both alike. Figures: median wall seconds, median peak RSS of the
process (VmHWM, interpreter and imports included), the ratio ckptview / torch, the target, and the
machine's load average before and after. Files are built once into benchmarks/_data (a few GB).
Nothing is asserted: benchmarks are not tests.
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

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "_data")
LAUNCH_TIMING = os.path.join(HERE, "launch_timing.py")

# Runs a command and reports its wall time and peak RSS (VmHWM of the child, read just before it
# is reaped via wait4's rusage, which is per child: no inherited high-water mark).
_RUN = r"""
import json, os, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.Popen(json.loads(sys.argv[1]), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
_, status, usage = os.wait4(proc.pid, 0)
seconds = time.perf_counter() - t0
err = proc.stderr.read().decode(errors="replace")[-800:]
print(json.dumps({"seconds": seconds, "peak_mb": usage.ru_maxrss / 1024, "rc": os.waitstatus_to_exitcode(status),
                  "stderr": err}))
"""

LIST_WITH_TORCH = r"""
import sys, torch
sd = torch.load(sys.argv[1], weights_only=True, map_location="cpu")
def walk(o, p=""):
    if isinstance(o, dict):
        for k, v in o.items(): walk(v, f"{p}.{k}" if p else str(k))
    elif isinstance(o, torch.Tensor): print(p, tuple(o.shape), o.dtype)
walk(sd)
"""

DIFF_WITH_TORCH = r"""
import sys, torch
a = torch.load(sys.argv[1], weights_only=True)
b = torch.load(sys.argv[2], weights_only=True)
for name, ta in a.items():
    tb = b[name]
    x, y = ta.double(), tb.double()
    d = y - x
    ad = d.abs()
    print(name, ad.max().item(), ad.mean().item(), (d.norm() / x.norm()).item(),
          ((x * y).sum() / (x.norm() * y.norm())).item(), (ta != tb).double().mean().item())
"""

EXPORT_WITH_TORCH = r"""
import sys, numpy as np, torch
sd = torch.load(sys.argv[1], weights_only=True)
np.save(sys.argv[2], next(iter(sd.values())).float().numpy())
"""

# The floor of a listing that goes through CPython's C unpickler: the zip directory and data.pkl read as
# ckptview reads them, then the unpickler with inert stubs (no checks, no tree, no output).
FLOOR_UNPICKLE = r"""
import io, pickle, sys
from ckptview.core.read.formats.torch_zip import ZipArchive
data = ZipArchive(sys.argv[1]).read_small("data.pkl")
def record(*args): return args
class Inert(pickle.Unpickler):
    def find_class(self, module, name): return record
    def persistent_load(self, pid): return pid
Inert(io.BytesIO(data)).load()
"""

# The same, made as durable as ckptview's export (which fsyncs each file before renaming it into place).
EXPORT_WITH_TORCH_FSYNC = EXPORT_WITH_TORCH + r"""
import os
fd = os.open(sys.argv[2], os.O_RDONLY)
os.fsync(fd)
os.close(fd)
"""

HEATMAP_IN_CKPTVIEW = r"""
import sys, time
t0 = time.perf_counter()
from ckptview.core.figures.heatmap import heatmap
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values
ckpt = open_checkpoint(sys.argv[1])
info = ckpt.tensors()[0].info
hm = heatmap(read_values(info))
print(hm.image.shape, time.perf_counter() - t0)
"""


def run_once(cmd: list[str]) -> dict:
    """Wall seconds and peak RSS of `cmd` in a fresh process (raises when it fails; diff exits 1 on a change)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, "-c", _RUN, json.dumps(cmd)], capture_output=True, text=True,
                         check=True, env=env)
    result = json.loads(out.stdout)
    if result["rc"] not in ((0, 1) if "diff" in cmd else (0,)):
        raise RuntimeError(f"{cmd[:3]}... failed: {result['stderr']}")
    return result


def paired(ours: list[str], theirs: list[str] | None, repeat: int, before: object = None) -> dict:
    """Medians over `repeat` alternating runs of both commands; `before()` runs before each (cleanup)."""
    mine, ref = [], []
    for _ in range(repeat):
        if before:
            before()
        mine.append(run_once(ours))
        if theirs is not None:
            if before:
                before()
            ref.append(run_once(theirs))

    def med(runs: list[dict], key: str) -> float | None:
        return statistics.median(r[key] for r in runs) if runs else None

    return {"s": med(mine, "seconds"), "mb": med(mine, "peak_mb"), "torch_s": med(ref, "seconds"),
            "torch_mb": med(ref, "peak_mb")}


def ckptview(*args: str) -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "ckptview")
    return ([script] if os.path.exists(script) else [sys.executable, "-m", "ckptview"]) + list(args)


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


# -- the files ---------------------------------------------------------------------------------------

def _torch_save(path: str, make: object) -> str:
    if not os.path.exists(path):
        import torch

        torch.save(make(), path + ".tmp")
        os.replace(path + ".tmp", path)
    return path


def many_keys(n: int) -> str:
    import torch

    return _torch_save(os.path.join(DATA, f"keys_{n // 1000}k.pt"), lambda: {
        f"encoder.layers.{i // 10}.block.{i % 10}.weight": torch.zeros(4, 4) for i in range(n)})


def diff_pair(size_mb: int) -> tuple[str, str]:
    import torch

    pa, pb = (os.path.join(DATA, f"diff_{size_mb}mb_{s}.pt") for s in "ab")
    if not (os.path.exists(pa) and os.path.exists(pb)):
        gen = torch.Generator().manual_seed(0)
        count = max(1, size_mb * 2**20 // (4 * 2048 * 2048))
        a, b = {}, {}
        for i in range(count):
            w = torch.randn(2048, 2048, generator=gen)
            a[f"layers.{i}.weight"] = w
            b[f"layers.{i}.weight"] = w + 1e-3 * torch.randn(2048, 2048, generator=gen)
            a[f"layers.{i}.bias"] = bias = torch.randn(2048, generator=gen)
            b[f"layers.{i}.bias"] = bias.clone()
        _torch_save(pa, lambda: a)
        _torch_save(pb, lambda: b)
    return pa, pb


def bf16_matrix(size_mb: int) -> str:
    import torch

    rows = size_mb * 2**20 // (2 * 16384)
    return _torch_save(os.path.join(DATA, f"bf16_matrix_{size_mb}mb.pt"), lambda: {
        "embed.weight": torch.randn(rows, 16384, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)})


def bf16_layers(total_mb: int) -> str:
    import torch

    def make() -> dict:
        gen = torch.Generator().manual_seed(0)
        rows = total_mb * 2**20 // 2 // 200 // 1024
        return {f"layers.{i}.weight": torch.randn(rows, 1024, generator=gen).to(torch.bfloat16) for i in range(200)}

    return _torch_save(os.path.join(DATA, f"bf16_{total_mb}mb.pt"), make)


def big_header(n: int) -> str:
    """A safetensors file whose JSON header alone is ~100 MB (`n` tiny tensors with long names)."""
    path = os.path.join(DATA, f"header_{n // 1000}k.safetensors")
    if not os.path.exists(path):
        header = {"__metadata__": {"format": "pt"}}
        for i in range(n):
            name = f"model.layers.{i // 64}.experts.{i % 64}.down_proj.weight"
            header[name] = {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(path + ".tmp", "wb") as fh:
            fh.write(len(raw).to_bytes(8, "little") + raw + bytes(4 * n))
        os.replace(path + ".tmp", path)
    return path


# -- the rows ------------------------------------------------------------------------------------------

def row(label: str, result: dict, target: str) -> None:
    ratio = f"{result['s'] / result['torch_s']:.2f}x torch ({result['torch_s'] / result['s']:.1f}x faster)" \
        if result.get("torch_s") else "-"
    torch_part = f"torch {result['torch_s']:.2f} s / {result['torch_mb']:.0f} MiB" if result.get("torch_s") else ""
    print(f"{label:<44} ckptview {result['s']:.2f} s / {result['mb']:.0f} MiB   {torch_part:<26} {ratio:<34} "
          f"target: {target}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="paired runs per row (medians)")
    parser.add_argument("--small", action="store_true", help="small files: checks the script, not the targets")
    parser.add_argument("--only", nargs="*", default=None,
                        help="rows to run: info floor window diff diffmany export heatmap header listing")
    args = parser.parse_args()
    os.makedirs(DATA, exist_ok=True)
    rows = args.only or ["info", "floor", "window", "diff", "diffmany", "export", "heatmap", "header", "listing"]
    k = 10 if args.small else 1
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; "
          f"medians of {args.repeat} paired runs", flush=True)
    if {"info", "floor", "window", "diffmany"} & set(rows):
        keys = many_keys(100_000 // k)
    if "info" in rows:
        row(f"info --json, {100_000 // k:,} tensors", paired(ckptview("info", keys, "--json"),
                                                           python(LIST_WITH_TORCH, keys), args.repeat),
            ">= 15x torch, < 150 MiB")
    if "floor" in rows:
        row("  floor: zip dir + C unpickler, inert stubs", paired(python(FLOOR_UNPICKLE, keys),
                                                                 python(LIST_WITH_TORCH, keys), args.repeat),
            "(what 15x must stay under)")
    if "window" in rows:
        runs = []
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as run_once: .pyc cached
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, str(LAUNCH_TIMING), keys], capture_output=True,
                                 text=True, timeout=900, env=env)
            if out.returncode == 0:
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))

        def med(key: str) -> float:
            return statistics.median(r[key] for r in runs)

        split = (f" (start-up {med('startup_seconds'):.2f}, read {med('read_seconds'):.2f}, prepare "
                 f"{med('prepare_seconds'):.2f}, build {med('build_seconds'):.2f}; all but the read "
                 f"{med('gui_seconds'):.2f})") if runs and "gui_seconds" in runs[0] else ""
        print(f"{'window launch to tree, same file':<44} "
              + (f"{med('seconds'):.2f} s{split}" if runs else "failed") + "   target: < 1.5 s", flush=True)
    if "diff" in rows:
        pa, pb = diff_pair(500 // k)
        row(f"diff two {os.path.getsize(pa) // 2**20} MB fp32 files",
            paired(ckptview("diff", pa, pb, "--json"), python(DIFF_WITH_TORCH, pa, pb), args.repeat),
            "<= 0.3x torch")
    if "diffmany" in rows:
        row(f"diff, {100_000 // k:,} small tensors each side", paired(
            ckptview("diff", keys, keys, "--json"), python(DIFF_WITH_TORCH, keys, keys), args.repeat), "(not in the table)")
    if "export" in rows:
        src = bf16_matrix(525 // k)
        with tempfile.TemporaryDirectory(dir=DATA) as tmp:
            ours, theirs = os.path.join(tmp, "ours.npy"), os.path.join(tmp, "torch.npy")

            def clean() -> None:
                for p in (ours, theirs):
                    if os.path.exists(p):
                        os.remove(p)

            row(f"export one {os.path.getsize(src) // 2**20} MB bf16 tensor to .npy",
                paired(ckptview("export", src, "--out", ours), python(EXPORT_WITH_TORCH, src, theirs),
                       args.repeat, clean), "<= 0.2x torch")
            row("  the same, torch's file fsynced as ours is",
                paired(ckptview("export", src, "--out", ours), python(EXPORT_WITH_TORCH_FSYNC, src, theirs),
                       args.repeat, clean), "(durable both sides)")
    if "heatmap" in rows:
        src = bf16_matrix(525 // k)
        row(f"heat-map of a {os.path.getsize(src) // 2**20} MB bf16 matrix (open+read+map)",
            paired(python(HEATMAP_IN_CKPTVIEW, src), None, args.repeat), "< 1.5 s")
    if "header" in rows:
        src = big_header(900_000 // k)
        row(f"info --json, {os.path.getsize(src) // 2**20} MB safetensors header",
            paired(ckptview("info", src, "--json"), None, args.repeat), "< 3 s, < 1 GB")
    if "listing" in rows:
        src = bf16_layers(1740 // k)
        row(f"info --json, {os.path.getsize(src) // 2**20} MB bf16 checkpoint",
            paired(ckptview("info", src, "--json"), python(LIST_WITH_TORCH, src), args.repeat),
            "~49x torch, ~15 MiB")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s in all)")

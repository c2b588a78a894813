"""ckptview against plain torch.load: listing checkpoints (time ratio and peak memory).

    python benchmarks/bench.py            # ~500 MB fp32 and ~1.5 GB bf16 checkpoints, 100k-key file
    python benchmarks/bench.py --small    # quick run with 50 MB / 150 MB files

Figures are printed; nothing is asserted (benchmarks are not timed tests).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DATA, measure, python  # noqa: E402

LAUNCH_TIMING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch_timing.py")

LIST_WITH_TORCH = (
    "import sys, torch\n"
    "sd = torch.load(sys.argv[1], weights_only=True, map_location='cpu')\n"
    "def walk(o, p=''):\n"
    "    if isinstance(o, dict):\n"
    "        for k, v in o.items(): walk(v, f'{p}.{k}' if p else str(k))\n"
    "    elif isinstance(o, torch.Tensor): print(p, tuple(o.shape), o.dtype)\n"
    "walk(sd)\n"
)


READ_METADATA_ONLY = (
    "import sys, zipfile\n"
    "with zipfile.ZipFile(sys.argv[1]) as zf:\n"
    "    zf.read(next(n for n in zf.namelist() if n.endswith('/data.pkl')))\n"
)


def make_checkpoint(path: str, total_mb: int, dtype: str, n_tensors: int = 200, embed_share: float = 0.0) -> None:
    """`n_tensors` layers of equal size, plus one embedding holding `embed_share` of the bytes."""
    import torch

    if os.path.exists(path):
        return
    dt = getattr(torch, dtype)
    itemsize = torch.empty(0, dtype=dt).element_size()
    total = total_mb * (1 << 20) // itemsize
    cols = 1024
    g = torch.Generator().manual_seed(0)
    sd = {}
    if embed_share:
        sd["embed.weight"] = torch.randn(int(total * embed_share) // cols, cols, generator=g).to(dt)
    rows = max(int(total * (1 - embed_share)) // n_tensors // cols, 1)
    sd.update({f"layers.{i}.weight": torch.randn(rows, cols, generator=g).to(dt) for i in range(n_tensors)})
    torch.save(sd, path + ".tmp")
    os.replace(path + ".tmp", path)


def make_many_keys(path: str, n: int) -> None:
    import torch

    if os.path.exists(path):
        return
    sd = {f"encoder.layers.{i // 10}.block.{i % 10}.weight": torch.zeros(4, 4) for i in range(n)}
    torch.save(sd, path + ".tmp")
    os.replace(path + ".tmp", path)


def metadata_read_seconds(path: str) -> float:
    """Time to read only the metadata bytes (central directory + data.pkl), the floor for listing."""
    import zipfile

    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        with zipfile.ZipFile(path) as zf:
            name = next(n for n in zf.namelist() if n.endswith("/data.pkl"))
            zf.read(name)
        best = min(best, time.perf_counter() - t0)
    return best


def info_in_process_seconds(path: str) -> float:
    from ckptview.commands.info import info_dict
    from ckptview.core import open_checkpoint

    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        ckpt = open_checkpoint(path)
        info_dict(ckpt)
        ckpt.close()
        best = min(best, time.perf_counter() - t0)
    return best


def report(label: str, path: str) -> None:
    size_mb = os.path.getsize(path) / (1 << 20)
    script = os.path.join(os.path.dirname(sys.executable), "ckptview")  # the installed command
    cmd = [script] if os.path.exists(script) else [sys.executable, "-m", "ckptview"]
    ours = measure([*cmd, "info", path, "--json"])
    theirs = measure(python(LIST_WITH_TORCH) + [path], repeat=2)
    floor = measure(python(READ_METADATA_ONLY) + [path])
    meta = metadata_read_seconds(path)
    inproc = info_in_process_seconds(path)
    print(f"{label}: {size_mb:,.0f} MB on disk")
    print(f"  ckptview info --json : {ours['seconds']:.3f} s, peak {ours['peak_mb']:.0f} MB (whole process)")
    print(f"  torch.load + list    : {theirs['seconds']:.3f} s, peak {theirs['peak_mb']:.0f} MB")
    print(f"  speed-up             : {theirs['seconds'] / ours['seconds']:.1f}x")
    print(f"  read metadata only   : {floor['seconds']:.3f} s as a process "
          f"(ckptview info is {ours['seconds'] / floor['seconds']:.2f}x that)")
    print(f"  in-process listing   : {inproc * 1000:.1f} ms vs reading metadata bytes only "
          f"{meta * 1000:.1f} ms ({inproc / meta:.2f}x)")


def report_window(path: str) -> None:
    """Issue 3's figure: launch of the window to a populated tree (offscreen), in a fresh process."""
    import json
    import subprocess

    out = subprocess.run([sys.executable, str(LAUNCH_TIMING), path], capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        print(f"  window launch -> tree : failed ({out.stderr.strip()[-200:]})")
        return
    data = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"  window launch -> tree : {data['seconds']:.2f} s (opening in the worker {data['open_seconds']:.2f} s, "
          f"{data['tensors']:,} tensors, torch imported: {data['torch_imported']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="small files for a quick run")
    args = parser.parse_args()
    os.makedirs(DATA, exist_ok=True)
    scale = 10 if args.small else 1
    fp32 = os.path.join(DATA, f"fp32_{500 // scale}mb.pt")
    bf16 = os.path.join(DATA, f"bf16_{1500 // scale}mb_embed.pt")  # one 500 MB embedding: the stats bench uses it
    many = os.path.join(DATA, "keys_100k.pt")
    print("building checkpoints (once; kept in benchmarks/_data)...", flush=True)
    make_checkpoint(fp32, 500 // scale, "float32")
    make_checkpoint(bf16, 1500 // scale, "bfloat16", embed_share=1 / 3)
    make_many_keys(many, 100_000)
    print("(page cache warm: files were just written or read)\n")
    report("fp32 checkpoint", fp32)
    report("bf16 checkpoint", bf16)
    report("100,000-key checkpoint", many)
    report_window(many)


if __name__ == "__main__":
    main()

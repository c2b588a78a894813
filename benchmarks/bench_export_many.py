"""Time and peak memory of exporting many tiny tensors (issue 24, finding 22).

    .venv/bin/python benchmarks/bench_export_many.py [--count 200000] [--repeat 1] [--out-dir DIR]

Writes (once, into benchmarks/_data) a safetensors file of COUNT float32 tensors of 4 values each, then
times `ckptview export FILE --out DIR/` (a folder of .npy files) and `--out X.npz` in fresh processes,
and prints seconds, microseconds per tensor, CPU seconds (user and system: what the program costs, less
moved by other processes on a shared machine than the wall time) and peak RSS. The output goes to a temporary folder under
--out-dir (default: benchmarks/_data, the disk a user's export would use; /dev/shm times the program
without the disk). Nothing is asserted: benchmarks are not tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile

from common import DATA, measure


def source(count: int) -> str:
    """A safetensors file of `count` tensors of 4 float32 values (written once)."""
    path = os.path.join(DATA, f"many_{count}.safetensors")
    if os.path.exists(path):
        return path
    os.makedirs(DATA, exist_ok=True)
    header = {f"layers.{i // 8}.block.{i % 8}.weight": {"dtype": "F32", "shape": [4], "data_offsets": [16 * i, 16 * i + 16]}
              for i in range(count)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path + ".tmp", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + bytes(16 * count))
    os.replace(path + ".tmp", path)
    return path


def run(cmd: list[str]) -> dict:
    return measure(cmd, repeat=1, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out-dir", default=DATA)
    parser.add_argument("--formats", default="npy,npz")
    args = parser.parse_args()
    src = source(args.count)
    print(f"{args.count:,} tensors of 4 float32 values; output under {args.out_dir}")
    for fmt in args.formats.split(","):
        for _ in range(args.repeat):
            work = tempfile.mkdtemp(prefix="export-many-", dir=args.out_dir)
            try:
                out = os.path.join(work, "out/") if fmt == "npy" else os.path.join(work, f"out.{fmt}")
                r = run([sys.executable, "-m", "ckptview", "export", src, "--out", out])
            finally:
                shutil.rmtree(work, ignore_errors=True)
            status = "" if r["rc"] == 0 else f" rc={r['rc']} {r['stderr'].strip()[-200:]}"
            print(f"{fmt:12s} {r['seconds']:8.2f} s  {r['seconds'] / args.count * 1e6:7.1f} us/tensor  "
                  f"cpu {r['cpu_seconds']:7.2f} s  peak {r['peak_mb']:7.1f} MiB{status}")
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Peak memory and time of `ckptview info FOLDER` on a hostile Hugging Face index (issue 24, finding 19).

    .venv/bin/python benchmarks/bench_index.py [--keys 21000000] [--repeat 1]

Writes (once, into benchmarks/_data) a folder whose `model.safetensors.index.json` is just under the
reader's 256 MiB limit and holds ~21 million tiny keys, all naming one absent shard, then runs
`ckptview info FOLDER` in a fresh process and prints its exit status, wall time and peak RSS. Before the
bound the whole index was parsed (4.3 GB, ~55 s on the reporter's machine); now it is refused before its
JSON is parsed. A second folder holds a real-sized index (100,000 keys over one shard that holds them)
for comparison. Nothing is asserted: benchmarks are not tests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import struct
import sys
import time

from common import DATA, measure


def _shard(path: str, keys: list[str]) -> None:
    header = {k: {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i, k in enumerate(keys)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + bytes(len(keys)))


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _short(i: int) -> str:
    """A distinct name of 4 characters for the first 16.7 million `i`, 5 after."""
    out = []
    for _ in range(4 if i < 64**4 else 5):
        i, r = divmod(i, 64)
        out.append(_ALPHABET[r])
    return "".join(out)


def hostile_folder(keys: int) -> str:
    """~`keys` tiny keys in an index just under 256 MiB, all naming a shard that is absent."""
    folder = os.path.join(DATA, f"index_{keys}")
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        return folder
    os.makedirs(folder, exist_ok=True)
    with open(index + ".tmp", "w", encoding="ascii") as fh:  # the shard 's' is absent: no shard opens
        fh.write('{"metadata": {"total_size": 1}, "weight_map": {')
        step = 1 << 16
        for start in range(0, keys, step):
            part = ",".join(f'"{_short(i)}":"s"' for i in range(start, min(keys, start + step)))
            fh.write(("," if start else "") + part)
        fh.write("}}")
    os.replace(index + ".tmp", index)
    return folder


def real_folder(keys: int = 100_000) -> str:
    """A real-sized index: `keys` names over one shard that holds them all."""
    folder = os.path.join(DATA, f"index_real_{keys}")
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        return folder
    os.makedirs(folder, exist_ok=True)
    names = [f"model.layers.{i // 10}.weight_{i % 10}" for i in range(keys)]
    _shard(os.path.join(folder, "model-00001-of-00001.safetensors"), names)
    with open(index, "w", encoding="ascii") as fh:
        json.dump({"metadata": {"total_size": keys},
                   "weight_map": dict.fromkeys(names, "model-00001-of-00001.safetensors")}, fh)
    return folder




def run(folder: str) -> dict:
    cmd = [sys.executable, "-m", "ckptview", "info", folder]
    return measure(cmd, repeat=1, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=21_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    t0 = time.perf_counter()
    folders = {"hostile": hostile_folder(args.keys), "real (100,000 keys)": real_folder()}
    size = os.path.getsize(os.path.join(folders["hostile"], "model.safetensors.index.json"))
    print(f"hostile index: {args.keys:,} keys, {size / 2**20:.1f} MiB (made in {time.perf_counter() - t0:.1f} s)")
    for label, folder in folders.items():
        for _ in range(args.repeat):
            r = run(folder)
            print(f"{label:22s} rc={r['rc']} {r['seconds']:7.2f} s  peak {r['peak_mb']:8.1f} MiB  "
                  f"{r['stderr'].strip().splitlines()[-1] if r['stderr'].strip() else ''}")
    print(f"load average: {os.getloadavg()[0]:.2f}; max RSS of this script {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")


if __name__ == "__main__":
    main()

"""Benchmark: a remote checkpoint over HTTP range requests (local server on 127.0.0.1).

    python benchmarks/bench_remote.py              # a 1 GiB torch.save zip with a 64 MiB tensor

Prints, for `ckptview info --json URL` in a fresh process: wall time, bytes and requests; then the
statistics of the 64 MiB tensor read by range (time, bytes, requests) against the same figures read
from the local file. Time bounds for remote reads live here, not in the tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.support.remote_server import RangeServer  # noqa: E402

SIZE = 1 << 30


def make(path: str) -> None:
    """A >= 1 GiB torch.save zip: one zero tensor from a sparse memory-mapped file, one 64 MiB random one."""
    import torch

    raw = path + ".raw"
    with open(raw, "wb") as fh:
        fh.truncate(SIZE)
    big = torch.from_file(raw, shared=True, size=SIZE // 4, dtype=torch.float32)
    torch.save({"big": big, "mid": torch.randn(16 << 20)}, path)
    del big
    os.unlink(raw)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "big.pt")
        make(path)
        srv = RangeServer(folder)
        try:
            url = f"{srv.url}/big.pt"
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "ckptview", "info", "--json", url], capture_output=True,
                                 text=True, check=True)
            listing = time.perf_counter() - t0
            transfer = json.loads(out.stdout)["transfer"]
            print(f"info --json over HTTP of a {os.path.getsize(path) / 1e9:.2f} GB zip: {listing:.2f} s, "
                  f"{transfer['bytes']:,} bytes in {transfer['requests']} requests")
            from ckptview.core.figures.stats import stats_json_for
            from ckptview.core.read.open import open_checkpoint

            for where in (path, url):
                ckpt = open_checkpoint(where)
                entry = next(e for e in ckpt.tensors() if e.name == "mid")
                t0 = time.perf_counter()
                stats = stats_json_for(entry.info)
                dt = time.perf_counter() - t0
                moved = ckpt.metadata.get("_transfer")
                extra = f", {moved.bytes:,} bytes in {moved.requests} requests" if moved is not None else ""
                print(f"stats of a 64 MiB tensor ({'remote' if '://' in where else 'local'}): {dt:.2f} s, "
                      f"mean {stats['mean']:.5f}{extra}")
                ckpt.close()
        finally:
            srv.stop()


if __name__ == "__main__":
    main()

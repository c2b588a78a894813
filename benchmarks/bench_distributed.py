"""Benchmark: statistics of a sharded checkpoint behind a server capped per connection, on 1..8 Dask workers
and on this machine's cores; the figures checked equal to the single-process run's, exactly.

    python benchmarks/bench_distributed.py                 # 1 GB (a 10 GB checkpoint at scale 0.1), 50 MB/s
    python benchmarks/bench_distributed.py --scale 0.25 --workers 1 2 4 8

The checkpoint is bf16 safetensors shards with an index, as transformers writes a large model (4096 x 4096
weights, 32 MiB each), written once under benchmarks/_data. The server (tests/support/remote_server.py's, in
a process of its own) sends each connection at most --rate MB/s. Each Dask configuration is a fresh
`dask scheduler` + N `dask worker` processes (one thread each) on this machine; the time is the caller's
open of the index URL plus `info --stats`' figures (the workers' start is not timed). The local rows read
the same URL, then the files on disk, in this process (one core) and on two local worker processes.
Every row prints the 1-minute load average before and after it: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from benchmarks.common import DATA  # noqa: E402

FULL = 10 << 30  # the checkpoint the issue names: 10 GB
WEIGHT = (4096, 4096)  # bf16: 32 MiB each
PER_SHARD = 4  # weights per shard (128 MiB shards)

_SERVER = r"""
import sys, threading, time
sys.path[:0] = sys.argv[3:]
from tests.support.remote_server import RangeServer

RATE = float(sys.argv[2])

class Paced:
    '''A connection's writes, no faster than RATE bytes per second (a schedule, not a sleep per write).'''
    def __init__(self, raw):
        self.raw, self.due = raw, time.monotonic()
    def write(self, data):
        view = memoryview(data)
        for i in range(0, len(view), 1 << 16):
            piece = view[i:i + (1 << 16)]
            self.due = max(self.due, time.monotonic()) + len(piece) / RATE
            wait = self.due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self.raw.write(piece)
        return len(view)
    def flush(self):
        self.raw.flush()
    def __getattr__(self, name):
        return getattr(self.raw, name)

server = RangeServer(sys.argv[1])
base = server.RequestHandlerClass

class Capped(base):
    def setup(self):
        super().setup()
        self.wfile = Paced(self.wfile)

server.RequestHandlerClass = Capped
print(server.url, flush=True)
threading.Event().wait()
"""


def make(folder: Path, total: int) -> list[str]:
    """bf16 shards of WEIGHT-sized tensors summing to `total` bytes, and the index transformers writes."""
    import torch
    from safetensors.torch import save_file

    count = max(1, total // (WEIGHT[0] * WEIGHT[1] * 2))
    shards = (count + PER_SHARD - 1) // PER_SHARD
    index = folder / "model.safetensors.index.json"
    if index.exists() and json.loads(index.read_text())["metadata"]["count"] == count:
        return sorted(str(p) for p in folder.glob("*.safetensors"))
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*"):
        old.unlink()
    weight_map = {}
    torch.manual_seed(0)
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {}
        for k in range(s * PER_SHARD, min(count, (s + 1) * PER_SHARD)):
            key = f"model.layers.{k}.mlp.weight"
            tensors[key] = (torch.randn(WEIGHT) * 0.02).bfloat16()
            weight_map[key] = name
        save_file(tensors, folder / name, metadata={"format": "pt"})
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    index.write_text(json.dumps({"metadata": {"total_size": size, "count": count}, "weight_map": weight_map}))
    return sorted(str(p) for p in folder.glob("*.safetensors"))


def load() -> float:
    return os.getloadavg()[0]


def idle() -> tuple[float, float]:
    """The machine's (idle, total) CPU time so far, all cores (from /proc/stat; zeros elsewhere)."""
    try:
        with open("/proc/stat") as fh:
            fields = [float(x) for x in fh.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0
    return fields[3] + fields[4], sum(fields)


def idle_share(before: tuple[float, float]) -> str:
    now = idle()
    total = now[1] - before[1]
    return f"{100 * (now[0] - before[0]) / total:3.0f}%" if total > 0 else "n/a"


def process_cpu(pid: int) -> float:
    """User + system seconds of process `pid` (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (float(fields[11]) + float(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def workers_cpu(client) -> float:
    """User + system seconds of every Dask worker process so far."""
    return sum(t.user + t.system for t in client.run(os.times).values())


def figures(path: str, placement) -> tuple[float, dict, object]:
    """Open `path` and compute `info --stats`' figures where `placement` says; (seconds, stats rows, report)."""
    from ckptview.commands.info import info_dict, listing_work
    from ckptview.core.read.bytes.remote.options import RemoteOptions
    from ckptview.core.read.context import ReaderContext
    from ckptview.core.read.open import open_checkpoint
    from ckptview.core.sweep.listing import listing_figures

    t0 = time.perf_counter()
    ckpt = open_checkpoint(path, ReaderContext(remote=RemoteOptions()))
    stats_of, _ = listing_work(ckpt, True, False)
    given = listing_figures(ckpt, path, RemoteOptions(), placement, stats_of)
    data = info_dict(ckpt, stats=True, given=given)
    seconds = time.perf_counter() - t0
    ckpt.close()
    return seconds, {t["name"]: t["stats"] for t in data["tensors"]}, given.report if given is not None else None


def row(label: str, seconds: float, base: float | None, before: float, after: float, same: bool,
        cpu: str = "", idle_pct: str = "") -> None:
    speed = f"{base / seconds:5.2f}x" if base else "  1.00x"
    print(f"| {label:<34} | {seconds:7.1f} s | {speed} | {before:5.1f} / {after:5.1f} | {idle_pct:>4} | "
          f"{cpu:>7} | {'yes' if same else 'NO'} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1, help="of the 10 GB checkpoint (default 0.1: 1 GB)")
    parser.add_argument("--rate", type=float, default=50.0, help="MB/s per connection (default 50)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 7, 8])
    parser.add_argument("--no-local", action="store_true", help="only the Dask rows")
    args = parser.parse_args()

    from tests.support.dask_processes import DaskProcesses

    from ckptview.core.sweep.runner import Placement

    folder = Path(DATA) / "distributed"
    files = make(folder, int(FULL * args.scale))
    size = sum(os.path.getsize(f) for f in files)
    server = subprocess.Popen([sys.executable, "-c", _SERVER, str(folder), str(args.rate * 1e6),
                               os.path.dirname(HERE)], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip() + "/model.safetensors.index.json"  # type: ignore[union-attr]
        print(f"{len(files)} shards, {size / 1e9:.2f} GB of bf16 (scale {args.scale} of 10 GB), served at "
              f"{args.rate:g} MB/s per connection; {os.cpu_count()} cores\n")
        print("| where the figures are computed | wall | speed-up | load avg before / after | machine idle | "
              "CPU s (workers + server) | equal |")
        print("|---|---:|---:|---:|---:|---:|---|")
        before, cpu0 = load(), idle()
        base, reference, _ = figures(url, Placement(workers=1))
        row("1 process, over HTTP (reference)", base, None, before, load(), True, idle_pct=idle_share(cpu0))
        if not args.no_local:
            before, cpu0 = load(), idle()
            seconds, found, _ = figures(url, Placement(workers=2))
            row("2 local workers, over HTTP", seconds, base, before, load(), found == reference,
                idle_pct=idle_share(cpu0))
            before, cpu0 = load(), idle()
            disk, found, _ = figures(str(folder), Placement(workers=1))
            row("1 process, files on disk", disk, None, before, load(), found == reference, idle_pct=idle_share(cpu0))
            before, cpu0 = load(), idle()
            seconds, found, _ = figures(str(folder), Placement(workers=2))
            row("2 local workers, files on disk", seconds, disk, before, load(), found == reference,
                idle_pct=idle_share(cpu0))
        dask_base = None
        for n in args.workers:
            with tempfile.TemporaryDirectory() as tmp:
                cluster = DaskProcesses(Path(tmp), workers=n)
                try:
                    client = cluster.client()
                    used = workers_cpu(client) + process_cpu(server.pid)
                    before, cpu0 = load(), idle()
                    seconds, found, report = figures(url, Placement(client))
                    share = idle_share(cpu0)
                    used = workers_cpu(client) + process_cpu(server.pid) - used
                    dask_base = dask_base or seconds
                    row(f"Dask, {n} worker{'s' if n > 1 else ''} ({report.tasks} tasks)", seconds, dask_base,
                        before, load(), found == reference, f"{used:.1f}", share)
                finally:
                    cluster.close()
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()

"""Benchmark: listing a remote folder of 163 shards, at an injected round trip per request.

    python benchmarks/bench_remote_listing.py                      # 163 shards, 50 ms a request, 3 rounds
    python benchmarks/bench_remote_listing.py --rtt 0.1 --before dbf8771~1

A local range server (tests/support/remote_server.py) serves a folder of safetensors shards written by the
safetensors library (DeepSeek-V3's count: 163 shards, ~560 tensors each, so each header runs past 64 KiB),
waiting `--rtt` seconds before every answer. Paired in one run, each in a fresh process, alternating, medians:

- ckptview over https:// and over hf:// (huggingface_hub's HfFileSystem against the same server, as the Hub);
- huggingface_hub's own `get_safetensors_metadata` on the same server (its defaults: a thread per core + 4);
- ckptview with `--concurrency 1` (one request at a time), and with `--before REF` the code of a git revision.

Each row: the time of the listing alone (imports apart), the requests and bytes the server saw, the bytes per
shard against the header's, the most requests in flight, and the time in round trips (time / rtt).
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

from tests.support.remote_server import RangeServer  # noqa: E402
from tests.support.shards import write_shards  # noqa: E402

DATA = os.path.join(HERE, "_data")

CKPTVIEW = """
import json, sys, time
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.bytes.remote.options import RemoteOptions
import requests, fsspec, huggingface_hub  # imported before the clock starts, as in a warm process
t0, c0 = time.perf_counter(), time.process_time()
ckpt = open_checkpoint(sys.argv[1], ReaderContext(remote=RemoteOptions(concurrency=int(sys.argv[2]))))
n = len(ckpt.tensors())
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "tensors": n}))
"""
BEFORE = """
import json, sys, time
from ckptview.core.read.open import open_checkpoint
import requests, fsspec, huggingface_hub
t0, c0 = time.perf_counter(), time.process_time()
ckpt = open_checkpoint(sys.argv[1])
n = len(ckpt.tensors())
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "tensors": n}))
"""
HUB = """
import json, sys, time
import huggingface_hub
from huggingface_hub import get_safetensors_metadata
t0, c0 = time.perf_counter(), time.process_time()
meta = get_safetensors_metadata(sys.argv[1])
n = sum(len(f.tensors) for f in meta.files_metadata.values())
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "tensors": n}))
"""


def shards(count: int, per_shard: int, pad: int):
    folder = os.path.join(DATA, f"shards_{count}x{per_shard}")
    marker = os.path.join(folder, "done.json")
    if not os.path.exists(marker):
        shutil.rmtree(folder, ignore_errors=True)
        made = write_shards(os.path.join(folder, "hub", "org", "model"), count, per_shard, pad_bytes=pad)
        with open(marker, "w") as fh:
            json.dump(made.headers, fh)
    with open(marker) as fh:
        headers = json.load(fh)
    return folder, headers


def run_one(kind: str, srv: RangeServer, concurrency: int, before_src: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CKPTVIEW_"))}
    hf_home = tempfile.mkdtemp(prefix="bench-hf-")
    env.update(HF_ENDPOINT=srv.url, HF_HOME=hf_home, HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               HF_HUB_DISABLE_TELEMETRY="1", PYTHONPATH=os.path.join(ROOT, "src"))
    folder_url = f"{srv.url}/hub/org/model/"
    if kind == "hub":
        cmd = [sys.executable, "-c", HUB, "org/model"]
    elif kind == "before":
        assert before_src is not None
        env["PYTHONPATH"] = before_src
        cmd = [sys.executable, "-c", BEFORE, folder_url]
    else:
        url = "hf://org/model" if kind == "hf" else folder_url
        cmd = [sys.executable, "-c", CKPTVIEW, url, str(concurrency)]
    srv.counters.reset()
    srv.shaping.reset()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    finally:
        shutil.rmtree(hf_home, ignore_errors=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_cpu"] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    result.update(requests=srv.counters.requests, bytes=srv.counters.bytes, in_flight=srv.shaping.max_in_flight,
                  shard_bytes={p.rsplit("/", 1)[-1]: b for p, b in srv.counters.bytes_by_path.items()
                               if p.endswith(".safetensors")})
    return result


def before_tree(ref: str) -> str:
    """The `src` folder of git revision `ref`, extracted into a temporary folder."""
    target = tempfile.mkdtemp(prefix="bench-before-")
    archive = subprocess.run(["git", "-C", ROOT, "archive", ref, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", target], input=archive.stdout, check=True)
    return os.path.join(target, "src")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=163)
    parser.add_argument("--per-shard", type=int, default=560, help="tensors in each shard")
    parser.add_argument("--pad", type=int, default=1 << 20, help="bytes of one more tensor in each shard")
    parser.add_argument("--rtt", type=float, default=0.05, help="seconds the server waits before each answer")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", metavar="REF", help="also the code of this git revision (e.g. main)")
    args = parser.parse_args()
    os.makedirs(DATA, exist_ok=True)
    folder, headers = shards(args.shards, args.per_shard, args.pad)
    srv = RangeServer(folder)
    srv.shaping.delay = args.rtt
    before_src = before_tree(args.before) if args.before else None
    kinds = ["https", "hf", "hub", "sequential"] + (["before"] if before_src else [])
    labels = {"https": f"ckptview https:// ({args.concurrency} in flight)",
              "hf": f"ckptview hf:// ({args.concurrency} in flight)",
              "hub": "huggingface_hub get_safetensors_metadata",
              "sequential": "ckptview https:// --concurrency 1",
              "before": f"ckptview https:// at {args.before}"}
    print(f"{args.shards} shards of {args.per_shard} tensors (headers {min(headers.values()):,}-"
          f"{max(headers.values()):,} bytes, {sum(headers.values()) / 2**20:.1f} MiB in all); "
          f"{args.rtt * 1000:.0f} ms injected before every answer; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; medians of {args.rounds}",
          flush=True)
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    try:
        for _ in range(args.rounds):
            for kind in kinds:
                if kind == "sequential" and results[kind]:
                    continue  # one round is enough to see it
                results[kind].append(run_one(kind, srv, 1 if kind == "sequential" else args.concurrency,
                                             before_src))
    finally:
        srv.stop()
    hub_s = statistics.median(r["seconds"] for r in results["hub"])
    print("\n| listing | time | round trips | requests | bytes per shard (header) | most in flight | vs hub "
          "| CPU of the listing (of the process) |")
    print("|---|---|---|---|---|---|---|---|")
    header_mean = sum(headers.values()) / len(headers)
    for kind in kinds:
        runs = results[kind]
        s = statistics.median(r["seconds"] for r in runs)
        last = runs[-1]
        per_shard = sum(last["shard_bytes"].values()) / max(1, len(last["shard_bytes"]))
        print(f"| {labels[kind]} | {s:.2f} s | {s / args.rtt:.1f} | {last['requests']} | "
              f"{per_shard / 1024:.0f} KiB ({header_mean / 1024:.0f} KiB, {per_shard / header_mean:.2f}x) | "
              f"{last['in_flight']} | {s / hub_s:.2f}x | {statistics.median(r['cpu'] for r in runs):.2f} s "
              f"({statistics.median(r['process_cpu'] for r in runs):.2f} s) |",
              flush=True)
    print(f"\ntarget: at most {args.shards}/{args.concurrency} + 3 = {args.shards / args.concurrency + 3:.1f} "
          f"round trips plus the parse, under 1 s; bytes per shard at most max(1.1x header, 64 KiB); "
          f"at most 1x get_safetensors_metadata. load average after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"({time.process_time():.0f} s of this process's CPU)")


if __name__ == "__main__":
    main()

"""Shared by the benchmark scripts: time and peak memory of a command in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "_data")

_MEASURE = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.run(json.loads(sys.argv[1]), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
elapsed = time.perf_counter() - t0
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"seconds": elapsed, "peak_mb": usage.ru_maxrss / 1024, "rc": proc.returncode,
                  "cpu_seconds": usage.ru_utime + usage.ru_stime, "stderr": proc.stderr.decode()[-500:]}))
"""


def measure(cmd: list[str], repeat: int = 3, check: bool = True) -> dict:
    """Best-of-`repeat` wall time and the peak RSS of `cmd`, each run in its own process (`check=False`: a
    command that fails, such as a refused file, is measured too; its status is in "rc")."""
    best = None
    # As installed, Python caches bytecode; an environment that forbids it (some sandboxes set
    # PYTHONDONTWRITEBYTECODE) would time compiling every module instead of running the command.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(cmd)], capture_output=True,
                             text=True, check=True, env=env)
        result = json.loads(out.stdout)
        if check and result["rc"] != 0:
            raise RuntimeError(f"{cmd} failed: {result['stderr']}")
        if best is None or result["seconds"] < best["seconds"]:
            best = result
    return best


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def drop_caches_hint() -> str:
    return "(page cache warm: files were just written; figures are for a warm cache)"


def run_side(code: str, *args: str) -> dict:
    """Run one side of a comparison in a fresh interpreter (`code` gets `args` in sys.argv); its last JSON line."""
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def warm(paths: list[str]) -> None:
    """Read the files once, so both sides are timed on a warm page cache."""
    for path in paths:
        with open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass

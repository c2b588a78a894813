"""A ckptview command in a child process under rlimits, its CPU time and peak memory measured (never wall time).

`run_bounded(["graph", path, "--json"])` runs `python -m ckptview graph PATH --json` with RLIMIT_CPU and
RLIMIT_AS set, so a file that would cost hours or gigabytes ends the child (SIGXCPU, MemoryError) instead of
the machine's afternoon, and returns what the child used: CPU seconds (user + system) and its peak resident
memory, read from `wait4` of that child alone.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

CPU_SECONDS = 60
"""The issue's bound for a file under 1 MB: no command uses more CPU than this."""
MEMORY = 1 << 30
"""The issue's bound for a file under 1 MB: no command's peak grows by more than this."""
ADDRESS_SPACE = 6 << 30
"""RLIMIT_AS of the child: the interpreter and its libraries map ~1 GiB before a file is read; past this, the
child gets MemoryError instead of the machine swapping."""


@dataclass(frozen=True)
class Outcome:
    """What the child did and what it used."""

    status: int
    """Its exit status, or minus the signal that ended it (-24: SIGXCPU, its CPU limit)."""
    out: str
    err: str
    cpu: float
    """CPU seconds, user and system."""
    peak: int
    """Peak resident memory in bytes."""

    def describe(self) -> str:
        return f"status {self.status}, {self.cpu:.1f} s CPU, {self.peak >> 20} MiB peak; stderr {self.err[-400:]!r}"


def run_bounded(args: Sequence[str], cpu: int = CPU_SECONDS, address_space: int = ADDRESS_SPACE,
                env: dict[str, str] | None = None) -> Outcome:
    """`python -m ckptview ARGS` in a child under RLIMIT_CPU=`cpu` and RLIMIT_AS=`address_space`."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, "-m", "ckptview", *args], stdout=out, stderr=err,
                                   stdin=subprocess.DEVNULL, env=child_env, preexec_fn=limits)  # noqa: PLW1509
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        return Outcome(process.returncode, out.read().decode("utf-8", "replace"),
                       err.read().decode("utf-8", "replace"), usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)

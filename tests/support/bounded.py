"""A ckptview command in a child process under rlimits, its CPU time and peak memory measured (never wall time).

`run_bounded(["graph", path, "--json"])` runs `python -m ckptview graph PATH --json` with RLIMIT_CPU and
RLIMIT_AS set, so a file that would cost hours or gigabytes ends the child (SIGXCPU, MemoryError) instead of
the machine's afternoon, and returns what the child used: CPU seconds (user + system, from `wait4` of that
child alone) and its peak resident memory (VmHWM of the child's own address space, written as it exits:
`ru_maxrss` of a child carries its parent's high-water mark across fork and exec).
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


_CHILD = """
import os, sys
from ckptview.cli import main

try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 2
sys.stdout.flush()
sys.stderr.flush()
with open("/proc/self/status") as status:
    peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
with open(sys.argv[1], "w") as out:
    out.write(peak)
os._exit(code)  # as ckptview's entry point exits: no teardown of what a listing keeps
"""


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
    """Peak resident memory in bytes (0 when the child was killed before it could say)."""

    def describe(self) -> str:
        return f"status {self.status}, {self.cpu:.1f} s CPU, {self.peak >> 20} MiB peak; stderr {self.err[-400:]!r}"


def run_bounded(args: Sequence[str], cpu: int = CPU_SECONDS, address_space: int = ADDRESS_SPACE,
                env: dict[str, str] | None = None) -> Outcome:
    """`python -m ckptview ARGS` in a child under RLIMIT_CPU=`cpu` and RLIMIT_AS=`address_space`."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as peak:
        process = subprocess.Popen([sys.executable, "-c", _CHILD, peak.name, *args], stdout=out, stderr=err,
                                   stdin=subprocess.DEVNULL, env=child_env, preexec_fn=limits)  # noqa: PLW1509
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        written = peak.read().strip()
        return Outcome(process.returncode, out.read().decode("utf-8", "replace"),
                       err.read().decode("utf-8", "replace"), usage.ru_utime + usage.ru_stime,
                       int(written) * 1024 if written.isdigit() else 0)

"""Run an export in a child that stops mid-write, signal it there, and return how it ended."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def signal_while_writing(script: str, src: Path, out: Path, marker: Path, sig: int,
                         before_signal: Callable[[], None], *extra: str) -> tuple[int, str]:
    """Start `script` (argv: src, out, marker, *extra), wait until it creates `marker` (a .part file is open
    and it waits), run `before_signal`, send `sig`; (exit status, stderr)."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(src), str(out), str(marker), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not marker.exists():  # a hung child is pytest-timeout's to stop; an exited one fails here
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        before_signal()
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err

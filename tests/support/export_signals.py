"""Signals for a child process: as a terminal leaves them, and an export stopped mid-write by one."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def as_at_a_terminal() -> None:
    """A child's `preexec_fn`: Ctrl+C, Ctrl+\\ and a hang-up as an interactive shell leaves them. A suite
    started in the background (`cmd &` in a script) or under nohup inherits them ignored, and Python keeps an
    ignored SIGINT ignored: the child would never see the signal a test sends."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def signal_while_writing(script: str, src: Path, out: Path, marker: Path, sig: int,
                         before_signal: Callable[[], None], *extra: str) -> tuple[int, str]:
    """Start `script` (argv: src, out, marker, *extra), wait until it creates `marker` (a .part file is open
    and it waits), run `before_signal`, send `sig`; (exit status, stderr)."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(src), str(out), str(marker), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_at_a_terminal)
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

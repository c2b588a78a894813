"""How a command opens the path it was given: with the remote options cli.py built, and, on a terminal, the
open's progress on stderr (`ckptview: 12 of 163 shards read`), rewritten in place and cleared after."""

from __future__ import annotations

import sys
import time

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.jobs import Progress
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.open import open_checkpoint
from ckptview.core.text import printable

SHOW_EVERY = 0.1  # seconds between two lines (a header read in pieces reports every few ms)


class _Line:
    """One line of stderr, rewritten in place."""

    def __init__(self) -> None:
        self.last = 0.0
        self.width = 0

    def show(self, step: Progress) -> None:
        now = time.monotonic()
        if now - self.last < SHOW_EVERY and step.done < step.total:
            return
        self.last = now
        text = f"ckptview: {printable(step.message)[:70]}"
        sys.stderr.write("\r" + text.ljust(self.width))
        sys.stderr.flush()
        self.width = max(self.width, len(text))

    def clear(self) -> None:
        if self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()


def open_given(path: str, remote: RemoteOptions) -> Checkpoint:
    """`open_checkpoint(path)` reading URLs with `remote`; its progress on stderr when that is a terminal."""
    line = _Line() if sys.stderr.isatty() else None
    try:
        return open_checkpoint(path, ReaderContext(remote=remote, progress=line.show if line is not None else None))
    finally:
        if line is not None:
            line.clear()

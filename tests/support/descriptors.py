"""Which files under a folder this process holds open (Linux /proc), for tests about leaked descriptors."""

from __future__ import annotations

import os
from pathlib import Path

HAVE_PROC_FDS = os.path.isdir("/proc/self/fd")


def fds_under(folder: str | Path) -> list[str]:
    """Targets of this process's descriptors that lie under *folder*. Counting every descriptor would also
    count the ones earlier tests left to the garbage collector, which may close them in the middle of a test."""
    prefix = str(folder) + os.sep
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefix):
            found.append(target)
    return found

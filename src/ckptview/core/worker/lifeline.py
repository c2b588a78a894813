"""In a child process: die with the parent, and take the scratch folder along.

A worker outlived its parent: after the window crashed (or the OOM killer, or a closed terminal took it), the
worker went on (1.4 GB and growing in one case) and its `ckptview-run-*` folder stayed behind (issue 43,
finding 11). The parent (`core/run/child.py`) hands every child the read end of a pipe whose write end only it
holds, and its pid, on the child's command line; :func:`hold` runs first thing in the child (the bootstrap calls it
before the child's own module is imported) and sets two independent lines:

- **the pipe**: a thread blocks reading it; the kernel closes the parent's end when the parent dies, however it
  dies, and the read returns end-of-file: the child leaves (:func:`leave`). Works wherever pipes do;
- **the death signal** (Linux): `prctl(PR_SET_PDEATHSIG, SIGTERM)`, set through ctypes, so that the kernel
  signals the child when its parent exits, even while the pipe's thread cannot run; the parent may have died
  before the call, so the parent's pid is checked right after it (racing-safe). SIGTERM's handler leaves too.

Leaving removes the child's own scratch folder (its working directory, created for it by the parent and named
`ckptview-<kind>-<parent pid>-*`), ends its process group when it leads one (model code may have started
processes), and exits at once. Every child also leaves through :func:`leave` when its work is done, so its
folder goes with it whichever way it ends; a folder left by a child killed outright (SIGKILL) is removed by
the next ckptview that starts a child, once its parent's pid is gone (`core/run/child.py`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1
_SCRATCH = re.compile(r"^ckptview-[a-z]+-\d+-")  # the folders core/run/child.py makes


class _Own:
    """What this child owns and removes as it leaves."""

    folder = ""  # its scratch folder ("" when it has none)


_own = _Own()
_leaving = threading.Lock()


def hold(spec: str) -> None:
    """Set both lines to the parent named by `spec` ("PARENT_PID:FD:SCRATCH_FOLDER", from the command line)
    (the pipe's thread and the death signal); leave at once when the parent is already gone. Nothing
    happens for "-" (a child started without a lifeline)."""
    parent, _, rest = spec.partition(":")
    fd_text, _, folder = rest.partition(":")
    if not parent.isdigit():
        return
    # Its own scratch folder: the one it was started in, named as core/run/child.py names them; nothing else.
    if folder and _SCRATCH.match(os.path.basename(folder)) and os.path.realpath(folder) == os.getcwd():
        _own.folder = os.getcwd()
    signal.signal(signal.SIGTERM, lambda *_: leave(1))
    _death_signal(signal.SIGTERM)
    if os.getppid() != int(parent):
        leave(1)  # the parent died before the death signal was set: nobody will send it
    if fd_text.isdigit():
        fd = int(fd_text)
        with contextlib.suppress(OSError):
            os.set_inheritable(fd, False)  # the lifeline is this process's own, never its children's
        threading.Thread(target=_watch, args=(fd,), name="ckptview-lifeline", daemon=True).start()


def _death_signal(signum: int) -> None:
    """`prctl(PR_SET_PDEATHSIG, signum)` where the C library has it (Linux); nothing elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no prctl: the pipe alone


def _watch(fd: int) -> None:
    """Block on the lifeline until the parent's end closes (the parent died or let go), then leave."""
    while True:
        try:
            if not os.read(fd, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    leave(1)


def leave(status: int) -> None:
    """Remove this child's scratch folder, end its process group when it leads one, and exit with `status`,
    at once (no interpreter teardown: threads left by model code must not keep the process)."""
    if not _leaving.acquire(blocking=False):
        return  # already leaving (the signal arrived in the thread that is): that one finishes
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    if _own.folder:
        with contextlib.suppress(OSError):
            os.chdir("/")
        shutil.rmtree(_own.folder, ignore_errors=True)
    if os.name == "posix" and status != 0 and os.getpgrp() == os.getpid():
        with contextlib.suppress(OSError):
            os.killpg(os.getpid(), signal.SIGKILL)  # what model code started goes too (this process last)
    os._exit(status)

"""An isolated child of this interpreter (`python -I`), which imports ckptview from this process's own package
folder and runs one module of `core.worker` (the forward pass's worker, the Hub parameter-order child, the device
probe), in a scratch folder of its own, tied to this process's life. Kept apart from `process.py` so that a
caller that only starts a child (inspect's Hub parameter order) does not import the worker protocol and the
run's results.

Children die with their parent (issue 43, finding 11): each gets the read end of a pipe whose write end only this
process holds (`Child.close` lets go of it; the kernel closes it when this process dies, however it dies), and
this process's pid, on its command line; the child's bootstrap watches the pipe and sets the kernel's parent-death signal first
thing (`core/worker/lifeline.py`), and removes its scratch folder when it leaves. A folder left by a child that
was killed outright is removed by the next process that starts a child, once the pid in its name is gone
(:func:`sweep_stale`, once per process).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

import ckptview

__all__ = ["OFFLINE_ENV", "Child", "child_command", "scratch_folder", "start_child", "sweep_stale"]

# No network for a library build in a child (the Hub libraries read these when first imported).
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "DIFFUSERS_OFFLINE": "1",
               "HF_HUB_DISABLE_TELEMETRY": "1"}

_BOOTSTRAP = (
    "import sys, importlib, importlib.util as u\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
    "s = u.spec_from_file_location('ckptview', sys.argv[1] + '/__init__.py', "
    "submodule_search_locations=[sys.argv[1]])\n"
    "m = u.module_from_spec(s); sys.modules['ckptview'] = m; s.loader.exec_module(m)\n"
    "importlib.import_module('ckptview.core.worker.lifeline').hold(sys.argv.pop(3))\n"
    "importlib.import_module(sys.argv[2]).entry()\n"
)
# The scratch folders this module makes: ckptview-<kind>-<the parent's pid>-<random>.
_SCRATCH = re.compile(r"^ckptview-(run|hf)-(\d+)-")
_swept = threading.Event()


def child_command(module: str, *args: str, lifeline: str = "-") -> list[str]:
    """The command line that runs `module.entry()` (a module of `core.worker`) in an isolated process of
    this interpreter, with `args` after it on its argv; `lifeline` ("PARENT_PID:FD:FOLDER", or "-" for none)
    is taken off its argv by the bootstrap and handed to `core/worker/lifeline.py`."""
    package = os.path.dirname(os.path.abspath(ckptview.__file__))
    return [sys.executable, "-I", "-u", "-X", "faulthandler", "-c", _BOOTSTRAP, package, module, lifeline, *args]


def scratch_folder(kind: str) -> str:
    """A new private folder (mode 0700) for a child of `kind` ("run", "hf"), named for this process; stale ones
    of dead processes are removed first (once per process)."""
    sweep_stale()
    return tempfile.mkdtemp(prefix=f"ckptview-{kind}-{os.getpid()}-")


def sweep_stale(root: str | None = None, force: bool = False) -> list[str]:
    """Remove this user's scratch folders in the temporary folder whose process is gone (a parent killed with
    SIGKILL, whose child was killed outright too); the folders removed. Once per process unless `force`."""
    if _swept.is_set() and not force:
        return []
    _swept.set()
    root = root or tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        match = _SCRATCH.match(entry.name)
        if match is None or int(match.group(2)) == os.getpid():
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        if not _alive(int(match.group(2))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (one that ended but is not yet reaped counts: its folder waits a start)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: alive, its folder is not ours anyway
    return True


@dataclass
class Child:
    """A started child and this process's end of its lifeline."""

    proc: subprocess.Popen[bytes]
    lifeline: int  # the pipe's write end; -1 once closed

    def close(self) -> None:
        """Let go of the lifeline: the child leaves when it sees it close (call after it was killed or reaped)."""
        if self.lifeline >= 0:
            with contextlib.suppress(OSError):
                os.close(self.lifeline)
            self.lifeline = -1


def start_child(module: str, *args: str, cwd: str, env: dict[str, str], **popen: Any) -> Child:
    """Start `module` (see `child_command`) in `cwd` with `env`, holding its lifeline. `popen`: more of
    `subprocess.Popen`'s arguments (pipes, a session of its own)."""
    if os.name != "posix":  # no descriptors to hand over: the child is killed by its job, not by a lifeline
        return Child(subprocess.Popen(child_command(module, *args), cwd=cwd, env=env, **popen), -1)
    read_end, write_end = os.pipe()  # both ends close-on-exec: no other child inherits them
    try:
        lifeline = f"{os.getpid()}:{read_end}:{os.path.abspath(cwd)}"
        proc = subprocess.Popen(child_command(module, *args, lifeline=lifeline), cwd=cwd, env=env,
                                pass_fds=(read_end,), **popen)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)  # the child's now; this process keeps only the write end
    return Child(proc, write_end)

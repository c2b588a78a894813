"""In the worker: a library's model build opens nothing but the library, fetches nothing, starts nothing.

`config_guard` refuses the config fields a library turns into loads before anything is built; this is the
second line, on what the build *does*. While :func:`guarded_build` is active, an audit hook (`sys.addaudithook`,
which no Python code can remove) refuses, by raising `PermissionError` in the operation itself:

- opening a file outside the installed Python (its prefixes, `sys.path`, ckptview's own folder), the worker's
  private working folder and a few pseudo-files (`/dev/null`, `/dev/urandom`, `/proc`, `/sys`); creating a
  new file (`O_EXCL`) in the temporary folder is allowed (tempfile's probe: nothing existing is read);
- connecting a socket, resolving a host name, starting a process (`subprocess`, `os.system`, `exec`,
  `spawn`, `fork`), loading a shared library from elsewhere (`ctypes`).

A refusal the library swallows is still recorded: the build then fails with one line naming what it tried.
Audit hooks see what Python does (`open`, `io.open_code`, `os.open`, sockets, processes); a file opened by
native code (a C++ or Rust reader given a path) is not seen, which is why the config fields that name paths
are refused before the build (`core/run/config_guard.py`).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ckptview
from ckptview.core.run.protocol import WorkerError

_REFUSED_EVENTS = {
    "socket.connect": "connect to", "socket.getaddrinfo": "look up the host", "socket.gethostbyname": "look up",
    "socket.sendto": "send to", "urllib.Request": "fetch", "subprocess.Popen": "start", "os.system": "run",
    "os.exec": "run", "os.posix_spawn": "start", "os.spawn": "start", "os.fork": "fork the worker",
    "os.forkpty": "fork the worker", "os.startfile": "open", "webbrowser.open": "open",
}
_NEW_FILE = os.O_CREAT | os.O_EXCL
_PSEUDO_FILES = ("/dev/null", "/dev/urandom", "/dev/random", "/dev/zero")
_PSEUDO_TREES = ("/proc/", "/sys/")  # kernel facts (cpu counts, memory), never a checkpoint


class _State:
    def __init__(self) -> None:
        self.installed = False
        self.active = 0
        self.roots: tuple[str, ...] = ()
        self.temp = ""
        self.refused: list[str] = []
        self.busy = threading.local()  # the hook's own calls (realpath) are never checked again

    def in_temp(self, path: str) -> bool:
        return bool(self.temp) and os.path.dirname(os.path.realpath(path)) == self.temp

    def allowed(self, path: str) -> bool:
        if path in _PSEUDO_FILES or path.startswith(_PSEUDO_TREES):
            return True
        real = os.path.realpath(path)
        return any(real == root or real.startswith(root + os.sep) for root in self.roots)


_state = _State()
_install_lock = threading.Lock()


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _state.active or getattr(_state.busy, "on", False):
        return
    if event == "open":
        target = args[0] if args else None
        if target is None or isinstance(target, int):
            return  # an already open descriptor
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        _state.busy.on = True
        try:
            path = os.fsdecode(os.fspath(target))
            if _state.allowed(os.path.abspath(path)):
                return
            if flags & _NEW_FILE == _NEW_FILE and _state.in_temp(os.path.abspath(path)):
                return  # a new file of its own (tempfile's probe, mkstemp): nothing existing is read
        except (TypeError, ValueError):
            path = repr(target)
        finally:
            _state.busy.on = False
        _refuse(f"open {path}")
    elif event == "ctypes.dlopen":
        name = args[0] if args else None
        if isinstance(name, (str, bytes)) and os.sep in os.fsdecode(name):
            _state.busy.on = True
            try:
                ok = _state.allowed(os.path.abspath(os.fsdecode(name)))
            finally:
                _state.busy.on = False
            if not ok:
                _refuse(f"load the library {os.fsdecode(name)}")
    elif event in _REFUSED_EVENTS:
        shown = args[0] if args else ""
        _refuse(f"{_REFUSED_EVENTS[event]} {str(shown)[:120]}")


def _refuse(what: str) -> None:
    if len(_state.refused) < 16:
        _state.refused.append(what)
    raise PermissionError(f"refused while building a library model: it tried to {what}")


def _roots() -> tuple[str, ...]:
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.getcwd(),
             os.path.dirname(os.path.abspath(ckptview.__file__))}
    found.update(p for p in sysconfig.get_paths().values() if p)
    found.update(p for p in sys.path if p and os.path.isdir(p))
    real = {os.path.realpath(p) for p in found}
    return tuple(sorted(r for r in real if r not in ("/", os.path.expanduser("~"))))


class Guard:
    """What one guarded build tried and was refused."""

    def __init__(self) -> None:
        self.refused: list[str] = []

    def message(self, what: str) -> str | None:
        """One line naming what the build of `what` tried, or None when it tried nothing refused."""
        if not self.refused:
            return None
        more = f" (and {len(self.refused) - 1} more)" if len(self.refused) > 1 else ""
        return (f"{what}: building the model tried to {self.refused[0]}{more}; a library build may open only the "
                "library itself (refused)")

    def check(self, what: str) -> None:
        """Raise the refusal (a WorkerError) when the build tried anything refused, even if it went on."""
        text = self.message(what)
        if text is not None:
            raise WorkerError(text, kind="refused")


@contextmanager
def guarded_build() -> Iterator[Guard]:
    """While active: only the installed Python and the private folder may be opened; no network, no process."""
    with _install_lock:
        if not _state.installed:
            sys.addaudithook(_hook)  # once per process: an audit hook cannot be removed
            _state.installed = True
        if not _state.active:
            _state.roots = _roots()
            _state.temp = os.path.realpath(tempfile.gettempdir())  # found before: its probe is not guarded
            _state.refused = []
        _state.active += 1
        guard = Guard()
        guard.refused = _state.refused  # the live list while active: a refusal is seen before the block ends
    try:
        yield guard
    finally:
        with _install_lock:
            _state.active -= 1
            guard.refused = list(_state.refused)
            if not _state.active:
                _state.refused = []

"""Follow a training run while it writes checkpoints (Qt-free, no torch).

:func:`watch_run` is a generator: it yields progress while reading, and a list of ``--watch`` events
(:meth:`LiveRun.events`) each time the timeline changed. Local folders wake it through file-system events
(the ``watchdog`` library, when installed), remote folders (and local ones without watchdog) are listed
again every ``interval`` seconds.

A file is read only once it is *settled*: its name is not a temporary one (``*.tmp``, ``*.part``,
``tmp-checkpoint-N``, hidden files: the names written before an atomic rename), and its size and
modification time (a remote file's validator) have not changed for ``settle`` seconds. A settled file
that still does not open (a writer that paused mid-file: a zip without its directory yet) is waited for
too, until it changes or has stayed the same for ``GIVE_UP_AFTER`` settles. A read whose file changed
under it is thrown away and done again. A checkpoint that disappears stays in the timeline, marked gone.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import CancelToken
from ckptview.core.read.bytes.fs import filesystem
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.options import DEFAULT as DEFAULT_REMOTE
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.series.cache import file_key, location
from ckptview.core.series.discover import expand_folder
from ckptview.core.series.live import LiveRun
from ckptview.core.series.model import SeriesProgress
from ckptview.core.series.timeline import open_checkpoint

TEMP_NAME = re.compile(r"^(?:\.|tmp)|\.(?:tmp|temp|part|partial|incomplete|lock|download)(?:\.|$|\d)|~$",
                       re.IGNORECASE)
GIVE_UP_AFTER = 10  # settles a file that does not open is waited for before it is shown as unreadable
HEARTBEAT = 0.5  # seconds between two looks at the cancel token while nothing happens

WatchItem = SeriesProgress | list[dict[str, Any]]


def is_temporary(path: str) -> bool:
    """True for a name written before its rename into place (or a hidden file)."""
    return bool(TEMP_NAME.search(os.path.basename(os.path.normpath(path))))


def candidates(paths: list[str], remote: RemoteOptions = DEFAULT_REMOTE) -> list[str]:
    """The checkpoints the run's paths name now, temporary names left out (an empty folder: none)."""
    out: list[str] = []
    for raw in paths:
        raw = os.path.expanduser(raw)
        try:
            fs = filesystem(raw, options=remote)
            if fs.isdir(raw):
                found = expand_folder(raw, fs)
            elif fs.remote or os.path.exists(raw):
                found = [raw]
            else:
                found = []
        except (CheckpointError, OSError):
            found = []  # a folder with nothing readable yet, or that went away: nothing to show now
        out += [p for p in found if not is_temporary(p) or p == raw]
    return out


def observe(path: str, remote: RemoteOptions = DEFAULT_REMOTE) -> Any:
    """What says a file is still being written: (size, mtime) of it, or of every file of a folder."""
    if locate(path).is_remote:
        return file_key(path, 0, remote)
    st = os.stat(path)
    if not os.path.isdir(path):
        return (st.st_ino, st.st_size, st.st_mtime_ns)
    seen = []
    for root, _dirs, names in os.walk(path):
        for name in sorted(names):
            try:
                s = os.stat(os.path.join(root, name))
            except OSError:
                continue
            seen.append((os.path.relpath(os.path.join(root, name), path), s.st_size, s.st_mtime_ns))
    return tuple(sorted(seen))


def opens(path: str, remote: RemoteOptions = DEFAULT_REMOTE) -> str | None:
    """None when ``path`` opens as a checkpoint now, else why not."""
    try:
        open_checkpoint(path, remote).close()
    except (CheckpointError, OSError) as exc:
        return str(exc) or type(exc).__name__
    return None


def watch_run(run: LiveRun, *, interval: float = 10.0, settle: float = 1.0, token: CancelToken | None = None,
              clock: Callable[[], float] = time.monotonic) -> Generator[WatchItem, None, None]:
    """Follow ``run`` until cancelled: yields progress, and the events each time the timeline changed."""
    wake = threading.Event()
    observer = _start_observer(run.paths, wake)
    remote = observer is None or any(locate(p).is_remote for p in run.paths)
    seen: dict[str, tuple[Any, float]] = {}  # location -> (observation, when it was first seen so)
    read_as: dict[str, Any] = {}  # location -> the observation of the file when it was last read
    run.keep_workers()
    try:
        while True:
            if token is not None:
                token.check()
            wake.clear()
            ready, waiting = _settled(run, seen, settle, clock)
            known = {location(e.path) for e in run.entries.values() if not e.gone}
            ready_locs = {location(p) for p in ready}
            held = {location(p) for p in waiting} & known  # known, being rewritten: shown as they were
            present = ready + [p for p in waiting if location(p) in held]
            gone = known - ready_locs - held
            rewritten = any(read_as.get(loc) != seen[loc][0] for loc in ready_locs & known)
            if ready_locs - known or gone or rewritten:
                run.set_present(present)
                for entry in run.entries.values():
                    entry.hold = location(entry.path) in held
                try:
                    yield from run.update(token)
                except CheckpointError:
                    pass  # nothing readable yet (every file settled so far is unreadable)
                else:
                    for loc in ready_locs:
                        read_as[loc] = seen[loc][0]
                    for loc in run.retry:  # changed while read: read again (not reported until then)
                        read_as.pop(loc, None)
                    events = run.events()
                    if events:
                        yield events
            delay = settle / 2 if waiting else (interval if remote else HEARTBEAT * 4)
            _wait(wake, delay, token)
    finally:
        run.close()
        if observer is not None:
            observer.stop()
            observer.join(timeout=10)


def _settled(run: LiveRun, seen: dict[str, tuple[Any, float]], settle: float,
             clock: Callable[[], float]) -> tuple[list[str], list[str]]:
    """(files ready to read, files still being written or not opening yet)."""
    now = clock()
    ready: list[str] = []
    waiting: list[str] = []
    current: set[str] = set()
    for path in candidates(run.paths, run.remote):
        loc = location(path)
        current.add(loc)
        try:
            obs = observe(path, run.remote)
        except (CheckpointError, OSError):
            continue  # gone between the listing and now
        before = seen.get(loc)
        if before is None or before[0] != obs:
            seen[loc] = (obs, now)
            waiting.append(path)
            continue
        age = now - before[1]
        if age < settle:
            waiting.append(path)
            continue
        known = run.entries.get(loc)
        known = None if known is None or known.gone else known
        if (known is None or known.key is None) and age < settle * GIVE_UP_AFTER and opens(path, run.remote) is not None:
            waiting.append(path)  # settled but not whole yet (a writer that paused): wait for more
            continue
        ready.append(path)
    for loc in list(seen):
        if loc not in current:
            del seen[loc]
    return ready, waiting


def _wait(wake: threading.Event, delay: float, token: CancelToken | None) -> None:
    end = time.monotonic() + delay
    while True:
        left = end - time.monotonic()
        if left <= 0 or token is not None and token.cancelled:
            return
        if wake.wait(min(left, HEARTBEAT)):
            return


# watchdog's events of a file opened, and closed without a write (inotify's IN_OPEN, IN_CLOSE_NOWRITE): each
# pass of the watch reads the run's files, so waking on these woke the watch at once, forever (a core at 100%).
_READS = frozenset({"opened", "closed_no_write"})


def is_change(event: Any) -> bool:
    """A watchdog event that may change what the run holds (the watch's own reads open and close files)."""
    return event.event_type not in _READS


def _start_observer(paths: list[str], wake: threading.Event) -> Any:
    """A watchdog observer that sets ``wake`` on any change under the run's local folders (None: poll)."""
    folders = set()
    for raw in paths:
        raw = os.path.expanduser(raw)
        if locate(raw).is_remote:
            continue
        folder = raw if os.path.isdir(raw) else os.path.dirname(os.path.abspath(raw))
        if os.path.isdir(folder):
            folders.add(os.path.realpath(folder))
    if not folders:
        return None
    try:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:
        return None

    class _Wake(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            if is_change(event):
                wake.set()

    observer = Observer()
    for folder in sorted(folders):
        observer.schedule(_Wake(), folder, recursive=True)
    observer.daemon = True
    observer.start()
    return observer

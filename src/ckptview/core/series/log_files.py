"""A run's log files found beside its checkpoints and read into a `RunLog` (Qt-free, never TensorFlow).

Where they are looked for, from each folder of the run (a run folder given, each checkpoint's own folder:
a folder checkpoint itself, the folder of a file):

- ``trainer_state.json`` in that folder (a ``checkpoint-N/`` holds the Trainer's state at step N);
- TensorBoard event files (``events.out.tfevents.*``) and ``hparams.yaml`` in that folder, up to
  `DEPTH` levels of folders below it (the HF Trainer's ``runs/<date>_<host>/``), and in its parent
  itself (Lightning's ``version_0/`` above its ``checkpoints/``).

Every folder listed charges one budget per entry; every file read charges its own (its bytes pay for
it). A file that cannot be read is one line in the log's `files`, never the end of the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ckptview.core.budget import Budget, BudgetExceeded
from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.jobs import CancelToken
from ckptview.core.read.bytes.fs import FileSystem, filesystem
from ckptview.core.read.bytes.remote.options import DEFAULT as DEFAULT_REMOTE
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.series.discover import TRAINER_STATE
from ckptview.core.series.hparams import HPARAMS, HparamsError, read_hparams
from ckptview.core.series.logged import LogFile, RunLog, ScalarCurve
from ckptview.core.series.tfevents import EventScalars, is_event_file, read_event_file
from ckptview.core.series.trainer_state import TrainerStateError, merge_states, read_trainer_state

DEPTH = 2  # levels of folders below a run's folder searched for event files
EVENTS = "events"  # a curve's source: "events: <folder>"


def run_folders(run_paths: Iterable[str], checkpoint_paths: Iterable[str], remote: RemoteOptions = DEFAULT_REMOTE
                ) -> list[tuple[str, FileSystem]]:
    """The run's folders: those given, and each checkpoint's own (once each, in that order)."""
    out: list[tuple[str, FileSystem]] = []
    seen: set[str] = set()
    for path, is_run in [(p, True) for p in run_paths] + [(p, False) for p in checkpoint_paths]:
        try:
            fs = filesystem(path, options=remote)
            folder = path if fs.isdir(path) else (None if is_run else fs.dirname(fs.abspath(path)))
        except (CheckpointError, OSError):
            continue
        if folder is None:
            continue
        key = folder if fs.remote else os.path.realpath(folder)
        if key not in seen:
            seen.add(key)
            out.append((folder, fs))
    return out


def read_run_log(run_paths: list[str], checkpoint_paths: list[str], remote: RemoteOptions = DEFAULT_REMOTE,
                 token: CancelToken | None = None) -> RunLog:
    """Find and read every log file of the run (see the module docstring)."""
    log = RunLog()
    folders = run_folders(run_paths, checkpoint_paths, remote)
    listing = Budget.for_stored(0, "the run's folders", cancel=token)
    states: list[tuple[str, FileSystem]] = []
    events: list[tuple[str, FileSystem]] = []
    hparams: list[tuple[str, FileSystem]] = []
    found: set[str] = set()

    def note(path: str, fs: FileSystem, into: list[tuple[str, FileSystem]]) -> None:
        key = path if fs.remote else os.path.realpath(path)
        if key not in found:
            found.add(key)
            into.append((path, fs))

    try:
        for folder, fs in folders:
            state = fs.join(folder, TRAINER_STATE)
            if _is_file(fs, state):
                note(state, fs, states)
            parent = fs.dirname(folder.rstrip("/") or folder)
            below = _walk(folder, fs, DEPTH, listing)
            above = _walk(parent, fs, 0, listing) if parent and parent != folder else iter(())
            for where, name in [*below, *above]:
                path = fs.join(where, name)
                if is_event_file(name):
                    note(path, fs, events)
                elif name == HPARAMS:
                    note(path, fs, hparams)
    except BudgetExceeded as exc:  # folders of millions of entries: the logs found so far are read
        log.files.append(LogFile(folders[0][0] if folders else "", "folders", error=str(exc)))
    base = _common_folder([p for p, _ in events + hparams])
    _read_states(states, log, token)
    _read_events(events, log, base, token)
    for path, fs in hparams:
        entry = LogFile(path, "hparams")
        try:
            rows = read_hparams(path, fs, token)
        except (HparamsError, CheckpointError, OSError) as exc:
            entry.error = _reason(exc)
            rows = []
        entry.records = len(rows)
        label = _label(os.path.dirname(path), base)
        log.hyper_parameters += [(name, text, f"{HPARAMS}: {label}") for name, text in rows]
        log.files.append(entry)
    return log


def _read_states(states: list[tuple[str, FileSystem]], log: RunLog, token: CancelToken | None) -> None:
    read = []
    for path, fs in states:
        entry = LogFile(path, "trainer_state")
        try:
            state = read_trainer_state(path, fs, token)
            entry.records = state.records
            read.append(state)
        except Cancelled:
            raise
        except (TrainerStateError, CheckpointError, OSError) as exc:
            entry.error = _reason(exc)
        log.files.append(entry)
    if read:
        curves, best = merge_states(read)
        log.curves += curves
        log.best = best


def _read_events(events: list[tuple[str, FileSystem]], log: RunLog, base: str, token: CancelToken | None) -> None:
    """One curve per tag and folder: every point as written (TensorBoard's own reader keeps them all, a step
    written twice too), the folder's files in name order (their names hold the time they were made)."""
    by_folder: dict[str, list[tuple[str, EventScalars]]] = {}
    for path, fs in sorted(events, key=lambda pf: pf[0]):
        entry = LogFile(path, "tfevents")
        try:
            scalars = read_event_file(path, fs, token=token)
        except Cancelled:
            raise
        except (CheckpointError, OSError) as exc:
            entry.error = _reason(exc)
            log.files.append(entry)
            continue
        entry.records, entry.error = scalars.records, scalars.error
        log.files.append(entry)
        by_folder.setdefault(os.path.dirname(path), []).append((path, scalars))
    for folder, files in by_folder.items():
        source = f"{EVENTS}: {_label(folder, base)}"
        tags: dict[str, list[tuple[int, float]]] = {}
        for _, scalars in files:
            for tag, points in scalars.tags.items():
                tags.setdefault(tag, []).extend(zip(points.steps, points.values, strict=True))
        # The epoch at a step, where the logger wrote one (Lightning's "epoch", the HF Trainer's "train/epoch").
        epochs = dict(next((tags[t] for t in ("epoch", "train/epoch") if t in tags), []))
        for tag, written in tags.items():
            curve = ScalarCurve(tag, source)
            for step, value in written:
                curve.add(step, epochs.get(step), value)
            log.curves.append(curve)


def _walk(folder: str, fs: FileSystem, depth: int, budget: Budget) -> Iterable[tuple[str, str]]:
    """(folder, name) of every entry in `folder` and its subfolders down to `depth` levels (hidden ones
    left out), each entry charged to `budget`; a folder that cannot be listed is skipped."""
    stack = [(folder, 0)]
    while stack:
        where, level = stack.pop()
        try:
            names = sorted(fs.listdir(where))
        except (OSError, CheckpointError):
            continue
        budget.charge(1 + len(names), "folder entries")
        below = []
        for name in names:
            if name.startswith("."):
                continue
            yield where, name
            if level < depth and not is_event_file(name) and name != HPARAMS:
                path = fs.join(where, name)
                if _is_dir(fs, path):
                    below.append((path, level + 1))
        stack.extend(reversed(below))


def _is_file(fs: FileSystem, path: str) -> bool:
    try:
        return fs.isfile(path)
    except (OSError, CheckpointError):
        return False


def _is_dir(fs: FileSystem, path: str) -> bool:
    try:
        return fs.isdir(path)
    except (OSError, CheckpointError):
        return False


def _common_folder(paths: list[str]) -> str:
    folders = [os.path.dirname(p) for p in paths]
    if not folders:
        return ""
    try:
        common = os.path.commonpath(folders)
    except ValueError:  # local and remote, or two drives
        return ""
    return os.path.dirname(common) if len(set(folders)) == 1 else common


def _label(folder: str, base: str) -> str:
    """How a log folder is named in a curve's source: relative to the folder above the logs."""
    if base and (folder == base or folder.startswith(base.rstrip("/") + "/")):
        rel = os.path.relpath(folder, base) if "://" not in folder else folder[len(base.rstrip("/")) + 1:]
        return rel if rel not in ("", ".") else os.path.basename(folder) or folder
    return os.path.basename(folder.rstrip("/")) or folder


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__

"""Exporting many tiny tensors costs little each, reports progress at a bounded rate and can be cancelled.

200,000 tiny tensors took 3.5 min to a folder of .npy files (a writer thread started and joined per file,
one fsync at a time, a progress report per tensor queued to the window, a manifest written by the
pure-Python JSON encoder) and 45 s to one .npz (issue 24, finding 22). benchmarks/bench_export_many.py
has the figures; these tests hold the shape of the fix without timing anything.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import threading

import numpy as np
import pytest
from safetensors import safe_open

from ckptview.cli import main
from ckptview.core import open_checkpoint
from ckptview.core.errors import Cancelled
from ckptview.core.export import blocks as export_io
from ckptview.core.export import plan as export_mod
from ckptview.core.export import temps as export_temps
from ckptview.core.export.plan import MANIFEST, export_tensors, select_tensors
from ckptview.core.jobs import CancelToken

COUNT = 3000


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> str:
    """A safetensors file of COUNT tensors of 3 float32 values each (distinct values)."""
    path = str(tmp_path_factory.mktemp("many") / "many.safetensors")
    header = {f"block.{i // 10}.w{i % 10}": {"dtype": "F32", "shape": [3], "data_offsets": [12 * i, 12 * i + 12]}
              for i in range(COUNT)}
    raw = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + np.arange(3 * COUNT, dtype=np.float32).tobytes())
    return path


def _fake_clock(step: float = 0.001):
    """A clock that advances `step` seconds per reading: progress cadence without wall-clock time."""
    ticks = itertools.count()
    return lambda: next(ticks) * step


def _drive(job):
    seen = []
    while True:
        try:
            seen.append(next(job))
        except StopIteration as stop:
            return seen, stop.value


def test_a_folder_of_many_npy_files_matches_safetensors(many, tmp_path, monkeypatch):
    started = []
    real_start = threading.Thread.start

    def counting_start(self):
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(export_io.threading.Thread, "start", counting_start)
    monkeypatch.setattr(export_mod, "_clock", _fake_clock())
    out = tmp_path / "out"
    progress, result = _drive(export_tensors(select_tensors(open_checkpoint(many)), str(out) + "/"))
    # No writer thread per file: tiny files are written by the export's own thread.
    assert [n for n in started if n == "ckptview-export-write"] == []
    # Progress at most every 50 ms of (fake) time: far fewer reports than tensors, the last one complete.
    assert 2 <= len(progress) <= COUNT // 20
    assert progress[-1].done == progress[-1].total == result.bytes_written == 12 * COUNT
    with safe_open(many, "np") as f:
        for name, path in result.files.items():
            assert np.array_equal(np.load(path), f.get_tensor(name)), name
    manifest = json.loads((out / MANIFEST).read_text())
    assert [t["name"] for t in manifest["tensors"]] == list(result.files)
    assert sorted(os.listdir(out)) == sorted([MANIFEST, *(os.path.basename(p) for p in result.files.values())])


@pytest.mark.parametrize("count", [300, 30])
def test_every_file_is_synced_before_any_is_renamed(many, tmp_path, monkeypatch, count):
    """Into a folder that exists: each file fsynced (or, for many, the file system synced once) before any
    temporary file is renamed to its name."""
    synced, renamed = [], []
    real_fsync, real_replace, real_syncfs = os.fsync, os.replace, export_temps.sync_filesystem

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else fd)
        real_fsync(fd)

    def syncfs(folder):
        synced.append(("syncfs", folder))
        real_syncfs(folder)

    def replace(src, dst):
        renamed.append(src)
        assert synced, "renamed before anything was synced"
        real_replace(src, dst)

    monkeypatch.setattr(export_mod.os, "fsync", fsync)
    monkeypatch.setattr(export_temps.os, "fsync", fsync)
    monkeypatch.setattr(export_mod.os, "replace", replace)
    monkeypatch.setattr(export_io.os, "fsync", fsync)
    monkeypatch.setattr(export_temps, "sync_filesystem", syncfs)
    out = tmp_path / "out"
    out.mkdir()  # exists: temporary files renamed one by one
    _drive(export_tensors(select_tensors(open_checkpoint(many))[:count], str(out) + "/"))
    assert len(renamed) == count + 1  # the files and the manifest
    whole = [s for s in synced if isinstance(s, tuple)]
    if count > export_temps.SYNC_BATCH and export_temps.syncfs_available():
        assert whole == [("syncfs", str(out))]  # one flush of the file system, not an fsync per file
    elif os.path.exists("/proc/self/fd"):
        assert set(renamed) <= set(synced)


def test_a_new_folder_is_staged_and_renamed_whole_once_durable(many, tmp_path, monkeypatch):
    """A folder that does not exist yet: every file written under its name in a staging folder beside it,
    made durable, then the one folder renamed; no file renamed alone."""
    events = []
    real_rename, real_syncfs = os.rename, export_temps.sync_filesystem
    monkeypatch.setattr(export_mod.os, "replace", lambda *a: events.append(("replace", a)))
    monkeypatch.setattr(export_temps, "sync_filesystem", lambda f: events.append(("sync", f)) or real_syncfs(f))
    monkeypatch.setattr(export_mod.os, "rename", lambda a, b: events.append(("rename", b)) or real_rename(a, b))
    out = tmp_path / "new" / "out"
    _, result = _drive(export_tensors(select_tensors(open_checkpoint(many)), str(out) + "/"))
    kinds = [k for k, _ in events]
    assert "replace" not in kinds and kinds.count("rename") == 1
    if export_temps.syncfs_available():
        assert kinds == ["sync", "rename"]
    assert events[-1] == ("rename", str(out))
    assert sorted(os.listdir(out)) == sorted([MANIFEST, *(os.path.basename(p) for p in result.files.values())])
    assert os.listdir(out.parent) == ["out"]  # no staging folder left
    with safe_open(many, "np") as f:
        for name, path in list(result.files.items())[:50]:
            assert np.array_equal(np.load(path), f.get_tensor(name)), name


@pytest.mark.parametrize("out_name", ["out/", "out.npz", "out.safetensors"])
def test_cancel_between_reports_stops_at_once(many, tmp_path, monkeypatch, out_name):
    """The token is checked for every tensor, not only when progress is reported: a cancel acts at once."""
    token = CancelToken()
    readings = itertools.count()

    def clock():
        n = next(readings)
        if n == 500:  # between two reports (a reading per tensor, reports every 50 readings)
            token.cancel()
        return n * 0.001

    monkeypatch.setattr(export_mod, "_clock", clock)
    written = []
    real = export_mod.iter_chunks

    def counted(info, chunk_elems, **kwargs):
        written.append(info)
        return real(info, chunk_elems, **kwargs)

    monkeypatch.setattr(export_mod, "iter_chunks", counted)
    real_small = export_mod.read_small

    def counted_small(info, max_elems, ahead=None):
        written.append(info)
        return real_small(info, max_elems, ahead)

    monkeypatch.setattr(export_mod, "read_small", counted_small)  # tiny tensors: read at once
    out = str(tmp_path / out_name)
    with pytest.raises(Cancelled):
        _drive(export_tensors(select_tensors(open_checkpoint(many)), out, token=token))
    assert len(written) <= 502
    assert os.listdir(tmp_path) == []


def test_cli_progress_on_a_terminal_is_bounded(many, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(export_mod, "_clock", _fake_clock())
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    assert main(["export", many, "--out", str(tmp_path / "o.npz")]) == 0
    err = capsys.readouterr().err
    assert 2 <= err.count("\r") <= COUNT // 10
    with np.load(tmp_path / "o.npz") as z, safe_open(many, "np") as f:
        assert len(z.files) == COUNT and np.array_equal(z["block.7.w3"], f.get_tensor("block.7.w3"))


@pytest.mark.parametrize("exists", [False, True])
def test_a_full_disk_midway_leaves_nothing(many, tmp_path, monkeypatch, capsys, exists):
    """Tiny tensors are written in one call each: a write that fails there is one line, and neither the staging
    folder, a temporary file nor a final one is left (nor the folder, when the export made it)."""
    import errno

    real, count = export_io._write, [0]

    def full(fd, data):
        count[0] += 1
        if count[0] > 100:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(export_io, "_write", full)
    work = tmp_path / "work"
    work.mkdir()
    if exists:
        (work / "out").mkdir()
    assert main(["export", many, "--out", str(work / "out") + "/"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "Traceback" not in err
    assert os.listdir(work) == (["out"] if exists else [])
    if exists:
        assert os.listdir(work / "out") == []

"""The live series engine: executors (serial, process pool, Dask LocalCluster), the SQLite cache, `--watch`."""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
import torch

from ckptview.core.jobs import drain
from ckptview.core.series import executor as series_executor
from ckptview.core.series import live as series_live
from ckptview.core.series.cache import SeriesCache, default_path, file_key
from ckptview.core.series.executor import ChainTask, measure_chain, plan_tasks
from ckptview.core.series.live import LiveRun, run_live
from ckptview.core.series.timeline import run_series
from ckptview.core.series.watch import candidates, is_change, is_temporary
from tests.core.series.test_timeline import train_run
from tests.support.export_signals import as_at_a_terminal

CHUNK = 37  # small pieces: many per tensor, cut mid-row, so pairing and re-cutting are exercised


@pytest.fixture()
def run_dir(tmp_path):
    folder = tmp_path / "run"
    train_run(str(folder), nan_at=3, grow_at=4, steps=6)
    return str(folder)


@pytest.fixture()
def cache(tmp_path):
    c = SeriesCache(str(tmp_path / "cache" / "series.sqlite3"))
    yield c
    c.close()


def test_live_equals_the_serial_series(run_dir):
    """The chain walk (each file read once) gives the same JSON as iter_series (pairs read twice)."""
    expected = run_series([run_dir], chunk_elems=CHUNK).to_json()
    assert run_live([run_dir], workers=1, chunk_elems=CHUNK).to_json() == expected


def test_each_checkpoint_is_opened_once_on_one_worker(run_dir, monkeypatch):
    """One worker: one task over the whole chain, so every file is opened (and read) exactly once."""
    from ckptview.core.read import open as open_module

    opened: list[str] = []
    real = open_module.open_checkpoint

    def counting(path, *args, **kwargs):
        opened.append(os.path.basename(path))
        return real(path, *args, **kwargs)

    run = LiveRun([run_dir], workers=1, chunk_elems=CHUNK)
    run.discover()
    for entry in run.entries.values():  # planning opens each file for its metadata: done before counting
        run._plan(entry)
    monkeypatch.setattr(open_module, "open_checkpoint", counting)
    drain(run.update())
    assert sorted(opened) == sorted(f"step_{i}.pt" for i in range(1, 7))


def test_plan_cuts_long_runs_and_tensor_groups():
    chain = [f"c{i}" for i in range(40)]
    planned = plan_tasks([chain], [False], [("a", 10), ("b", 5), ("c", 5)], workers=2, chunk_elems=8)
    # 40 checkpoints, 4 tasks wanted: 2 segments of 20 (MIN_SEGMENT 16), each with 2 tensor groups.
    segments = sorted({(offset, task.paths) for _, offset, task in planned})
    assert [(o, len(p)) for o, p in segments] == [(0, 20), (19, 21)]
    assert all(task.first_is_previous == (offset > 0) for _, offset, task in planned)
    groups = {task.names for _, _, task in planned}
    assert groups == {("a",), ("b", "c")}
    assert plan_tasks([chain], [False], [("a", 1)], workers=1, chunk_elems=8)[0][2].paths == tuple(chain)


def test_process_pool_equals_serial(run_dir, monkeypatch):
    monkeypatch.setattr(series_live, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(series_executor, "MIN_SEGMENT", 2)  # cut the run: boundary files read as "previous"
    serial = run_live([run_dir], workers=1, chunk_elems=CHUNK).to_json()
    assert run_live([run_dir], workers=2, chunk_elems=CHUNK).to_json() == serial


def test_dask_local_cluster_equals_serial(run_dir, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(series_executor, "MIN_SEGMENT", 2)
    serial = run_live([run_dir], workers=1, chunk_elems=CHUNK).to_json()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        assert run_live([run_dir], scheduler=client, chunk_elems=CHUNK).to_json() == serial
        # The same through the address, as `--scheduler tcp://HOST:PORT` gives it.
        assert run_live([run_dir], scheduler=cluster.scheduler_address, chunk_elems=CHUNK).to_json() == serial


def test_unreachable_scheduler_is_one_clear_error(run_dir, capsys, monkeypatch):
    pytest.importorskip("distributed")
    from ckptview.cli import main
    from ckptview.core.cluster import scheduler

    monkeypatch.setattr(scheduler, "CONNECT_TIMEOUT", 2)  # distributed retries a refused port until then

    code = main(["series", run_dir, "--no-cache", "--scheduler", "tcp://127.0.0.1:9", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("ckptview: cannot reach the Dask scheduler tcp://127.0.0.1:9") and err.count("\n") == 1


def test_measure_chain_is_a_pure_function_of_its_task(run_dir):
    paths = tuple(sorted((os.path.join(run_dir, n) for n in os.listdir(run_dir)),
                         key=lambda p: int(p.rsplit("_", 1)[1][:-3])))
    name = "model.head.weight"
    task = ChainTask(paths[:3], (name,), CHUNK)
    first, again = measure_chain(task), measure_chain(task)
    assert first == again
    assert set(first[1].tensors) == {name} and first[1].tensors[name].sums is not None
    assert first[0].tensors[name].sums is None
    assert all(f.key_before == f.key_after == file_key(f.path, CHUNK) for f in first)


# ---------------------------------------------------------------------------------------------------
# The cache.


def test_cache_returns_what_a_fresh_read_returns(run_dir, cache, monkeypatch):
    fresh = run_live([run_dir], workers=1, chunk_elems=CHUNK).to_json()
    assert run_live([run_dir], workers=1, chunk_elems=CHUNK, cache=cache).to_json() == fresh
    assert cache.count() == 6

    def no_reading(*args, **kwargs):
        raise AssertionError("read again although cached")

    monkeypatch.setattr(series_live, "run_tasks", no_reading)
    monkeypatch.setattr(series_live, "_open_meta", no_reading)
    assert run_live([run_dir], workers=1, chunk_elems=CHUNK, cache=cache).to_json() == fresh


def test_a_changed_file_is_read_again(run_dir, cache, monkeypatch):
    run_live([run_dir], workers=1, chunk_elems=CHUNK, cache=cache)
    target = os.path.join(run_dir, "step_4.pt")
    ckpt = torch.load(target, weights_only=True)
    ckpt["model"]["head.bias"] = ckpt["model"]["head.bias"] * 3
    st = os.stat(target)
    torch.save(ckpt, target)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime: the content check must notice
    fresh = run_live([run_dir], workers=1, chunk_elems=CHUNK).to_json()
    read: list[tuple[str, ...]] = []
    real = series_live.run_tasks

    def spy(tasks, *args, **kwargs):
        read.extend(t.paths for t in tasks)
        return real(tasks, *args, **kwargs)

    monkeypatch.setattr(series_live, "run_tasks", spy)
    cached = run_live([run_dir], workers=1, chunk_elems=CHUNK, cache=cache).to_json()
    assert cached == fresh
    names = {os.path.basename(p) for paths in read for p in paths}
    assert names == {"step_3.pt", "step_4.pt", "step_5.pt"}  # itself, and the pairs it is part of
    bias = next(t for t in cached["tensors"] if t["name"] == "model.head.bias")
    values = ckpt["model"]["head.bias"].double()
    assert bias["norm"][3] == pytest.approx(float(values[values.isfinite()].norm()))  # the new content


def test_the_cache_lives_in_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path().startswith(str(tmp_path / "xdg" / "ckptview") + os.sep)


def test_clear_cache_command(run_dir, tmp_path, monkeypatch, capsys):
    from ckptview.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert main(["series", run_dir, "--json", "--workers", "1"]) == 0
    assert SeriesCache().count() == 6
    capsys.readouterr()
    assert main(["series", "--clear-cache"]) == 0
    assert "cleared the series cache (6 checkpoints)" in capsys.readouterr().out
    assert SeriesCache().count() == 0
    assert main(["series", run_dir, "--json", "--no-cache", "--workers", "1"]) == 0
    assert SeriesCache().count() == 0


def test_a_broken_database_is_set_aside(tmp_path, run_dir):
    path = tmp_path / "series.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    c = SeriesCache(str(path))
    result = run_live([run_dir], workers=1, chunk_elems=CHUNK, cache=c).to_json()
    assert result == run_live([run_dir], workers=1, chunk_elems=CHUNK).to_json()
    assert c.count() == 6
    assert any(n.startswith("series.sqlite3.broken-") for n in os.listdir(tmp_path))
    c.close()


WRITER = r"""
import sys
from ckptview.core.compare.diff import Sums
from ckptview.core.series.cache import SeriesCache
from ckptview.core.series.model import TensorFigures
from ckptview.core.figures.stats import TensorStats
c = SeriesCache(sys.argv[1])
figures = {f"layer{i}.weight": TensorFigures(TensorStats(numel=i, mean=0.5, l2=float(i))) for i in range(2000)}
n = 0
while True:
    path = f"{sys.argv[2]}/step_{n}.pt"  # a file that exists: entries of gone files are evicted on open
    open(path, "w").close()
    c.put_figures(f"key{n}", path, figures)
    c.put_pair(f"key{n}", f"key{n + 1}", {f"layer{i}.weight": Sums(numel=i) for i in range(2000)})
    n += 1
    if n == 3:
        print("written", flush=True)
"""


def test_a_killed_writer_leaves_a_usable_database(tmp_path):
    path = str(tmp_path / "series.sqlite3")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "written\n"  # it is in its write loop now
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    c = SeriesCache(path)
    held = c.count()
    assert held >= 3
    for n in range(held):  # every entry written is whole
        figures = c.figures(f"key{n}")
        assert figures is not None and len(figures) == 2000
    (tmp_path / "after.pt").touch()
    c.put_figures("after", str(tmp_path / "after.pt"), {})
    assert c.figures("after") == {}
    c.close()


# ---------------------------------------------------------------------------------------------------
# Watching.


def test_temporary_names_are_not_candidates(tmp_path):
    for name in ("step_1.pt", "step_2.pt.tmp", "tmp-checkpoint-3", ".step_4.pt", "step_5.pt.part", "step_6.pt~"):
        (tmp_path / name).write_bytes(b"PK\x03\x04")
    assert [is_temporary(n) for n in ("step_1.pt", "step_2.pt.tmp", "tmp-checkpoint-3", "step_5.pt.part",
                                      "step_6.pt~", "model.tmp3")] == [False, True, True, True, True, True]
    assert [os.path.basename(p) for p in candidates([str(tmp_path)])] == ["step_1.pt"]


class _Lines:
    """The stdout lines of a process, read by a thread; `until` waits (boundedly) for a matching one."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[dict] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def rest(self) -> None:
        """Take in the lines printed until the process ended."""
        while True:
            line = self.lines.get(timeout=120)
            if line == "":
                return
            self.seen.append(json.loads(line))

    def until(self, match, timeout: float = 240.0) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line == "":
                raise AssertionError(f"the watch ended; it printed {self.seen}")
            event = json.loads(line)  # every line whole JSON
            self.seen.append(event)
            if match(event):
                return event
        raise AssertionError(f"no such event within {timeout} s; saw {self.seen}")


def _state(step: int) -> dict:
    torch.manual_seed(step)
    return {"model": {"w": torch.randn(64, 64), "b": torch.randn(64)}, "global_step": step}


def _save(path: str, step: int) -> None:
    torch.save(_state(step), path)


def _added(path: str):
    return lambda e: e["event"] == "added" and os.path.basename(e["checkpoint"]["path"]) == path


def test_the_watch_wakes_on_changes_not_on_its_own_reads():
    """Each pass of the watch opens and reads the run's files; waking on those events woke it at once, for
    ever: `series --watch` held a core at 100% while nothing changed."""
    events = pytest.importorskip("watchdog.events")
    path = "/run/step_1.pt"
    assert not is_change(events.FileOpenedEvent(path)) and not is_change(events.FileClosedNoWriteEvent(path))
    for changed in (events.FileCreatedEvent(path), events.FileModifiedEvent(path), events.FileClosedEvent(path),
                    events.FileMovedEvent(path + ".tmp", path), events.FileDeletedEvent(path)):
        assert is_change(changed), changed


@pytest.mark.slow
def test_watch_reports_each_checkpoint_once_and_whole(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _save(str(run / "step_1.pt"), 1)
    _save(str(run / "step_2.pt"), 2)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "ckptview", "series", str(run), "--watch", "--json",
                             "--no-cache", "--workers", "1", "--settle", "0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=as_at_a_terminal)
    lines = _Lines(proc)
    try:
        first = lines.until(_added("step_1.pt"))
        second = lines.until(_added("step_2.pt"))
        assert lines.seen == [first, second]  # the present ones first, in run order
        assert second["tensors"]["model.w"]["update_ratio"] is not None

        import io

        buf = io.BytesIO()
        torch.save(_state(3), buf)
        data = buf.getvalue()
        done = threading.Event()

        def writer() -> None:  # one file written slowly in pieces, one renamed into place, one deleted
            with open(run / "step_3.pt", "wb") as fh:
                for k in range(8):
                    fh.write(data[k * len(data) // 8:(k + 1) * len(data) // 8])
                    fh.flush()
                    os.fsync(fh.fileno())
                    time.sleep(0.05)
            _save(str(run / "step_4.pt.tmp"), 4)
            os.replace(run / "step_4.pt.tmp", run / "step_4.pt")
            done.set()

        thread = threading.Thread(target=writer)
        thread.start()
        third = lines.until(_added("step_3.pt"))
        fourth = lines.until(_added("step_4.pt"))
        thread.join(timeout=120)
        assert done.is_set()
        os.remove(run / "step_1.pt")
        gone = lines.until(lambda e: e["event"] == "gone")
        assert os.path.basename(gone["checkpoint"]["path"]) == "step_1.pt" and gone["checkpoint"]["gone"] is True
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl+C
        try:
            proc.wait(timeout=120)
            err = proc.stderr.read()
            lines.reader.join(timeout=120)
        finally:
            if proc.poll() is None:  # a watch that Ctrl+C did not stop is not left running after the test
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
    assert proc.returncode == 130 and "Traceback" not in err, err
    lines.rest()
    # Whole figures: the same as a fresh read of the finished files.
    expected = run_series([str(run / f"step_{i}.pt") for i in (2, 3, 4)]).to_json()
    w = next(t for t in expected["tensors"] if t["name"] == "model.w")
    assert third["tensors"]["model.w"]["norm"] == pytest.approx(w["norm"][1], rel=1e-12)
    assert third["tensors"]["model.w"]["update_ratio"] == pytest.approx(w["update_ratio"][1], rel=1e-9)
    assert fourth["tensors"]["model.w"]["norm"] == pytest.approx(w["norm"][2], rel=1e-12)
    assert fourth["tensors"]["model.w"]["update_ratio"] == pytest.approx(w["update_ratio"][2], rel=1e-9)
    # Ctrl+C ends the stream with the --json failure object ({"error": {"kind": "cancelled", ...}})
    assert lines.seen[-1].get("error", {}).get("kind") in (None, "cancelled"), lines.seen[-1]
    added = [os.path.basename(e["checkpoint"]["path"]) for e in lines.seen if e.get("event") == "added"]
    assert sorted(added) == ["step_1.pt", "step_2.pt", "step_3.pt", "step_4.pt"]  # each once, no .tmp
    assert not [e for e in lines.seen if e.get("event") == "changed"]


def _events_until(gen, match, token, timeout: float = 120.0) -> list[dict]:
    """Drive a watch generator until an event matches (a timer cancels it after ``timeout`` seconds)."""
    timer = threading.Timer(timeout, token.cancel)
    timer.start()
    seen: list[dict] = []
    try:
        for item in gen:
            if isinstance(item, list):
                seen += item
                if any(match(e) for e in item):
                    return seen
    finally:
        timer.cancel()
    raise AssertionError(f"no such event; saw {seen}")


def test_watch_polls_a_remote_folder(tmp_path):
    pytest.importorskip("requests")
    from ckptview.core.jobs import CancelToken
    from ckptview.core.series.watch import watch_run
    from tests.support.remote_server import RangeServer

    run = tmp_path / "run"
    run.mkdir()
    _save(str(run / "step_1.pt"), 1)
    srv = RangeServer(str(tmp_path))
    token = CancelToken()
    try:
        live = LiveRun([f"{srv.url}/run/"], workers=1)
        gen = watch_run(live, interval=0.2, settle=0.2, token=token)
        seen = _events_until(gen, _added("step_1.pt"), token)
        assert [e["event"] for e in seen] == ["added"]
        _save(str(run / "step_2.pt.tmp"), 2)
        os.replace(run / "step_2.pt.tmp", run / "step_2.pt")
        seen = _events_until(gen, _added("step_2.pt"), token)
        ratio = seen[-1]["tensors"]["model.w"]["update_ratio"]
        expected = run_series([str(run / "step_1.pt"), str(run / "step_2.pt")]).to_json()
        w = next(t for t in expected["tensors"] if t["name"] == "model.w")
        assert ratio == pytest.approx(w["update_ratio"][1], rel=1e-9)
        os.remove(run / "step_1.pt")
        seen = _events_until(gen, lambda e: e["event"] == "gone", token)
        assert seen[-1]["checkpoint"]["path"].endswith("step_1.pt")
        gen.close()
    finally:
        token.cancel()
        srv.stop()


def test_cancel_stops_the_pool(run_dir, monkeypatch):
    import multiprocessing

    from ckptview.core.errors import Cancelled
    from ckptview.core.jobs import CancelToken

    monkeypatch.setattr(series_live, "POOL_MIN_BYTES", 0)
    token = CancelToken()
    run = LiveRun([run_dir], workers=2, chunk_elems=CHUNK)
    run.discover()
    gen = run.update(token)
    next(gen)  # reading has started
    token.cancel()
    with pytest.raises(Cancelled):
        for _ in gen:
            pass
    assert multiprocessing.active_children() == []


def test_kept_workers_serve_later_updates(run_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(series_live, "POOL_MIN_BYTES", 0)
    part = tmp_path / "part"
    part.mkdir()
    for name in ("step_1.pt", "step_2.pt", "step_3.pt"):
        os.link(os.path.join(run_dir, name), part / name)
    run = LiveRun([str(part)], workers=2, chunk_elems=CHUNK)
    run.keep_workers()
    try:
        run.discover()
        drain(run.update())
        executor = run.pool._pool
        assert executor is not None
        for name in ("step_4.pt", "step_5.pt", "step_6.pt"):
            os.link(os.path.join(run_dir, name), part / name)
        run.discover()
        result = drain(run.update()).to_json()
        assert run.pool._pool is executor  # the same worker processes
    finally:
        run.close()
    serial = run_live([run_dir], workers=1, chunk_elems=CHUNK).to_json()
    assert result["tensors"] == serial["tensors"] and result["findings"] != []


def _rchar() -> int:
    with open("/proc/self/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("rchar"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts read(2) bytes through /proc")
def test_each_checkpoints_bytes_are_read_once(tmp_path):
    """The bytes read(2) while measuring a run: about the run's size (iter_series reads about twice it)."""
    torch.manual_seed(0)
    state = {f"layer{i}": torch.randn(1024, 1024) for i in range(2)}
    for step in range(1, 5):
        for value in state.values():
            value.add_(torch.randn_like(value), alpha=1e-3)
        torch.save({"model": state, "global_step": step}, tmp_path / f"step_{step}.pt")
    size = sum(os.path.getsize(tmp_path / f"step_{s}.pt") for s in range(1, 5))
    run = LiveRun([str(tmp_path)], workers=1)
    run.discover()
    for entry in run.entries.values():
        run._plan(entry)  # metadata first, as a watch has it before a new file's values
    before = _rchar()
    drain(run.update())
    assert _rchar() - before < 1.15 * size
    before = _rchar()
    run_series([str(tmp_path)])
    assert _rchar() - before > 1.9 * size  # what the test would see of the streamed pair walk


def test_the_cache_never_stores_a_url(cache):
    pytest.importorskip("requests")
    url = "https://example.invalid/run/step_1.pt?token=SECRET123"
    cache.put_meta("k1", url, {"format": "torch-zip"})
    cache.put_figures("k1", url, {})
    assert cache.meta("k1") == {"format": "torch-zip"}
    cache.close()
    for name in os.listdir(os.path.dirname(cache.path)):
        with open(os.path.join(os.path.dirname(cache.path), name), "rb") as fh:
            data = fh.read()
        assert b"SECRET123" not in data and b"example.invalid" not in data


def test_watch_reports_a_rewritten_checkpoint_as_changed(tmp_path):
    from ckptview.core.jobs import CancelToken
    from ckptview.core.series.watch import watch_run

    run = tmp_path / "run"
    run.mkdir()
    for step in (1, 2, 3):
        _save(str(run / f"step_{step}.pt"), step)
    token = CancelToken()
    gen = watch_run(LiveRun([str(run)], workers=1), settle=0.2, token=token)
    try:
        seen = _events_until(gen, _added("step_3.pt"), token)
        assert [(e["event"], e["checkpoint"]["index"]) for e in seen] == [("added", 0), ("added", 1), ("added", 2)]
        state = _state(2)
        state["model"]["w"].mul_(2)
        torch.save(state, run / "step_2.pt.tmp")
        os.replace(run / "step_2.pt.tmp", run / "step_2.pt")
        seen = _events_until(gen, lambda e: e["event"] == "changed" and e["checkpoint"]["index"] == 2, token)
        changed = {e["checkpoint"]["index"]: e for e in seen}
        assert set(changed) == {1, 2} and all(e["event"] == "changed" for e in seen)  # it, and the one after
        assert changed[1]["tensors"]["model.w"]["norm"] == pytest.approx(float(state["model"]["w"].double().norm()))
    finally:
        gen.close()
        token.cancel()


def test_series_without_a_path_says_so(capsys):
    from ckptview.cli import main

    assert main(["series", "--json"]) == 2
    assert capsys.readouterr().err == "ckptview: series: give a run folder, checkpoints or globs (PATH)\n"


def test_a_long_chain_holds_a_few_pieces_not_one_per_checkpoint(tmp_path):
    """Memory of a chain walk stays at a few pieces, however many checkpoints the chain holds."""
    import tracemalloc

    torch.manual_seed(0)
    w = torch.randn(512, 1024)  # 2 MiB: one piece of the default chunk, read in smaller blocks
    paths = []
    for step in range(1, 17):
        w.add_(torch.randn_like(w), alpha=1e-3)
        paths.append(str(tmp_path / f"step_{step}.pt"))
        torch.save({"model": {"w": w}, "global_step": step}, paths[-1])
    piece = w.numel() * 4

    def peak_of(chain: tuple[str, ...]) -> tuple[int, list]:
        tracemalloc.start()
        try:
            figures = measure_chain(ChainTask(chain, None, series_live.SERIES_CHUNK_ELEMS))
            return tracemalloc.get_traced_memory()[1], figures
        finally:
            tracemalloc.stop()

    short, _ = peak_of(tuple(paths[:4]))
    long, figures = peak_of(tuple(paths))
    # 12 more checkpoints in the chain: not 12 more pieces held (each lane once held its last one).
    assert long - short < 2 * piece, f"{(long - short) / piece:.1f} pieces more"
    expected = run_series([str(tmp_path)]).to_json()
    ours = run_live([str(tmp_path)], workers=1).to_json()
    assert ours["tensors"] == expected["tensors"]
    assert figures[-1].tensors["model.w"].stats.l2 == expected["tensors"][0]["norm"][-1]

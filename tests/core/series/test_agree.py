"""The serial series (issues 24/25) and the live engine (issue 29) agree: the same figures and findings on the
issue's run through the serial path, the process pool, Dask and the cache; unsafe globals, unreadable and
changed checkpoints carried through every one of them and through the ``--watch`` events."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from ckptview.core.jobs import drain
from ckptview.core.series import executor as series_executor
from ckptview.core.series import live as series_live
from ckptview.core.series import timeline as series_mod
from ckptview.core.series.cache import SeriesCache, file_key
from ckptview.core.series.live import LiveRun, checkpoint_event, run_live
from ckptview.core.series.timeline import run_series
from tests.core.series.test_truth import Exec
from tests.support.series_run import STEPS, make_run

CHUNK = 37  # small pieces: many per tensor, so pairing and re-cutting are exercised


@pytest.fixture(scope="module")
def issue_run(tmp_path_factory):
    """The issue's run, step 20 referencing builtins.exec (never run)."""
    folder = tmp_path_factory.mktemp("agree") / "run"
    paths = make_run(folder)
    state = torch.load(paths[2], weights_only=True)
    state["hook"] = Exec("raise SystemExit('ran')")
    torch.save(state, paths[2])
    return folder


@pytest.fixture()
def run(issue_run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(issue_run, dst)
    return str(dst), [str(dst / f"step_{s}.pt") for s in STEPS]


@pytest.fixture()
def cache(tmp_path):
    c = SeriesCache(str(tmp_path / "cache" / "series.sqlite3"))
    yield c
    c.close()


def _serial(folder: str) -> dict:
    return json.loads(json.dumps(run_series([folder], chunk_elems=CHUNK).to_json()))


def _live(folder: str, **kwargs) -> dict:
    return json.loads(json.dumps(run_live([folder], chunk_elems=CHUNK, **kwargs).to_json()))


@pytest.mark.slow
def test_serial_pool_dask_and_cache_agree_on_the_issue_run(run, cache, monkeypatch):
    folder, paths = run
    expected = _serial(folder)
    # What the issues added is there to be compared.
    assert [c["unsafe_globals"] for c in expected["checkpoints"]] == [[], [], ["builtins.exec"], [], [], []]
    assert [f["checkpoint"] for f in expected["findings"] if f["kind"] == "unsafe"] == [paths[2]]
    params = {t["name"]: t.get("param") for t in expected["tensors"]}
    assert params["optimizer.state.fc.weight.exp_avg"] == "fc.weight"
    assert not any(f["tensor"] and f["tensor"].endswith("num_batches_tracked") for f in expected["findings"]
                   if f["kind"] == "explosion")
    assert any(f["kind"] == "nan" for f in expected["findings"])

    assert _live(folder, workers=1) == expected
    monkeypatch.setattr(series_live, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(series_executor, "MIN_SEGMENT", 2)  # cut the run: boundary files read as "previous"
    assert _live(folder, workers=2) == expected
    assert _live(folder, workers=2, cache=cache) == expected
    assert cache.count() == len(STEPS)

    def no_reading(*args, **kwargs):
        raise AssertionError("read again although cached")

    with monkeypatch.context() as m:
        m.setattr(series_live, "run_tasks", no_reading)
        m.setattr(series_live, "_open_meta", no_reading)
        assert _live(folder, workers=1, cache=cache) == expected  # unsafe globals and names from the cache

    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        assert _live(folder, scheduler=client) == expected


def test_watch_events_carry_the_serial_figures_and_findings(run):
    folder, paths = run
    expected = _serial(folder)
    live = LiveRun([folder], workers=1, chunk_elems=CHUNK)
    live.discover()
    result = drain(live.update())
    events = json.loads(json.dumps(live.events()))
    assert [e["event"] for e in events] == ["added"] * len(STEPS)
    for t, event in enumerate(events):
        assert set(event) == {"event", "checkpoint", "tensors", "findings"}
        assert event["checkpoint"]["path"] == paths[t] and event["checkpoint"]["index"] == t
        assert event["checkpoint"]["unsafe_globals"] == expected["checkpoints"][t]["unsafe_globals"]
        assert event["findings"] == [f for f in expected["findings"] if f["index"] == t]
        for tensor in expected["tensors"]:
            if tensor["shapes"][t] is None:
                assert tensor["name"] not in event["tensors"]
                continue
            got = event["tensors"][tensor["name"]]
            assert set(got) == {"norm", "mean", "std", "abs_max", "nan", "inf", "update_ratio", "frac_changed"}
            assert got == {k: tensor[k][t] for k in got}
    assert [f["kind"] for f in events[2]["findings"]].count("unsafe") == 1
    from ckptview.commands.series_options import _line  # the --watch line without --json

    assert _line(events[2]).endswith("; UNSAFE GLOBALS (referenced, not run): builtins.exec)")
    assert "UNSAFE" not in _line(events[1])
    nan_t = STEPS.index(40)
    fc = torch.load(paths[nan_t], weights_only=True)["model"]["fc.weight"]
    assert events[nan_t]["tensors"]["model.fc.weight"]["nan"] == int(fc.isnan().sum()) == 1  # per value
    body = json.loads(json.dumps(checkpoint_event(result, nan_t)))
    assert {"event": "added", **body} == events[nan_t]
    assert live.events() == []  # nothing changed since


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_checkpoint_changed_before_its_task_read_it_is_reported_and_never_cached(run, cache, monkeypatch,
                                                                                   workers):
    folder, paths = run
    victim = paths[3]
    monkeypatch.setattr(series_live, "POOL_MIN_BYTES", 0)
    real = series_live.run_tasks

    def resave_then_run(tasks, *args, **kwargs):
        state = torch.load(victim, weights_only=True)
        state["model"]["fc.bias"] = state["model"]["fc.bias"] * 3
        torch.save(state, victim)  # after planning, before the tasks open it
        return real(tasks, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(series_live, "run_tasks", resave_then_run)
        data = _live(folder, workers=workers, cache=cache)
    assert "changed on disk" in data["checkpoints"][3]["error"]
    assert [(f["kind"], f["checkpoint"], f["tensor"]) for f in data["findings"] if f["kind"] == "unreadable"] \
        == [("unreadable", victim, None)]
    bias = next(t for t in data["tensors"] if t["name"] == "model.fc.bias")
    assert bias["norm"][3] is None and None not in bias["norm"][:3] and bias["norm"][4] is not None
    counter = next(t for t in data["tensors"] if t["name"] == "model.bn1.num_batches_tracked")  # never NaN
    assert counter["update_ratio"][4] is None and counter["update_ratio"][5] is not None  # no ratio across the hole
    assert cache.figures(file_key(victim, CHUNK)) is None  # the file as it is now was never read whole

    # Read again as it is now: what a fresh serial read of the new file says.
    assert _live(folder, workers=workers, cache=cache) == _serial(folder)


def test_a_checkpoint_failing_in_its_task_is_named_with_its_reason_and_read_again(run, cache, monkeypatch):
    folder, paths = run
    real_open = series_mod.open_checkpoint
    opened: list[str] = []

    def failing(path, *args):
        opened.append(path)
        if path == paths[4] and opened.count(path) == 2:  # the first open is planning
            raise RuntimeError("reader tripped")
        return real_open(path, *args)

    with monkeypatch.context() as m:
        m.setattr(series_mod, "open_checkpoint", failing)
        data = _live(folder, workers=1, cache=cache)
    assert data["checkpoints"][4]["error"] == "cannot read: RuntimeError: reader tripped"
    bad = [f for f in data["findings"] if f["kind"] == "unreadable"]
    assert [(f["checkpoint"], f["tensor"]) for f in bad] == [(paths[4], None)] and "reader tripped" in bad[0]["detail"]
    assert all(t["norm"][4] is None for t in data["tensors"]) and data["tensors"][0]["norm"][5] is not None
    assert cache.figures(file_key(paths[4], CHUNK)) is None
    assert _live(folder, workers=1, cache=cache) == _serial(folder)
    assert os.path.exists(paths[4])


def test_a_watch_reads_a_checkpoint_changed_while_read_again_instead_of_reporting_it(run, monkeypatch):
    # Issue 29: nothing half-written is reported by --watch; the plain read reports it (24.15, above).
    folder, paths = run
    victim = paths[3]
    real = series_live.run_tasks
    calls: list[int] = []

    def resave_then_run(tasks, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            state = torch.load(victim, weights_only=True)
            state["model"]["fc.bias"] = state["model"]["fc.bias"] * 3
            torch.save(state, victim)
        return real(tasks, *args, **kwargs)

    monkeypatch.setattr(series_live, "run_tasks", resave_then_run)
    live = LiveRun([folder], workers=1, chunk_elems=CHUNK)
    live.discover()
    first = drain(live.update())
    assert "changed on disk" in (first.checkpoints[3].error or "")
    events = live.events()
    assert [e["checkpoint"]["index"] for e in events] == [0, 1, 2, 4, 5]
    assert not any(e["checkpoint"].get("error") for e in events)
    drain(live.update())  # the watch's next round: read as it is now
    again = json.loads(json.dumps(live.events()))
    expected = _serial(folder)
    assert [(e["event"], e["checkpoint"]["index"]) for e in again] == [("added", 3), ("changed", 4)]
    assert again[0]["checkpoint"] == {**expected["checkpoints"][3], "index": 3}
    bias = next(t for t in expected["tensors"] if t["name"] == "model.fc.bias")
    assert again[0]["tensors"]["model.fc.bias"]["norm"] == bias["norm"][3]

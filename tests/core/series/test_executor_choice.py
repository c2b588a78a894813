"""Which executor reads a run: in this process unless the run is large enough to pay for a pool."""

from __future__ import annotations

import pytest

from ckptview.core.cluster import local as cluster_local
from ckptview.core.cluster import tasks as cluster_tasks
from ckptview.core.cluster.local import BYTES_PER_WORKER, choose_workers
from ckptview.core.jobs import drain
from ckptview.core.series import live as series_live
from ckptview.core.series.live import LiveRun, run_live
from tests.core.series.test_live import CHUNK, run_dir  # noqa: F401 - the fixture

GIB = 1 << 30


def test_small_runs_and_single_cores_read_in_this_process():
    assert choose_workers(300 << 20, cores=2) == 1  # the run: 6 x 48 MB on 2 cores
    assert choose_workers(BYTES_PER_WORKER - 1, cores=64) == 1
    assert choose_workers(100 * GIB, cores=1) == 1
    assert choose_workers(0, cores=8) == 1


def test_large_runs_get_one_worker_per_share_up_to_the_cores():
    assert choose_workers(2 * BYTES_PER_WORKER, cores=2) == 2
    assert choose_workers(3 * BYTES_PER_WORKER + 1, cores=16) == 3
    assert choose_workers(100 * BYTES_PER_WORKER, cores=16) == 16
    assert choose_workers(10, cores=4, per_worker=0) == 4


def test_the_users_count_is_obeyed():
    assert choose_workers(1, requested=3, cores=1) == 3
    assert choose_workers(100 * GIB, requested=1, cores=16) == 1


class _NoPool:
    def __init__(self, workers: int) -> None:
        raise AssertionError(f"a pool of {workers} was started for a small run")


class _InlinePool:
    """Stands in for the process pool: records its size, runs the tasks here (same figures)."""

    sizes: list[int] = []

    def __init__(self, workers: int) -> None:
        _InlinePool.sizes.append(workers)

    def run(self, fn, tasks, token):
        for i, task in enumerate(tasks):
            yield i, fn(task)

    def close(self) -> None:
        pass


def test_a_small_run_is_read_without_a_pool(run_dir, monkeypatch):  # noqa: F811
    expected = run_live([run_dir], workers=1, chunk_elems=CHUNK).to_json()
    monkeypatch.setattr(cluster_local, "default_workers", lambda: 16)  # many cores, a small run
    monkeypatch.setattr(cluster_tasks, "LocalPool", _NoPool)
    monkeypatch.setattr(series_live, "LocalPool", _NoPool)
    run = LiveRun([run_dir], chunk_elems=CHUNK)  # no --workers: the rule chooses
    run.discover()
    assert drain(run.update()).to_json() == expected


def test_a_large_run_on_many_cores_uses_the_pool(run_dir, monkeypatch):  # noqa: F811
    expected = run_live([run_dir], workers=1, chunk_elems=CHUNK).to_json()
    monkeypatch.setattr(cluster_local, "default_workers", lambda: 4)
    monkeypatch.setattr(series_live, "default_workers", lambda: 4)
    monkeypatch.setattr(series_live, "POOL_MIN_BYTES", 1)  # every byte "large": a worker per core
    monkeypatch.setattr(cluster_tasks, "LocalPool", _InlinePool)
    _InlinePool.sizes = []
    assert run_live([run_dir], chunk_elems=CHUNK).to_json() == expected
    assert _InlinePool.sizes and _InlinePool.sizes[0] == 4


@pytest.mark.parametrize("workers", [1, 3])
def test_an_explicit_count_decides(run_dir, monkeypatch, workers):  # noqa: F811
    monkeypatch.setattr(cluster_tasks, "LocalPool", _InlinePool)
    _InlinePool.sizes = []
    run_live([run_dir], workers=workers, chunk_elems=CHUNK)
    if workers == 1:
        assert _InlinePool.sizes == []
    else:
        assert len(_InlinePool.sizes) == 1 and 2 <= _InlinePool.sizes[0] <= workers

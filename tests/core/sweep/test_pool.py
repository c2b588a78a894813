"""Whole-checkpoint work on this machine's cores: a large file fans out over local worker processes (real
spawned ones here), with the figures and files of one process; a small one stays in this process."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json

import pytest
import torch

from ckptview.cli import main
from ckptview.core.cluster import local as cluster_local
from ckptview.core.cluster.local import LocalPool
from ckptview.core.sweep import plan as sweep_plan
from ckptview.core.sweep.runner import LOCAL, Placement, Sweep


def _run(argv: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code in (0, 1), err.getvalue()
    return out.getvalue()


def test_a_file_fans_out_only_when_its_bytes_pay_for_the_cores(monkeypatch):
    monkeypatch.setattr(cluster_local, "default_workers", lambda: 4)
    assert not Sweep(LOCAL, 300 << 20).fans_out  # 300 MB: read here, no process started
    assert Sweep(LOCAL, 3 << 30).slots == 3  # one worker per GiB to read
    assert Sweep(LOCAL, 100 << 30).slots == 4  # at most one per core
    assert not Sweep(Placement(workers=1), 100 << 30).fans_out  # --workers 1: here, whatever the size
    assert Sweep(Placement(workers=2), 10).slots == 2  # --workers N: obeyed
    monkeypatch.setattr(cluster_local, "default_workers", lambda: 1)
    assert not Sweep(LOCAL, 100 << 30).fans_out  # one core: nothing to gain


@pytest.fixture()
def pools(monkeypatch):
    """How many times a local pool ran tasks in this test."""
    runs: list[int] = []
    real = LocalPool.run

    def counted(self, fn, tasks, token):
        runs.append(len(tasks))
        return real(self, fn, tasks, token)

    monkeypatch.setattr(LocalPool, "run", counted)
    return runs


@pytest.mark.slow
def test_info_diff_and_export_on_local_workers_equal_one_process(mixed_pt, tmp_path, pools, monkeypatch):
    monkeypatch.setattr(sweep_plan, "MIN_TASK_BYTES", 1 << 20)  # several tasks of a 30 MB file (planned here)
    path = str(mixed_pt)
    one = _run(["info", path, "--json", "--stats", "--spectral", "--workers", "1"])
    assert pools == []
    two = _run(["info", path, "--json", "--stats", "--spectral", "--workers", "2"])
    assert pools and all(n >= 2 for n in pools)
    assert json.loads(two) == json.loads(one)

    state = torch.load(path, weights_only=True)
    torch.manual_seed(9)
    other = {k: v + 1e-3 * torch.randn_like(v) if v.is_floating_point() else v for k, v in state.items()}
    torch.save(other, tmp_path / "other.pt")
    pools.clear()
    one = _run(["diff", path, str(tmp_path / "other.pt"), "--json", "--workers", "1"])
    two = _run(["diff", path, str(tmp_path / "other.pt"), "--json", "--workers", "2"])
    assert pools and json.loads(two) == json.loads(one)

    pools.clear()
    for workers in ("1", "2"):
        _run(["export", path, "--out", str(tmp_path / workers / "x.safetensors"), "--workers", workers])
    assert pools
    digests = [hashlib.sha256((tmp_path / w / "x.safetensors").read_bytes()).hexdigest() for w in ("1", "2")]
    assert digests[0] == digests[1]

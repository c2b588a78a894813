"""Whole-checkpoint work as tasks, run in this process: how it is cut (sizes, blocks of whole chunks), that
the merged figures, rows and files equal the one-pass ones bit for bit, and what a task refuses."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from ckptview.core.compare.diff import diff_checkpoints, plan_diff
from ckptview.core.errors import CheckpointError
from ckptview.core.export.plan import plan_export, run_export, select_tensors
from ckptview.core.figures.stats import tensor_stats
from ckptview.core.jobs import drain
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.open import open_checkpoint
from ckptview.core.sweep import plan as sweep_plan
from ckptview.core.sweep import stats as sweep_stats
from ckptview.core.sweep.pairs import compare_placed
from ckptview.core.sweep.plan import Piece, Work, cut, task_bytes
from ckptview.core.sweep.runner import Placement, Sweep
from ckptview.core.sweep.source import TaskFailed
from ckptview.core.sweep.writing import export_placed

REMOTE = RemoteOptions()
CHUNK = 1000  # elements per chunk: every tensor below of more than 2000 elements may be cut


class _Here(Sweep):
    """The tasks run one after another in this process, planned as for `slots` workers."""

    def __init__(self, slots: int) -> None:
        super().__init__(Placement(workers=1), 0)
        self.slots = slots

    @property
    def fans_out(self) -> bool:
        return True


@pytest.fixture()
def small_tasks(monkeypatch):
    monkeypatch.setattr(sweep_plan, "MIN_TASK_BYTES", 4096)


@pytest.fixture()
def values(tmp_path):
    torch.manual_seed(3)
    nan = torch.randn(5000)
    nan[17], nan[2500], nan[4999] = float("nan"), float("inf"), float("-inf")
    state = {"f32": torch.randn(40, 250), "bf16": torch.randn(7001).bfloat16(), "f16": torch.randn(3333).half(),
             "i64": torch.arange(-2000, 2500), "nan": nan, "small": torch.randn(3), "f64": torch.randn(2999).double(),
             "bool": torch.rand(4001) > 0.5, "zeros": torch.zeros(2100)}
    shared = torch.randn(30, 20)
    pt_only = {"tied.a": shared, "tied.b": shared}  # one tensor under two names (safetensors refuses it)
    path = tmp_path / "values.safetensors"
    save_file(state, path)
    pt = tmp_path / "values.pt"
    torch.save({**state, **pt_only}, pt)
    return path, pt


def test_small_tensors_are_grouped_and_large_ones_cut_into_blocks_of_whole_chunks():
    work = [Work(0, "a", 100), Work(1, "b", 100), Work(2, "big", 10_000, numel=2500), Work(3, "c", 300),
            Work(4, "whole", 9000)]
    tasks = cut(work, share=250, chunk_elems=100)
    assert (Piece(0, "a"), Piece(1, "b")) in tasks  # in order, closed before a share is passed
    assert (Piece(3, "c"),) in tasks
    blocks = [p for t in tasks for p in t if p.index == 2]
    assert all(len(t) == 1 for t in tasks if t[0].index == 2)
    assert blocks[0].start == 0 and blocks[-1].stop == 2500
    assert all(b.start % 100 == 0 for b in blocks)
    assert all(a.stop == b.start for a, b in zip(blocks, blocks[1:], strict=False))
    assert [p for t in tasks for p in t if p.index == 4] == [Piece(4, "whole")]  # not cut: not blockable
    assert sorted({p.index for t in tasks for p in t}) == [0, 1, 2, 3, 4]


def test_a_task_reads_a_share_giving_every_worker_several():
    assert task_bytes(1 << 40, 8) == (1 << 40) // 32
    assert task_bytes(1 << 20, 8) == sweep_plan.MIN_TASK_BYTES  # each task opens the file: never tiny ones


@pytest.mark.parametrize("which", [0, 1])
def test_statistics_from_blocks_equal_one_pass_bit_for_bit(values, small_tasks, which):
    ckpt = open_checkpoint(str(values[which]))
    entries = list(enumerate(ckpt.tensors()))
    sweep = _Here(slots=4)
    found = drain(sweep_stats.iter_stats(entries, str(values[which]), REMOTE, sweep, chunk_elems=CHUNK))
    tasks = sweep_stats.stats_tasks(entries, str(values[which]), REMOTE, 4, {}, CHUNK)
    cut_tensors = {p.index for t in tasks for p in t.pieces if not p.whole}
    if which == 0:  # safetensors: values stored plainly, so the large ones are read in blocks
        assert {entries[i][1].name for i in cut_tensors} >= {"f32", "bf16", "i64", "nan", "f64"}
    for i, entry in entries:
        want = tensor_stats(entry.info, chunk_elems=CHUNK)
        assert dataclasses.astuple(found[i]) == pytest.approx(dataclasses.astuple(want), rel=0, abs=0, nan_ok=True)
        assert repr(found[i]) == repr(want) and (found[i].m2, found[i].finite) == (want.m2, want.finite)
    ckpt.close()


def test_a_file_rewritten_after_planning_fails_its_task_as_changed(values, small_tasks, tmp_path):
    path = str(values[0])
    ckpt = open_checkpoint(path)
    entries = list(enumerate(ckpt.tensors()))
    tasks = sweep_stats.stats_tasks(entries, path, REMOTE, 4, {}, CHUNK)
    state = {e.name: torch.zeros(3) for _, e in entries}
    save_file(state, tmp_path / "other.safetensors")
    os.replace(tmp_path / "other.safetensors", path)
    with pytest.raises(TaskFailed) as caught:
        sweep_stats.measure_stats(tasks[0])
    assert caught.value.changed and "changed on disk since it was opened" in str(caught.value)
    again = pickle.loads(pickle.dumps(caught.value))  # as it crosses to the caller
    assert (type(again), str(again), again.changed) == (TaskFailed, str(caught.value), True)
    assert isinstance(again, CheckpointError)
    ckpt.close()


def test_a_task_of_a_path_the_worker_cannot_see_says_the_file_system_must_be_shared(values, small_tasks):
    ckpt = open_checkpoint(str(values[0]))
    entries = list(enumerate(ckpt.tensors()))
    task = dataclasses.replace(sweep_stats.stats_tasks(entries, str(values[0]), REMOTE, 1, {}, CHUNK)[0],
                               path="/nonexistent/values.safetensors")
    with pytest.raises(TaskFailed, match="must lie on a file system every worker shares"):
        sweep_stats.measure_stats(task)
    ckpt.close()


def _rows(result) -> list[dict]:
    return [{f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name not in ("info_a", "info_b")}
            for r in result.tensors]


def test_diff_rows_computed_by_tasks_equal_the_local_comparison(values, small_tasks, tmp_path):
    path_a = str(values[0])
    torch.manual_seed(4)
    with_b = {k: (v + 0.01 * torch.randn_like(v.float())).to(v.dtype) if v.is_floating_point() else v
              for k, v in torch.load(values[1], weights_only=True).items()}
    with_b["only_b"] = torch.ones(4)
    path_b = str(tmp_path / "b.pt")
    torch.save(with_b, path_b)
    a, b = open_checkpoint(path_a), open_checkpoint(path_b)
    local = diff_checkpoints(a, b)
    placed = plan_diff(a, b)
    sweep = _Here(slots=3)
    drain(compare_placed(placed, path_a, path_b, REMOTE, Placement(workers=1), sweep=sweep))
    assert sweep.report.tasks >= 2
    assert _rows(placed) == _rows(local)
    assert placed.to_json() == local.to_json()
    a.close()
    b.close()


def _digest(path: str) -> dict[str, str]:
    """Each file's SHA-256 (a folder's by name)."""
    paths = {n: os.path.join(path, n) for n in sorted(os.listdir(path))} if os.path.isdir(path) else {"": path}
    out = {}
    for name, one in paths.items():
        with open(one, "rb") as fh:
            out[name] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.mark.parametrize("fmt", ["npy", "npz", "safetensors"])
def test_an_export_written_by_tasks_is_the_same_bytes(values, small_tasks, tmp_path, fmt, monkeypatch):
    src = str(values[1])
    ckpt = open_checkpoint(src)
    out = {"npy": "npy/", "npz": "x.npz", "safetensors": "x.safetensors"}[fmt]
    plan = plan_export(select_tensors(ckpt), str(tmp_path / "one" / out))
    drain(run_export(plan))
    placed = plan_export(select_tensors(ckpt), str(tmp_path / "tasks" / out))
    monkeypatch.setattr(Sweep, "fans_out", property(lambda self: True))  # tasks, though run here
    result = drain(export_placed(ckpt, src, REMOTE, placed, Placement(workers=1)))
    assert result.bytes_written == plan.total_bytes
    assert _digest(str(tmp_path / "one" / out)) == _digest(str(tmp_path / "tasks" / out))
    folder = tmp_path / "tasks" / ("npy" if fmt == "npy" else "")
    assert [n for n in os.listdir(folder) if n.startswith(".ckptview")] == []  # no temporary file left
    if fmt == "npz":
        with np.load(tmp_path / "tasks" / out) as z:
            np.testing.assert_array_equal(z["i64"], np.arange(-2000, 2500))
    ckpt.close()

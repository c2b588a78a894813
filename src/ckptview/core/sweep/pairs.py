"""A comparison's figures as tasks: each task opens both checkpoints, plans the comparison again exactly as
the caller did (the same alignment, sections and rows), and fills in the figures of its rows with the
local comparison itself (`compare.diff.iter_compare`): every figure a row gets, today's and any a later
version computes per tensor, comes back with the row (Qt-free).

A tensor pair is never cut: its figures are one pass over both sides. Tasks group whole pairs by the
bytes they read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from ckptview.core.compare.diff import (
    DIFF_CHUNK_ELEMS,
    DiffProgress,
    DiffResult,
    TensorDiff,
    iter_compare,
    plan_diff,
)
from ckptview.core.compare.gguf_view import side_views
from ckptview.core.errors import FileChangedError
from ckptview.core.jobs import CancelToken, drain
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.sweep.plan import Work, cut, task_bytes
from ckptview.core.sweep.runner import Placement, Sweep
from ckptview.core.sweep.source import fingerprint, guarded, opened, task_path

_SIDES = ("info_a", "info_b")  # what a row holds of its checkpoints: never sent back


@dataclass(frozen=True)
class PairTask:
    """The figures of rows `rows` (named `names`) of the comparison of `path_a` with `path_b`, planned with
    `strip_a`, `strip_b` and `mapping` into `count` rows, as fingerprinted."""

    path_a: str
    path_b: str
    remote: RemoteOptions
    strip_a: str | None
    strip_b: str | None
    mapping: tuple[tuple[str, str], ...]
    count: int
    rows: tuple[int, ...]
    names: tuple[str, ...]
    fingerprint: str
    chunk_elems: int = DIFF_CHUNK_ELEMS


@dataclass
class PairsDone:
    """Each row's state after its figures were computed (every field but the two sides); the bytes read."""

    rows: list[dict[str, Any]]
    bytes_read: int


def _sides(rows: Sequence[TensorDiff]) -> str:
    infos = []
    for row in rows:
        assert row.info_a is not None and row.info_b is not None  # a row still to compare has both
        infos += [(row.name, row.info_a), (row.name, row.info_b)]
    return fingerprint(infos)


def _pair_bytes(row: TensorDiff) -> int:
    assert row.info_a is not None and row.info_b is not None
    return row.info_a.nbytes + row.info_b.nbytes


def compare_rows(task: PairTask) -> PairsDone:
    """What a worker runs: open both sides, plan as the caller did, compare the task's rows."""
    return guarded(lambda: _compare(task))


def _compare(task: PairTask) -> PairsDone:
    with opened(task.path_a, task.remote) as a, opened(task.path_b, task.remote) as b:
        result = plan_diff(a, b, task.strip_a, task.strip_b, task.mapping, side_views(a, b))  # as the caller planned
        rows = result.tensors
        if len(rows) != task.count or [rows[i].name for i in task.rows] != list(task.names):
            raise FileChangedError(f"{a.path} or {b.path}", "their tensors are not the ones they had")
        mine = [rows[i] for i in task.rows]
        if _sides(mine) != task.fingerprint:
            raise FileChangedError(f"{a.path} or {b.path}", "their tensors are not where they were")
        wanted = set(task.rows)
        for i, row in enumerate(rows):
            if i not in wanted:
                row.done = True  # another task's
        drain(iter_compare(result, None, task.chunk_elems))
        return PairsDone([{f.name: getattr(row, f.name) for f in dataclasses.fields(row) if f.name not in _SIDES}
                          for row in mine], sum(_pair_bytes(row) for row in mine))


def compare_placed(result: DiffResult, path_a: str, path_b: str, remote: RemoteOptions, placement: Placement,
                   strip_a: str | None = None, strip_b: str | None = None,
                   mapping: Sequence[tuple[str, str]] = (), token: CancelToken | None = None,
                   chunk_elems: int = DIFF_CHUNK_ELEMS,
                   sweep: Sweep | None = None) -> Generator[DiffProgress, None, DiffResult]:
    """Fill in the figures of every pending row of `result` (planned from `path_a` and `path_b` with `strip_a`,
    `strip_b`, `mapping`) where `placement` says: in this process (`iter_compare`, when the bytes do not pay
    for workers) or in tasks that each open both files. `sweep`: one already opened (its report is kept).
    As `iter_compare`, a progress's `index` is a row up to which every row has its figures (-1: none new)."""
    pending = [i for i, row in enumerate(result.tensors) if not row.done]
    total = sum(_pair_bytes(result.tensors[i]) for i in pending)
    own = sweep is None
    runner = Sweep(placement, total) if sweep is None else sweep
    try:
        if not runner.fans_out:
            return (yield from iter_compare(result, token, chunk_elems))
        work = [Work(i, result.tensors[i].name, _pair_bytes(result.tensors[i])) for i in pending]
        groups = cut(work, task_bytes(total, runner.slots), 1)
        tasks = [PairTask(task_path(path_a), task_path(path_b), remote, strip_a, strip_b, tuple(mapping),
                          len(result.tensors), tuple(p.index for p in pieces), tuple(p.name for p in pieces),
                          _sides([result.tensors[p.index] for p in pieces]), chunk_elems)
                 for pieces in groups]
        done = 0
        upto = -1  # every row up to this one has its figures (tasks finish in any order)
        yield DiffProgress(0, total, "comparing")
        for t, found in runner.run(compare_rows, tasks, token):
            for index, state in zip(tasks[t].rows, found.rows, strict=True):
                row = result.tensors[index]
                for key, value in state.items():
                    setattr(row, key, value)
            done += found.bytes_read
            runner.report.bytes_read += found.bytes_read
            first = upto
            while upto + 1 < len(result.tensors) and result.tensors[upto + 1].done:  # bounded: moves on, over rows
                upto += 1
            name = result.tensors[tasks[t].rows[-1]].name
            yield DiffProgress(min(done, total), total, name, upto if upto > first else -1)
        return result
    finally:
        if own:
            runner.close()

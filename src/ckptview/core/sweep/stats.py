"""Statistics of a checkpoint's tensors as tasks: each task opens the checkpoint and reads its pieces; the
caller merges the blocks of a tensor cut in several (Qt-free).

A whole tensor's figures are `figures.stats.tensor_stats`, the function the local listing calls; a block's
are the partial figures of its chunks (`iter_partial_summary`), merged in order (`merge_partials`): the
figures of one pass over the tensor, bit for bit.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

from ckptview.core.checkpoint import TensorEntry, TensorInfo
from ckptview.core.errors import TensorDataError
from ckptview.core.figures.stats import (
    DEFAULT_CHUNK_ELEMS,
    PartialSummary,
    TensorStats,
    iter_partial_summary,
    merge_partials,
    stored_part,
    tensor_stats,
)
from ckptview.core.jobs import CancelToken, Progress, drain
from ckptview.core.read.bytes.files import ReadAhead, read_ahead
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.values.reading import iter_chunks
from ckptview.core.sweep.plan import Piece, Work, blockable, cut, task_bytes
from ckptview.core.sweep.runner import Sweep
from ckptview.core.sweep.source import fingerprint, guarded, opened, pick

Found = TensorStats | str  # a tensor's statistics, or why its values cannot be read (one line)


@dataclass(frozen=True)
class StatsTask:
    """Statistics of `pieces` of the checkpoint at `path` (opened with `remote`), as fingerprinted."""

    path: str
    remote: RemoteOptions
    pieces: tuple[Piece, ...]
    fingerprint: str
    chunk_elems: int = DEFAULT_CHUNK_ELEMS


@dataclass
class StatsDone:
    """Per piece: a whole tensor's statistics, a block's partial figures, or an error; the bytes read."""

    found: list[TensorStats | PartialSummary | str]
    bytes_read: int


def block_info(info: TensorInfo, start: int, stop: int) -> TensorInfo:
    """Elements [start, stop) of a C-contiguous tensor, as a 1-D tensor over the same storage."""
    return TensorInfo(info.dtype, (stop - start,), (1,), info.offset + start, info.storage)


def measure_stats(task: StatsTask) -> StatsDone:
    """What a worker runs: open the checkpoint, check it is the one planned, read every piece."""
    return guarded(lambda: _measure(task))


def _measure(task: StatsTask) -> StatsDone:
    with opened(task.path, task.remote) as ckpt:
        indexes = list(dict.fromkeys(p.index for p in task.pieces))
        names = {p.index: p.name for p in task.pieces}
        infos = dict(zip(indexes, pick(ckpt, indexes, [names[i] for i in indexes], task.fingerprint), strict=True))
        return drain(read_ahead(lambda ahead: _pieces(task, infos, ahead)))


def _pieces(task: StatsTask, infos: dict[int, TensorInfo],
            ahead: ReadAhead) -> Generator[None, None, StatsDone]:
    found: list[TensorStats | PartialSummary | str] = []
    nbytes = 0
    for piece in task.pieces:
        info = infos[piece.index]
        try:
            if piece.stop is None:
                found.append(tensor_stats(info, chunk_elems=task.chunk_elems, ahead=ahead))
                nbytes += stored_part(info)[0].nbytes
            else:
                block = block_info(info, piece.start, piece.stop)
                found.append(drain(iter_partial_summary(iter_chunks(block, task.chunk_elems, ahead), block.numel)))
                nbytes += block.nbytes
        except TensorDataError as exc:  # this tensor's values cannot be read: its error, the others go on
            found.append(str(exc))
        yield None
    return StatsDone(found, nbytes)


def tensor_work(entries: Sequence[tuple[int, TensorEntry]],
                found: dict[int, Found]) -> list[Work]:
    """The reading each tensor needs (its stored part); one that cannot be read at all gets its error now."""
    work: list[Work] = []
    for index, entry in entries:
        try:
            part, weight = stored_part(entry.info)
        except TensorDataError as exc:
            found[index] = str(exc)
            continue
        numel = part.numel if weight == 1 and blockable(entry.info) else 0
        work.append(Work(index, entry.name, part.nbytes, numel))
    return work


def stats_tasks(entries: Sequence[tuple[int, TensorEntry]], path: str, remote: RemoteOptions, slots: int,
                found: dict[int, Found], chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> list[StatsTask]:
    """Tasks reading `entries` (index in `tensors()`, entry) of the checkpoint at `path` on `slots` workers."""
    work = tensor_work(entries, found)
    share = task_bytes(sum(w.nbytes for w in work), slots)
    infos = {index: entry.info for index, entry in entries}
    tasks = []
    for pieces in cut(work, share, chunk_elems):
        unique = list(dict.fromkeys((p.index, p.name) for p in pieces))
        tasks.append(StatsTask(path, remote, pieces, fingerprint([(name, infos[i]) for i, name in unique]),
                               chunk_elems))
    return tasks


def merge_found(tasks: Sequence[StatsTask], done: dict[int, StatsDone], found: dict[int, Found]) -> None:
    """Each tensor's statistics from its tasks' results: a whole tensor's as found, a cut one's blocks merged
    in order (an error in any block is the tensor's, the first block's first)."""
    blocks: dict[int, list[tuple[int, PartialSummary | str]]] = {}
    for t, task in enumerate(tasks):  # bounded: every piece once (the tensors the open paid for)
        for piece, result in zip(task.pieces, done[t].found, strict=True):
            if piece.stop is None:
                assert not isinstance(result, PartialSummary)
                found[piece.index] = result
            else:
                assert not isinstance(result, TensorStats)
                blocks.setdefault(piece.index, []).append((piece.start, result))
    for index, parts in blocks.items():
        parts.sort(key=lambda p: p[0])
        errors = [r for _, r in parts if isinstance(r, str)]
        found[index] = errors[0] if errors else merge_partials([r for _, r in parts if not isinstance(r, str)]).stats


def iter_stats(entries: Sequence[tuple[int, TensorEntry]], path: str, remote: RemoteOptions, sweep: Sweep,
               token: CancelToken | None = None,
               chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> Generator[Progress, None, dict[int, Found]]:
    """Statistics of `entries` of the checkpoint at `path`, read where `sweep` runs its tasks; yields progress
    in bytes as tasks finish, returns each tensor's statistics (or its error) by index: those
    `tensor_stats(info, chunk_elems=chunk_elems)` gives."""
    found: dict[int, Found] = {}
    tasks = stats_tasks(entries, path, remote, sweep.slots, found, chunk_elems)
    done: dict[int, StatsDone] = {}
    total = sum(w.nbytes for w in tensor_work(entries, {})) or 1
    read = 0
    yield Progress(0, total, "statistics")
    for i, result in sweep.run(measure_stats, tasks, token):
        done[i] = result
        read += result.bytes_read
        sweep.report.bytes_read += result.bytes_read
        yield Progress(min(read, total), total, "statistics")
    merge_found(tasks, done, found)
    return found

"""An export as tasks: each task opens the checkpoint and writes its tensors' bytes where the caller laid
them out (`export.placed`); the files are those one process writes, byte for byte (Qt-free).

The output folder must lie on a file system every worker shares: a task opens the temporary file the
caller made there, and one it cannot find is a clear error (never a file made elsewhere).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.export.placed import Place, Written, placed_writer, write_item
from ckptview.core.export.plan import (
    EXPORT_CHUNK_ELEMS,
    ExportItem,
    ExportPlan,
    ExportResult,
    np_dtype_of,
    run_export,
)
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.sweep.plan import Work, cut, task_bytes
from ckptview.core.sweep.runner import Placement, Sweep
from ckptview.core.sweep.source import TaskFailed, fingerprint, guarded, opened, pick, task_path


@dataclass(frozen=True)
class Entry:
    """One tensor to write: its position in `tensors()` and name, the dtype written, whether it is written
    expanded (a view that repeats its storage), and where its bytes go."""

    index: int
    name: str
    dtype: str
    expand: bool
    place: Place


@dataclass(frozen=True)
class WriteTask:
    """Write `entries` of the checkpoint at `path` into the export's files of format `fmt`."""

    path: str
    remote: RemoteOptions
    fmt: str
    entries: tuple[Entry, ...]
    fingerprint: str
    chunk_elems: int = EXPORT_CHUNK_ELEMS


def write_entries(task: WriteTask) -> list[Written]:
    """What a worker runs: open the checkpoint, check it is the one planned, write each entry at its place."""
    return guarded(lambda: _write(task))


def _write(task: WriteTask) -> list[Written]:
    with opened(task.path, task.remote) as ckpt:
        infos = pick(ckpt, [e.index for e in task.entries], [e.name for e in task.entries], task.fingerprint,
                     with_parts=True)  # an export writes a quantized weight's stored parts, or its logical tensor
        out: list[Written] = []
        for entry, info in zip(task.entries, infos, strict=True):
            item = ExportItem(entry.name, info, "", entry.dtype, np_dtype_of(entry.dtype), expand=entry.expand)
            try:
                nbytes, crc = write_item(item, task.fmt, entry.place, task.chunk_elems)
            except FileNotFoundError:
                raise TaskFailed(f"cannot write {entry.place.path}: the export's folder must lie on a file system "
                                 "every worker shares") from None
            out.append((entry.place.item, nbytes, crc))
        return out


def _tasks(ckpt: Checkpoint, path: str, remote: RemoteOptions, plan: ExportPlan, places: Sequence[Place],
           slots: int, chunk_elems: int) -> list[WriteTask]:
    # By name and tensor: a tied weight is one TensorInfo under two names (each written under its own).
    # A quantized weight's stored parts are exported as they are: indexes in the listing with the parts.
    index = {(entry.name, id(entry.info)): i for i, entry in enumerate(ckpt.tensors(with_parts=True))}
    work = [Work(p.item, plan.items[p.item].name, plan.items[p.item].nbytes) for p in places]
    by_item = {p.item: p for p in places}
    tasks = []
    for pieces in cut(work, task_bytes(plan.total_bytes, slots), 1):
        items = [plan.items[p.index] for p in pieces]
        entries = tuple(Entry(index[item.name, id(item.info)], item.name, item.dtype, item.expand, by_item[p.index])
                        for p, item in zip(pieces, items, strict=True))
        tasks.append(WriteTask(task_path(path), remote, plan.format, entries,
                               fingerprint([(item.name, item.info) for item in items]), chunk_elems))
    return tasks


def export_placed(ckpt: Checkpoint, path: str, remote: RemoteOptions, plan: ExportPlan, placement: Placement, *,
                  force: bool = False, token: CancelToken | None = None,
                  chunk_elems: int = EXPORT_CHUNK_ELEMS) -> Generator[Progress, None, ExportResult]:
    """Run the export `plan` of `ckpt` (opened from `path`) where `placement` says: in this process
    (`run_export`, when the bytes do not pay for workers), or in tasks that each open the checkpoint and
    write their tensors into the files laid out here."""
    with Sweep(placement, plan.total_bytes) as sweep:
        if not sweep.fans_out or not plan.items:
            return (yield from run_export(plan, force=force, token=token, chunk_elems=chunk_elems))

        def write(places: list[Place]) -> Iterator[Written]:
            tasks = _tasks(ckpt, path, remote, plan, places, sweep.slots, chunk_elems)
            for _, written in sweep.run(write_entries, tasks, token):
                for one in written:
                    sweep.report.bytes_read += plan.items[one[0]].info.nbytes
                    yield one

        return (yield from run_export(plan, force=force, token=token, chunk_elems=chunk_elems,
                                      writer=placed_writer(write)))

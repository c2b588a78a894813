"""The per-checkpoint work of a run's timeline as plain tasks (Qt-free, no torch), run where
`ckptview.core.cluster` runs tasks: in this process, on a local pool, or on Dask.

A task is a *chain* of consecutive checkpoints (in run order) and a group of tensor names. It is a pure
function of its arguments (:func:`measure_chain`): it opens each checkpoint itself (a local path on
shared storage or a URL) and sends back only the figures, so it runs unchanged in this process, in a
local process pool or on a Dask worker.

Each checkpoint's bytes are read once. For one tensor, the chain is walked *piece by piece*: piece k of
checkpoint 0, then piece k of checkpoint 1 (compared with the piece of checkpoint 0 still in hand), ...,
then piece k+1. Every checkpoint's figures and the sums of its update from the one before come out of
that one pass, holding two pieces at a time whatever the chain's length (three when a second core
compares each pair beside the reading thread). Only a chain's first checkpoint
may be read twice: when it is there only as the "previous" side of a pair whose own figures are known
(a run split into segments for parallel workers, or a new checkpoint of a live run compared with the last
one). The figures do not depend on how the run was cut: pieces are always cut at the same element
boundaries, so every executor returns the same numbers.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptview.core.checkpoint import Checkpoint, TensorInfo
from ckptview.core.cluster import tasks as cluster_tasks
from ckptview.core.cluster.local import LocalPool, default_workers
from ckptview.core.compare.diff import Sums, compare_arrays, repeated_sums
from ckptview.core.errors import Cancelled, CheckpointError, FileChangedError, TensorDataError
from ckptview.core.figures.spectral import iter_spectrum, matrix_of
from ckptview.core.figures.stats import Summary, iter_summary, stored_part
from ckptview.core.jobs import CancelToken, drain
from ckptview.core.read.bytes.remote.options import DEFAULT as DEFAULT_REMOTE
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.values.reading import iter_chunks
from ckptview.core.read.values.repeats import reading_layout
from ckptview.core.series import timeline as series
from ckptview.core.series.cache import file_key
from ckptview.core.series.model import TensorFigures

if TYPE_CHECKING:
    import numpy as np

TaskResult = list["CheckpointFigures"]


@dataclass(frozen=True)
class ChainTask:
    """Consecutive checkpoints of a run, and the tensors to measure in them (None: every tensor)."""

    paths: tuple[str, ...]
    names: tuple[str, ...] | None
    chunk_elems: int
    first_is_previous: bool = False  # paths[0] is only there as the "previous" side of paths[1]
    spectral: bool = False  # also the alpha and stable rank of each 2-D weight (spectral.matrix_of)
    remote: RemoteOptions = DEFAULT_REMOTE  # how URLs are read (travels with the task to its worker)


@dataclass
class CheckpointFigures:
    """What a task found for one checkpoint of its chain."""

    path: str
    key_before: str | None = None  # the file's identity (series_cache.file_key) before and after reading
    key_after: str | None = None
    error: str | None = None  # it could not be opened (or read at all), and why
    changed: str | None = None  # it changed on disk while it was read (the message), its figures not to be used
    tensors: dict[str, TensorFigures] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------
# The pure function.


def measure_chain(task: ChainTask, token: CancelToken | None = None,
                  key_of: Callable[[str], str | None] | None = None) -> TaskResult:
    """Figures of every tensor of ``task`` in every checkpoint of its chain (see the module docstring)."""
    return drain(iter_measure_chain(task, token, key_of))


def iter_measure_chain(task: ChainTask, token: CancelToken | None = None,
                       key_of: Callable[[str], str | None] | None = None) -> Generator[int, None, TaskResult]:
    """:func:`measure_chain` as a generator that yields the number of bytes read since its last yield.

    Checkpoints are opened, named and checked as :func:`ckptview.core.series.timeline.iter_series` does
    (its ``open_checkpoint``, ``series_entries``, messages and changed-on-disk check): one checkpoint that
    fails to open, or changes while it is read, is that checkpoint's error; the others are still read."""
    if key_of is None:
        def key_of(path: str) -> str | None:
            return file_key(path, task.chunk_elems, task.remote)

    out = [CheckpointFigures(p) for p in task.paths]
    opened: list[Checkpoint | None] = []
    infos: list[dict[str, TensorInfo]] = []
    try:
        for fig in out:
            fig.key_before = _safe_key(key_of, fig.path)
            ckpt: Checkpoint | None = None
            try:
                ckpt = series.open_checkpoint(fig.path, task.remote)
                infos.append(_by_name(ckpt))
            except Cancelled:
                if ckpt is not None:
                    ckpt.close()
                raise
            except Exception as exc:  # noqa: BLE001 - one checkpoint failing is its error, the rest still read
                if ckpt is not None:
                    ckpt.close()
                    ckpt = None
                fig.error = series.error_message(exc)
                infos.append({})
            opened.append(ckpt)
        names: list[str] = list(task.names) if task.names is not None else _union(infos)
        # Not through read_ahead: its windows (a megabyte after each small read, four files at a time)
        # would be read for every tensor of a chain longer than four, and re-read the tensors' bytes.
        yield from _measure_all(names, infos, out, token, task.chunk_elems)
        if task.spectral:
            skip = 1 if task.first_is_previous else 0
            yield from _measure_spectra(names, infos[skip:], out[skip:], token)
        for fig, ckpt in zip(out, opened, strict=True):
            if ckpt is not None and fig.changed is None:
                fig.changed = series.check_unchanged(ckpt, fig.path)
    finally:
        for ckpt in opened:
            if ckpt is not None:
                ckpt.close()
    for fig in out:
        fig.key_after = _safe_key(key_of, fig.path)
        if fig.changed is None and fig.error is None and fig.key_after != fig.key_before:
            fig.changed = series.changed_message("rewritten")
        if fig.changed is not None:
            fig.tensors = {}  # not the file that was opened: none of its figures is kept
    if task.first_is_previous and out:
        out[0].tensors = {}  # its own figures are known; only the pair sums of out[1] were wanted
    return out


def _safe_key(key_of: Callable[[str], str | None], path: str) -> str | None:
    try:
        return key_of(path)
    except (CheckpointError, OSError):
        return None


def _union(infos: list[dict[str, TensorInfo]]) -> list[str]:
    seen: dict[str, None] = {}
    for by_name in infos:
        for name in by_name:
            seen.setdefault(name, None)
    return list(seen)


def _by_name(ckpt: Checkpoint) -> dict[str, TensorInfo]:
    out: dict[str, TensorInfo] = {}
    for name, info, _ in series.series_entries(ckpt):
        out.setdefault(name, info)  # the first, if a name repeats (as Checkpoint.tensor)
    return out


def _measure_all(names: Iterable[str], infos: list[dict[str, TensorInfo]], out: list[CheckpointFigures],
                 token: CancelToken | None, chunk_elems: int) -> Generator[int, None, None]:
    # A second core (no process to start: a thread, numpy releases the GIL) compares each pair of pieces
    # while this thread reads the next checkpoint's piece and counts its figures; the same arithmetic
    # in the same order, so the same figures. Its only cost: a third piece in hand.
    helper = _Helper() if default_workers() > 1 and len(infos) > 1 else None
    try:
        for name in names:
            if token is not None:
                token.check()
            yield from _measure_tensor(name, infos, out, token, chunk_elems, helper)
    finally:
        if helper is not None:
            helper.close()


class _Helper:
    """One thread that compares pairs of pieces (`compare_arrays`) beside the reading thread."""

    def __init__(self) -> None:
        import concurrent.futures as cf

        self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix="ckptview-series-compare")

    def submit(self, a: np.ndarray, b: np.ndarray) -> Any:
        return self._pool.submit(compare_arrays, a, b, max(b.size, 1))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class _Lane:
    """One checkpoint's copy of a tensor: fixed-size pieces in, a streamed Summary out."""

    def __init__(self, info: TensorInfo, chunk_elems: int, block: int, token: CancelToken | None) -> None:
        self.info = info
        self.shape = tuple(info.shape)
        # A view that repeats its storage: its stored part, each value counted `weight` times; paired with
        # the previous lane only when that one is read the same way (`repeats.reading_layout`).
        part, self.weight = stored_part(info)
        self.layout = reading_layout(info)
        self.error: str | None = None
        self.changed = False  # its file changed on disk while it was read
        self.summary: Summary | None = None
        # Read in blocks smaller than a piece: a suspended reader holds its last block, and a chain has a
        # reader per checkpoint. The pieces are always cut at chunk_elems (the figures do not change).
        self._pieces = _recut(iter_chunks(part, block), chunk_elems)
        self._box: deque[np.ndarray] = deque()
        self._stats = iter_summary(self._fed(), part.numel, token, self.weight)
        self.done = False

    def _fed(self) -> Iterator[np.ndarray]:
        while self._box:
            yield self._box.popleft()

    def next_piece(self) -> np.ndarray | None:
        """The next piece of values (already counted in this lane's statistics), or None at the end."""
        if self.done:
            return None
        try:
            piece = next(self._pieces, None)
        except (CheckpointError, OSError, ValueError) as exc:
            self.error, self.done = series.error_message(exc), True
            self.changed = isinstance(exc, FileChangedError)
            return None
        if piece is None:
            self._finish()
            return None
        self._box.append(piece)
        # The summary's frame holds the last value it saw: hand it an empty one (no change to any figure)
        # so that no lane keeps a piece while the others are read.
        self._box.append(piece[:0].copy())
        with contextlib.suppress(StopIteration):  # not raised: the summary ends only on an empty box
            next(self._stats)
            next(self._stats)
        return piece

    def _finish(self) -> None:
        self.done = True
        try:
            next(self._stats)
        except StopIteration as stop:
            self.summary = stop.value


def _recut(chunks: Iterable[np.ndarray], size: int) -> Iterator[np.ndarray]:
    """The values of ``chunks`` as 1-D pieces of exactly ``size`` elements (the last may be shorter)."""
    import numpy as np

    held: list[np.ndarray] = []
    count = 0
    for chunk in chunks:
        flat = np.asarray(chunk).reshape(-1)
        del chunk  # while suspended, hold no more than the rest of this block
        while flat.size:
            take = min(size - count, flat.size)
            held.append(flat[:take])
            count += take
            flat = flat[take:]
            if count == size:
                count = 0
                yield _take(held)  # no local keeps the piece while this generator is suspended
    if count:
        yield _take(held)


def _take(held: list[np.ndarray]) -> np.ndarray:
    """The parts in ``held`` as one array; ``held`` is left empty."""
    import numpy as np

    piece = held[0] if len(held) == 1 else np.concatenate(held)
    held.clear()
    return piece


def _measure_tensor(name: str, infos: list[dict[str, TensorInfo]], out: list[CheckpointFigures],
                    token: CancelToken | None, chunk_elems: int,
                    helper: _Helper | None = None) -> Generator[int, None, None]:
    lanes: list[_Lane | None] = []
    block = min(chunk_elems, max(MIN_BLOCK, chunk_elems // max(1, len(infos))))
    for i, by_name in enumerate(infos):
        info = by_name.get(name)
        if info is None or out[i].error is not None or info.storage is None and not info.broken:
            lanes.append(None)  # absent, unreadable checkpoint, or saved without data (meta)
            continue
        try:
            lanes.append(_Lane(info, chunk_elems, block, token))
        except (CheckpointError, OSError, ValueError) as exc:
            out[i].tensors[name] = TensorFigures(error=series.error_message(exc))
            lanes.append(None)
    paired = [i > 0 and lanes[i] is not None and lanes[i - 1] is not None
              and lanes[i].shape == lanes[i - 1].shape  # type: ignore[union-attr]
              and lanes[i].layout == lanes[i - 1].layout for i, _ in enumerate(lanes)]  # type: ignore[union-attr]
    sums = [Sums() if p else None for p in paired]
    pending: tuple[int, Any] | None = None  # (lane, its pair's sums being computed by the helper)

    def collect() -> None:
        nonlocal pending
        if pending is not None:
            k, job = pending
            pending = None
            part = job.result()
            pair, lane_k = sums[k], lanes[k]
            weight = lane_k.weight if lane_k is not None else 1
            if pair is not None:
                pair.add(part if weight == 1 else repeated_sums(part, weight))

    try:
        while any(lane is not None and not lane.done for lane in lanes):
            if token is not None:
                token.check()
            previous: np.ndarray | None = None
            nbytes = 0
            for i, lane in enumerate(lanes):
                piece = lane.next_piece() if lane is not None else None
                nbytes += piece.nbytes if piece is not None else 0
                pair = sums[i]
                if pair is not None:
                    if piece is not None and previous is not None and piece.size == previous.size:
                        if helper is None:
                            part = compare_arrays(previous, piece, max(piece.size, 1))
                            weight = lane.weight if lane is not None else 1
                            pair.add(part if weight == 1 else repeated_sums(part, weight))
                        else:
                            collect()  # the pair before, in order: each pair's sums add up piece by piece
                            pending = (i, helper.submit(previous, piece))
                    elif piece is not None or previous is not None:  # one side ended early or failed
                        sums[i] = None
                previous = piece
            collect()
            yield nbytes
    finally:
        if pending is not None:
            pending[1].cancel()
    for i, lane in enumerate(lanes):
        if lane is None:
            continue
        before = lanes[i - 1] if i > 0 else None
        if lane.changed and out[i].changed is None:
            out[i].changed = lane.error
        if lane.error is not None or lane.summary is None:
            out[i].tensors[name] = TensorFigures(error=lane.error or "cannot read values")
            continue
        ok_before = before is not None and before.error is None and before.summary is not None
        out[i].tensors[name] = TensorFigures(lane.summary.stats, sums=sums[i] if ok_before else None)


def _measure_spectra(names: list[str], infos: list[dict[str, TensorInfo]], out: list[CheckpointFigures],
                     token: CancelToken | None) -> Generator[int, None, None]:
    """The alpha and stable rank of every 2-D weight read without error (``spectral.spectrum`` of the
    tensor alone: the same numbers whichever executor runs the task). A spectrum that cannot be computed
    (NaN values, a matrix too large) leaves both None; the tensor's own figures say what is wrong."""
    import numpy as np

    for fig, by_name in zip(out, infos, strict=True):
        if fig.error is not None or fig.changed is not None:
            continue
        for name in names:
            info, tf = by_name.get(name), fig.tensors.get(name)
            if info is None or tf is None or tf.stats is None:
                continue
            tf.spectral = True
            if matrix_of(info) is not None:
                try:
                    found = drain(iter_spectrum(info, token))
                    tf.alpha, tf.stable_rank = found.alpha, found.stable_rank
                except (TensorDataError, CheckpointError, OSError, ValueError, np.linalg.LinAlgError):
                    pass
            yield info.nbytes  # progress: a spectral run counts each tensor's bytes twice (read, fitted)


# ---------------------------------------------------------------------------------------------------
# Cutting a run into tasks.

MIN_SEGMENT = 16  # checkpoints per segment when a run is cut along its length: at most 1/16 read twice
MAX_CHAIN = 64  # checkpoints per task: each holds a reader and a summary (a 16-bit one: a 512 KiB table)
MIN_BLOCK = 1 << 14  # elements per read of a lane (64 KiB of float32)


def plan_tasks(chains: list[list[str]], first_is_previous: list[bool], names: list[tuple[str, int]],
               workers: int, chunk_elems: int, spectral: bool = False,
               remote: RemoteOptions = DEFAULT_REMOTE) -> list[tuple[int, int, ChainTask]]:
    """Tasks for ``chains`` (runs of consecutive checkpoints still to measure) on ``workers`` workers.

    ``names`` are the run's tensors with their sizes in bytes. A long chain is cut into segments of at
    least MIN_SEGMENT checkpoints; the tensors are cut into groups of similar size so that every worker
    has work. One worker: one task per chain, every byte read once. Returns (chain number, offset of the
    task's first path in that chain, task).
    """
    target = max(1, workers * 2) if workers > 1 else 1
    tasks: list[tuple[int, int, ChainTask]] = []
    for c, (chain, first_prev) in enumerate(zip(chains, first_is_previous, strict=True)):
        segments = max(1, min(target, len(chain) // MIN_SEGMENT)) if workers > 1 else 1
        segments = max(segments, math.ceil(len(chain) / MAX_CHAIN))
        groups = _groups(names, max(1, math.ceil(target / segments))) if workers > 1 else [None]
        bounds = [round(k * len(chain) / segments) for k in range(segments + 1)]
        for k in range(segments):
            start, stop = bounds[k], bounds[k + 1]
            prev = start > 0
            offset = start - 1 if prev else start
            for group in groups:
                tasks.append((c, offset, ChainTask(tuple(chain[offset:stop]), group, chunk_elems,
                                                   prev or first_prev and start == 0, spectral, remote)))
    return tasks


def _groups(names: list[tuple[str, int]], count: int) -> list[tuple[str, ...] | None]:
    """Tensor names cut into at most ``count`` groups of similar total size (largest first)."""
    if count <= 1 or len(names) <= 1:
        return [None]
    count = min(count, len(names))
    bins: list[list[str]] = [[] for _ in range(count)]
    loads = [0] * count
    for name, size in sorted(names, key=lambda ns: -ns[1]):
        k = loads.index(min(loads))
        bins[k].append(name)
        loads[k] += max(size, 1)
    return [tuple(b) for b in bins if b]


def run_tasks(tasks: list[ChainTask], workers: int = 1, scheduler: Any = None,
              token: CancelToken | None = None,
              pool: LocalPool | None = None) -> Generator[tuple[int, TaskResult] | int, None, None]:
    """Measure ``tasks`` where `ckptview.core.cluster.run_tasks` runs them: on Dask (``scheduler``), on a
    local pool of ``workers`` processes (``pool`` when kept), or here; yields (task index, result) as each
    finishes, and the bytes read as they are read by tasks run in this process (an int)."""
    return cluster_tasks.run_tasks(measure_chain, tasks, workers, scheduler, token, pool, iter_measure_chain)

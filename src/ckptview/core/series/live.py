"""A run's timeline kept up to date: planned from the cache, measured on an executor (Qt-free, no torch).

:class:`LiveRun` holds the checkpoints of a run (those present, and those that were and are gone) with
what is known of each: its planning facts (format, step/epoch, tensor list) and figures, from memory,
from the SQLite cache (:mod:`ckptview.core.series.cache`) or measured by tasks on an executor
(:mod:`ckptview.core.series.executor`). :meth:`LiveRun.update` measures what is missing and
returns a :class:`SeriesResult`, the same object ``ckptview series --json`` prints; :meth:`LiveRun.events`
says what changed since the last call, one JSON object per checkpoint (the ``--watch`` contract).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.cluster.local import BYTES_PER_WORKER, LocalPool, choose_workers, default_workers
from ckptview.core.cluster.scheduler import cluster_threads, connect
from ckptview.core.compare.diff import Sums
from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.figures.stats import Summary
from ckptview.core.jobs import CancelToken, drain
from ckptview.core.read.bytes.remote.options import DEFAULT as DEFAULT_REMOTE
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.series.cache import SeriesCache, file_key, location
from ckptview.core.series.discover import Position, choose_order, find_checkpoints, find_position
from ckptview.core.series.executor import plan_tasks, run_tasks
from ckptview.core.series.findings import find_findings
from ckptview.core.series.log_files import read_run_log
from ckptview.core.series.logged import RunLog
from ckptview.core.series.model import (
    CheckpointRef,
    SeriesProgress,
    SeriesResult,
    TensorFigures,
    TensorSeries,
)
from ckptview.core.series.scalars import ref_scalars
from ckptview.core.series.timeline import (
    SERIES_CHUNK_ELEMS,
    Measure,
    changed_message,
    error_message,
    merge_names,
    name_position,
    none_readable,
    open_checkpoint,
    plan_series,
    record_figures,
    series_entries,
    sort_key,
)

Row = tuple[str, tuple[int, ...], str, str | None]  # name, shape, dtype, parameter (optimizer state)
POOL_MIN_BYTES = BYTES_PER_WORKER  # bytes to read per local worker (cluster.choose_workers)


@dataclass
class Entry:
    """One checkpoint of the run and what is known of it."""

    path: str
    key: str | None = None
    ref: CheckpointRef | None = None
    rows: list[Row] = field(default_factory=list)
    own: dict[str, TensorFigures] | None = None  # its figures per tensor
    pair: dict[str, Sums] | None = None  # its update sums from pair_prev
    pair_prev: str | None = None  # the key of the checkpoint those sums were measured against
    gone: bool = False
    hold: bool = False  # being rewritten: shown as last read until it settles (a watch)


class LiveRun:
    """A run's checkpoints and their figures; ``update()`` measures only what is not known yet."""

    def __init__(self, paths: list[str], *, cache: SeriesCache | None = None, workers: int | None = None,
                 scheduler: Any = None, chunk_elems: int = SERIES_CHUNK_ELEMS, stall_threshold: float = 0.0,
                 explode_factor: float = 10.0, spectral: bool = False,
                 remote: RemoteOptions = DEFAULT_REMOTE) -> None:
        self.paths = list(paths)
        self.remote = remote  # how its URLs are listed and read (the command line's --download, ...)
        self.spectral = spectral  # also each 2-D weight's alpha and stable rank (series --spectral)
        self.cache = cache
        self.requested = workers  # the user's --workers (None: chosen per update by cluster.choose_workers)
        self.workers = workers if workers is not None else default_workers()  # a watch's kept pool, at most
        self.scheduler = scheduler
        self.chunk_elems = max(1, int(chunk_elems))
        self.stall_threshold, self.explode_factor = stall_threshold, explode_factor
        self.entries: dict[str, Entry] = {}  # by location, in the order first seen
        self.result: SeriesResult | None = None
        self._order: list[Entry] = []
        self._emitted: dict[str, dict[str, Any]] = {}
        # Locations of checkpoints that changed on disk while the last update read them: their error
        # stands in that update's result, but a watch reads them again instead of reporting them.
        self.retry: set[str] = set()
        self.pool: LocalPool | None = None  # set (keep_workers) to keep worker processes between updates
        self._client: Any = None  # a Dask client this run connected itself

    def keep_workers(self) -> None:
        """Keep the local worker processes between updates (a watch), until close()."""
        if self.pool is None and self.scheduler is None and self.workers > 1:
            self.pool = LocalPool(self.workers)

    def close(self) -> None:
        """Stop kept worker processes, and the connection to a Dask scheduler given by its address."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def _executor(self) -> tuple[Any, int]:
        """(the Dask client or None, how many tasks run at once)."""
        if self.scheduler is None:
            return None, self.workers
        if isinstance(self.scheduler, str):
            if self._client is None:
                self._client = connect(self.scheduler)
            client = self._client
        else:
            client = self.scheduler
        return client, cluster_threads(client)

    # --- what is there ----------------------------------------------------------------------------
    def set_present(self, paths: list[str]) -> None:
        """The checkpoints present now (in any order); others known before are marked gone."""
        seen: set[str] = set()
        for path in paths:
            loc = location(path)
            seen.add(loc)
            entry = self.entries.get(loc)
            if entry is None:
                self.entries[loc] = Entry(path)
            elif entry.gone:
                entry.gone = False
                entry.key = None  # it came back: what it holds now is checked again
        for loc, entry in self.entries.items():
            if loc not in seen:
                entry.gone = True

    def discover(self) -> None:
        """Find the checkpoints named by the run's paths (folders expanded, globs matched)."""
        self.set_present(find_checkpoints(self.paths, self.remote))

    # --- measuring --------------------------------------------------------------------------------
    def update(self, token: CancelToken | None = None) -> Generator[SeriesProgress, None, SeriesResult]:
        """Plan every present checkpoint, measure what is missing; yields progress, returns the result."""
        self.retry = set()
        present = [e for e in self.entries.values() if not e.gone]
        for entry in present:
            if token is not None:
                token.check()
            if not (entry.hold and entry.ref is not None):
                self._plan(entry)
        readable = [e for e in self.entries.values() if e.ref is not None and e.ref.error is None]
        if not readable:
            refs = [e.ref for e in self.entries.values() if e.ref is not None]
            if not refs:
                raise CheckpointError("no checkpoint found")
            raise none_readable(refs)
        order_by = choose_order([e.ref.position for e in readable])  # type: ignore[union-attr]
        ordered = sorted((e for e in self.entries.values() if e.ref is not None),
                         key=lambda e: sort_key(e.ref, order_by))  # type: ignore[arg-type]
        self._order = ordered
        yield from self._measure(ordered, token)
        log = read_run_log(self.paths, [e.path for e in ordered if not e.gone], self.remote, token)
        result = self._assemble(ordered, order_by, log)
        self.result = result
        return result

    def _plan(self, entry: Entry) -> None:
        path = entry.path
        if "://" not in path and not os.path.isdir(path) and not os.path.isfile(path):
            entry.key, entry.ref, entry.rows = None, _error_ref(path, "not a regular file (a FIFO, socket or "
                                                                       "device is never opened)"), []
            return
        try:
            key = file_key(path, self.chunk_elems, self.remote)
        except (CheckpointError, OSError) as exc:
            entry.key, entry.ref, entry.rows = None, _error_ref(path, error_message(exc)), []
            return
        if key == entry.key and entry.ref is not None:
            return
        entry.key, entry.own, entry.pair, entry.pair_prev = key, None, None, None
        meta = self.cache.meta(key) if self.cache is not None else None
        if meta is not None:
            loaded = _from_meta(path, meta)
            if loaded is not None:
                entry.ref, entry.rows = loaded
                return
        entry.ref, entry.rows = _open_meta(path, self.remote)
        if self.cache is not None and entry.ref.error is None:
            self.cache.put_meta(key, path, _to_meta(entry.ref, entry.rows))

    def _needs(self, ordered: list[Entry]) -> tuple[set[int], set[int]]:
        """(indexes whose own figures are missing, indexes whose update from the one before is missing)."""
        own: set[int] = set()
        pair: set[int] = set()
        for t, e in enumerate(ordered):
            if e.gone or e.key is None or e.ref is None or e.ref.error is not None:
                continue
            if e.own is None and self.cache is not None:
                e.own = self.cache.figures(e.key)
            if e.own is not None and self.spectral and any(tf.stats is not None and not tf.spectral
                                                           for tf in e.own.values()):
                e.own = None  # known without spectra: read again with them
            if e.own is None:
                own.add(t)
            before = ordered[t - 1] if t > 0 else None
            if before is None or before.key is None or before.ref is None or before.ref.error is not None:
                e.pair, e.pair_prev = None, None
                continue
            if e.pair_prev == before.key and e.pair is not None:
                continue
            cached = self.cache.pair(before.key, e.key) if self.cache is not None else None
            if cached is not None:
                e.pair, e.pair_prev = cached, before.key
            elif before.gone:
                e.pair, e.pair_prev = None, None  # cannot be measured any more
            else:
                pair.add(t)
        return own, pair

    def _measure(self, ordered: list[Entry], token: CancelToken | None) -> Generator[SeriesProgress, None, None]:
        own, pair = self._needs(ordered)
        reads = sorted(own | pair | {t - 1 for t in pair})
        chains: list[list[int]] = []
        for t in reads:
            if chains and chains[-1][-1] == t - 1:
                chains[-1].append(t)
            else:
                chains.append([t])
        if not chains:
            return
        sizes: dict[str, int] = {}
        for e in ordered:
            for name, shape, _, _ in e.rows:
                sizes[name] = max(sizes.get(name, 0), math.prod(shape))
        first_prev = [c[0] not in own and c[0] + 1 in pair for c in chains]
        passes = 2 if self.spectral else 1  # progress: the bytes read, then (--spectral) those fitted
        total = passes * sum(_nbytes(ordered[t]) for t in reads) or 1
        client, workers = self._executor()
        if client is None:  # in this process unless the run is large enough to pay for starting workers
            workers = min(self.workers, choose_workers(total, self.requested, per_worker=POOL_MIN_BYTES))
        planned = plan_tasks([[ordered[t].path for t in c] for c in chains], first_prev, list(sizes.items()),
                             1 if client is None and workers <= 1 else max(workers, 2), self.chunk_elems,
                             self.spectral, self.remote)
        tasks = [task for _, _, task in planned]
        task_chain = [chains[c][offset:offset + len(task.paths)] for c, offset, task in planned]
        shares = {id(task): sum(1 for _, _, other in planned if other.paths == task.paths) for task in tasks}
        done = 0
        fresh_own: dict[int, dict[str, TensorFigures]] = {}
        fresh_pair: dict[int, dict[str, Sums]] = {}
        bad: set[int] = set()
        yield SeriesProgress(0, total, "reading")
        streamed = 0
        for item in run_tasks(tasks, workers if client is None else 0, client, token, self.pool):
            if isinstance(item, int):  # bytes just read by a task in this process
                streamed += item
                yield SeriesProgress(min(max(done, streamed), total), total, "reading")
                continue
            i, figures = item
            task, indexes = tasks[i], task_chain[i]
            for j, (t, fig) in enumerate(zip(indexes, figures, strict=True)):
                entry = ordered[t]
                changed = fig.changed
                if changed is None and fig.error is None and (fig.key_before != entry.key
                                                              or fig.key_after != entry.key):
                    changed = changed_message("rewritten")  # since it was planned
                error = fig.error or changed
                if changed is not None and fig.error is None:
                    self.retry.add(location(entry.path))
                if error is not None:
                    # As iter_series: that checkpoint's error (a finding), its figures and the update
                    # measured against it dropped; it is planned and read again by the next update.
                    bad.add(t)
                    if entry.ref is not None and entry.ref.error is None:
                        entry.ref.error = error
                    continue
                if not (j == 0 and task.first_is_previous):
                    fresh_own.setdefault(t, {}).update(fig.tensors)
                if j > 0:
                    sums = fresh_pair.setdefault(t, {})
                    for name, tf in fig.tensors.items():
                        if tf.sums is not None:
                            sums[name] = tf.sums
            done += passes * sum(_nbytes(ordered[t]) for t in indexes) // shares[id(task)]
            yield SeriesProgress(min(max(done, streamed), total), total, os.path.basename(ordered[indexes[-1]].path))
        keys = {t: ordered[t].key for t in reads}  # what each file was when planned
        for t in reads:
            entry, key = ordered[t], keys[t]
            # A file that changed while read: its figures are shown (the byte layer read one version of
            # it whole) but not kept, and it is read again next time.
            trusted = key is not None and t not in bad and entry.ref is not None and entry.ref.error is None
            if t in fresh_own and (t in own or entry.own is None):
                entry.own = fresh_own[t]
                if self.cache is not None and trusted:
                    self.cache.put_figures(key, entry.path, entry.own)  # type: ignore[arg-type]
            if t in pair:
                prev_key = keys.get(t - 1)
                entry.pair, entry.pair_prev = fresh_pair.get(t, {}), prev_key
                if self.cache is not None and trusted and prev_key is not None and t - 1 not in bad:
                    self.cache.put_pair(prev_key, key, entry.pair)  # type: ignore[arg-type]
        for t in bad:
            ordered[t].key = None
            ordered[t].own, ordered[t].pair, ordered[t].pair_prev = None, None, None

    # --- the result -------------------------------------------------------------------------------
    def _assemble(self, ordered: list[Entry], order_by: str, log: RunLog | None = None) -> SeriesResult:
        refs = [dataclasses.replace(e.ref) for e in ordered if e.ref is not None]
        result = SeriesResult(refs, order_by, stall_threshold=self.stall_threshold,
                              explode_factor=self.explode_factor, spectral=self.spectral, log=log)
        count = len(ordered)
        tensors: dict[str, TensorSeries] = {}
        for t, e in enumerate(ordered):
            tensors = merge_names(tensors, [name for name, _, _, _ in e.rows], count)
            if e.ref is not None and e.ref.error is not None:
                continue  # unreadable, or changed while read: its names kept, no shapes (as iter_series)
            for name, shape, dtype, param in e.rows:
                tensors[name].shapes[t], tensors[name].dtypes[t] = shape, dtype
                if param is not None:
                    tensors[name].param = param
        result.tensors = tensors
        for t, e in enumerate(ordered):
            if e.own is None or e.ref is None or e.ref.error is not None:
                continue
            for name, tf in e.own.items():
                series = result.tensors.get(name)
                if series is None:
                    continue
                sums = e.pair.get(name) if e.pair is not None and e.pair_prev is not None else None
                if sums is not None and (t == 0 or series.stats[t - 1] is None):
                    sums = None
                measure = Measure(Summary(tf.stats) if tf.stats is not None else None, sums, tf.error)
                record_figures(series, t, measure)
                if self.spectral:
                    series.set_spectral(t, tf.alpha, tf.stable_rank)
        result.done = count
        result.findings = find_findings(result)
        return result

    def is_gone(self, t: int) -> bool:
        """True when checkpoint ``t`` of the last result is no longer there."""
        return self._order[t].gone

    def events(self) -> list[dict[str, Any]]:
        """What changed since the last call, in run order: one ``--watch`` object per checkpoint."""
        r = self.result
        if r is None:
            return []
        out: list[dict[str, Any]] = []
        for t, e in enumerate(self._order):
            loc = location(e.path)
            if loc in self.retry:
                continue  # changed while read: reported once read again as it is now
            body = checkpoint_event(r, t, e.gone)
            before = self._emitted.get(loc)
            if before is None:
                if e.gone:
                    continue  # never shown: nothing to take back
                event = "added"
            elif e.gone and not before["checkpoint"].get("gone"):
                event = "gone"
            elif not e.gone and before["checkpoint"].get("gone"):
                event = "added"  # it came back
            elif before != body:
                event = "changed"
            else:
                continue
            self._emitted[loc] = body
            out.append({"event": event, **body})
        return out


def checkpoint_event(result: SeriesResult, t: int, gone: bool = False) -> dict[str, Any]:
    """The ``--watch`` object of checkpoint ``t`` (without its "event")."""
    ref = result.checkpoints[t]
    checkpoint = ref.to_json()
    checkpoint["index"] = t
    if gone:
        checkpoint["gone"] = True
    tensors: dict[str, Any] = {}
    for name, s in result.tensors.items():
        if s.shapes[t] is None:
            continue
        st = s.stats[t]
        fig: dict[str, Any] = {
            "norm": _finite_or_none(st.l2) if st is not None else None,
            "mean": _finite_or_none(st.mean) if st is not None else None,
            "std": _finite_or_none(st.std) if st is not None else None,
            "abs_max": _finite_or_none(st.abs_max) if st is not None else None,
            "nan": st.nan if st is not None else None,
            "inf": st.posinf + st.neginf if st is not None else None,
            "update_ratio": _finite_or_none(s.update_ratio[t]),
            "frac_changed": _finite_or_none(s.frac_changed[t]),
        }
        if result.spectral:
            fig["alpha"] = _finite_or_none(s.spectral("alpha")[t])
            fig["stable_rank"] = _finite_or_none(s.spectral("stable_rank")[t])
        if s.errors[t]:
            fig["error"] = s.errors[t]
        tensors[name] = fig
    findings = [f.to_json(result.checkpoints) for f in result.findings if f.index == t]
    return {"checkpoint": checkpoint, "tensors": tensors, "findings": findings}


def _nbytes(entry: Entry) -> int:
    return entry.ref.nbytes if entry.ref is not None else 0


def _finite_or_none(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _error_ref(path: str, error: str) -> CheckpointRef:
    return CheckpointRef(path, name_position(path), error=error)


def _open_meta(path: str, remote: RemoteOptions) -> tuple[CheckpointRef, list[Row]]:
    """A checkpoint's planning facts, as plan_series records them (whatever it keeps of a checkpoint)."""
    try:
        planned = plan_series([path], remote=remote)
    except (CheckpointError, OSError) as exc:
        message, prefix = error_message(exc), f"{path}: "
        return _error_ref(path, message[len(prefix):] if message.startswith(prefix) else message), []
    if len(planned.checkpoints) != 1:  # a checkpoint folder that, named alone, reads as a run
        return _open_one(path, remote)
    rows = [(name, s.shapes[0], s.dtypes[0] or "", s.param) for name, s in planned.tensors.items()
            if s.shapes[0] is not None]
    return planned.checkpoints[0], rows


def _open_one(path: str, remote: RemoteOptions) -> tuple[CheckpointRef, list[Row]]:
    try:
        ckpt = open_checkpoint(path, remote)
    except Cancelled:
        raise
    except Exception as exc:  # noqa: BLE001 - one checkpoint failing is a finding, the rest still read
        return _error_ref(path, error_message(exc)), []
    try:
        tensors = series_entries(ckpt)
        values, best = ref_scalars(ckpt)
        ref = CheckpointRef(path, find_position(ckpt, path, remote), ckpt.format, sum(info.nbytes for _, info, _ in tensors),
                            unsafe_globals=list(ckpt.unsafe_globals), values=values, best=best)
        return ref, [(name, tuple(info.shape), info.dtype, param) for name, info, param in tensors]
    finally:
        ckpt.close()


def _to_meta(ref: CheckpointRef, rows: list[Row]) -> dict[str, Any]:
    meta = dataclasses.asdict(ref)  # every field plan_series fills in, whatever they are
    del meta["path"]
    meta["rows"] = [[name, list(shape), dtype, param] for name, shape, dtype, param in rows]
    return meta


def _from_meta(path: str, meta: dict[str, Any]) -> tuple[CheckpointRef, list[Row]] | None:
    try:
        fields = dict(meta)
        rows: list[Row] = [(str(n), tuple(int(d) for d in s), str(dt), None if p is None else str(p))
                           for n, s, dt, p in fields.pop("rows")]
        if "values" not in fields:
            return None  # kept before checkpoints' scalars were: read the file again
        fields["values"] = {str(k): float(v) for k, v in fields["values"].items()}
        position = Position(**fields.pop("position"))
        ref = CheckpointRef(path=path, position=position, **fields)
    except (KeyError, TypeError, ValueError):
        return None  # written by another version: read the file again
    return ref, rows


def run_live(paths: list[str], *, cache: SeriesCache | None = None, workers: int | None = None,
             scheduler: Any = None, chunk_elems: int = SERIES_CHUNK_ELEMS, stall_threshold: float = 0.0,
             explode_factor: float = 10.0, token: CancelToken | None = None, spectral: bool = False) -> SeriesResult:
    """A whole run read once through the executor and the cache (plain-function form)."""
    run = LiveRun(paths, cache=cache, workers=workers, scheduler=scheduler, chunk_elems=chunk_elems,
                  stall_threshold=stall_threshold, explode_factor=explode_factor, spectral=spectral)
    try:
        run.discover()
        return drain(run.update(token))
    finally:
        run.close()

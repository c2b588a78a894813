"""A training run as a timeline: per-tensor figures over a run's checkpoints, streamed (Qt-free, no torch).

Figures per tensor and checkpoint (the conventions of :mod:`ckptview.core.figures.stats`, computed in float64 over
the finite values; NaN and infinities are counted apart):

- ``norm`` (L2), ``mean``, ``std`` (the *sample* standard deviation, as ``torch.std``), ``abs_max``,
  ``nan`` and ``inf`` (+Inf and -Inf) counts;
- between checkpoint t-1 and t when the tensor has the same shape in both: ``update_ratio`` =
  ``||w_t - w_{t-1}|| / ||w_{t-1}||`` (the difference over the positions finite on both sides, divided by
  the norm of the finite values of ``w_{t-1}``; ``None`` when that norm is 0 and something changed, when
  no position is finite on both sides, and for empty tensors) and
  ``frac_changed``, the fraction of elements whose value differs (NaN staying NaN is no change), exactly
  as ``ckptview diff`` counts them.

Reading: checkpoint t is streamed chunk by chunk together with checkpoint t-1 (the same tensor, same
chunk), so the bytes of every checkpoint are read once for its own figures and once more as the
"previous" side of the next checkpoint; memory stays bounded by a few chunks whatever the tensor sizes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptview.core.checkpoint import Checkpoint, TensorInfo, join_path
from ckptview.core.compare.diff import Sums, compare_arrays, paired_chunks, repeated_sums
from ckptview.core.errors import Cancelled, CheckpointError, FileChangedError
from ckptview.core.figures.stats import Summary, iter_summary, stored_part
from ckptview.core.inspect.optimizer import find_optimizers
from ckptview.core.jobs import CancelToken, Progress, drain
from ckptview.core.read import open as opening
from ckptview.core.read.bytes.files import ReadAhead
from ckptview.core.read.bytes.remote.options import DEFAULT as DEFAULT_REMOTE
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.values.reading import iter_chunks
from ckptview.core.read.values.repeats import reading_layout
from ckptview.core.series.discover import (
    Position,
    choose_order,
    find_checkpoints,
    find_position,
    order_key,
    position_from_name,
)
from ckptview.core.series.findings import find_findings
from ckptview.core.series.model import (
    CheckpointRef,
    SeriesProgress,
    SeriesResult,
    TensorSeries,
)
from ckptview.core.series.scalars import ref_scalars
from ckptview.core.units import plural

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.session.workspace import Holdings

SERIES_CHUNK_ELEMS = 1 << 20


def open_checkpoint(path: str, remote: RemoteOptions = DEFAULT_REMOTE) -> Checkpoint:
    """Open one checkpoint of a run (metadata only): the one opener of planning, iter_series and the
    executor's tasks (:mod:`ckptview.core.series.executor`), so every path opens files alike. A URL is
    read with `remote` (what the user allowed: `--download`, ...)."""
    return opening.open_checkpoint(path, ReaderContext(remote=remote))


def open_for_run(path: str, remote: RemoteOptions = DEFAULT_REMOTE) -> Checkpoint:
    """`open_checkpoint`, looked up when called: the opener a run's `Holdings` open files with."""
    return open_checkpoint(path, remote)


def _open(path: str, holdings: Holdings | None, remote: RemoteOptions) -> Checkpoint:
    """The checkpoint at `path`: the run's own open when it holds one and the file is unchanged."""
    return holdings.checkpoint(path) if holdings is not None else open_checkpoint(path, remote)


def _let_go(ckpt: Checkpoint | None, holdings: Holdings | None) -> None:
    """Close a checkpoint this run opened for itself (one it holds stays open for its plots)."""
    if ckpt is not None and holdings is None:
        ckpt.close()


# ---------------------------------------------------------------------------------------------------
# Planning: find, open (metadata only), order.


def plan_series(paths: list[str], stall_threshold: float = 0.0, explode_factor: float = 10.0,
                holdings: Holdings | None = None, remote: RemoteOptions = DEFAULT_REMOTE) -> SeriesResult:
    """Find the run's checkpoints, read each one's step/epoch and tensor list, and order them.

    With `holdings` (the window's series tab), each checkpoint stays open there for the reading and the
    plots; without, each is closed once planned. URLs are listed and read with `remote`."""
    found = find_checkpoints(paths, remote)
    refs: list[CheckpointRef] = []
    names: list[list[TensorInfoRow]] = []
    params: dict[str, str] = {}
    for path in found:
        if "://" not in path and not os.path.isdir(path) and not os.path.isfile(path):  # a URL: opened below
            refs.append(CheckpointRef(path, name_position(path), error="not a regular file (a FIFO, socket "
                                                                          "or device is never opened)"))
            names.append([])
            continue
        try:
            ckpt = _open(path, holdings, remote)
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - one checkpoint failing is a finding, the rest still read
            refs.append(CheckpointRef(path, name_position(path), error=error_message(exc)))
            names.append([])
            continue
        try:
            tensors = series_entries(ckpt)
            values, best = ref_scalars(ckpt)
            refs.append(CheckpointRef(path, find_position(ckpt, path, remote), ckpt.format,
                                      sum(info.nbytes for _, info, _ in tensors),
                                      unsafe_globals=list(ckpt.unsafe_globals), values=values, best=best))
            names.append([(name, tuple(info.shape), info.dtype) for name, info, _ in tensors])
            params.update((name, param) for name, _, param in tensors if param is not None)
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001
            refs.append(CheckpointRef(path, name_position(path), error=error_message(exc)))
            names.append([])
        finally:
            _let_go(ckpt, holdings)
    readable = [(r, n) for r, n in zip(refs, names, strict=True) if r.error is None]
    if not readable:
        raise none_readable(refs)
    order_by = choose_order([r.position for r, _ in readable])
    pairs = sorted(zip(refs, names, strict=True), key=lambda rn: sort_key(rn[0], order_by))
    result = SeriesResult([r for r, _ in pairs], order_by, stall_threshold=stall_threshold,
                          explode_factor=explode_factor)
    count = len(result.checkpoints)
    order: dict[str, TensorSeries] = {}
    for t, (_, rows) in enumerate(pairs):
        order = merge_names(order, [name for name, _, _ in rows], count)
        for name, shape, dtype in rows:
            order[name].shapes[t], order[name].dtypes[t] = shape, dtype
    for name, param in params.items():
        order[name].param = param
    result.tensors = order
    return result


TensorInfoRow = tuple[str, tuple[int, ...], str]


def none_readable(refs: list[CheckpointRef]) -> CheckpointError:
    """The one error of a run none of whose checkpoints could be planned (the only fatal case)."""
    if len(refs) == 1:
        return CheckpointError(f"{refs[0].path}: {refs[0].error}")
    return CheckpointError(f"none of the {plural(len(refs), 'checkpoint')} could be read (first: {refs[0].path}: "
                           f"{refs[0].error})")


def sort_key(ref: CheckpointRef, order_by: str) -> tuple[Any, ...]:
    # Unreadable checkpoints go where their name puts them, or last when that says nothing.
    pos = ref.position
    if order_by == "step" and pos.step is None or order_by == "epoch" and pos.epoch is None:
        return (1, order_key(ref.path, pos, "name"))
    return (0, order_key(ref.path, pos, order_by))


def name_position(path: str) -> Position:
    pos = Position()
    position_from_name(path, pos)
    return pos


def merge_names(order: dict[str, TensorSeries], names: list[str], count: int) -> dict[str, TensorSeries]:
    """The known names, with this checkpoint's new names placed right after their predecessor in it."""
    new_after: dict[str | None, list[str]] = {}
    anchor: str | None = None
    seen: set[str] = set()
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        if name in order:
            anchor = name
        else:
            new_after.setdefault(anchor, []).append(name)
    if not new_after:
        return order
    merged: dict[str, TensorSeries] = {}
    for name in new_after.get(None, []):
        merged[name] = TensorSeries.empty(name, count)
    for name, series in order.items():
        merged[name] = series
        for new in new_after.get(name, []):
            merged[new] = TensorSeries.empty(new, count)
    return merged


# ---------------------------------------------------------------------------------------------------
# Streaming the values.


class _SideError(Exception):
    """A read error, tagged with the side ("prev" or "cur") whose file failed (``changed``: it changed on disk)."""

    def __init__(self, side: str, message: str, changed: bool = False) -> None:
        super().__init__(message)
        self.side = side
        self.changed = changed


def _tagged(chunks: Iterable[np.ndarray], side: str) -> Iterator[np.ndarray]:
    try:
        yield from chunks
    except (CheckpointError, OSError, ValueError) as exc:
        raise _SideError(side, error_message(exc), isinstance(exc, FileChangedError)) from None


def error_message(exc: BaseException) -> str:
    if isinstance(exc, FileChangedError):
        return changed_message(exc.what or "rewritten")
    if isinstance(exc, CheckpointError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"cannot read file: {exc.strerror or exc}"
    if isinstance(exc, ValueError):
        return f"cannot read values: {exc}"
    return f"cannot read: {type(exc).__name__}: {exc}"


def changed_message(what: str) -> str:
    return f"changed on disk while the run was read ({what}); reopen the run to read it as it is now"


def iter_series(result: SeriesResult, token: CancelToken | None = None,
                chunk_elems: int = SERIES_CHUNK_ELEMS, holdings: Holdings | None = None,
                remote: RemoteOptions = DEFAULT_REMOTE) -> Generator[SeriesProgress, None, SeriesResult]:
    """Fill in every figure of ``result`` checkpoint by checkpoint; yields progress, returns it with findings.

    Small tensors' bytes come from windows of each file read at once (`read_ahead`). A checkpoint that
    fails, or changes on disk while it is read, becomes an error of that checkpoint (its figures dropped);
    the others are still read. With `holdings`, checkpoints come from (and stay in) the run's own opens;
    without, URLs are read with `remote`."""
    ahead = ReadAhead()  # handed to every value read of the walk
    return ahead.run(_iter_series(result, token, chunk_elems, ahead, holdings, remote))


def _iter_series(result: SeriesResult, token: CancelToken | None, chunk_elems: int,
                 ahead: ReadAhead | None = None, holdings: Holdings | None = None,
                 remote: RemoteOptions = DEFAULT_REMOTE) -> Generator[SeriesProgress, None, SeriesResult]:
    total = sum(r.nbytes for r in result.checkpoints)
    done_bytes = 0
    prev: Checkpoint | None = None
    prev_index = -1
    prev_names: dict[str, TensorInfo] = {}

    def let_go(ckpt: Checkpoint | None) -> None:
        # Closed checkpoints were checked here (`check_unchanged`): the read-ahead's final check of
        # every file it read must not fail the whole run for one of them.
        if ckpt is not None and ahead is not None:
            ahead.seen.difference_update(ckpt.files)
        _let_go(ckpt, holdings)

    yield SeriesProgress(0, total, "reading")
    try:
        for t, ref in enumerate(result.checkpoints):
            if token is not None:
                token.check()
            if ref.error is not None:
                let_go(prev)
                prev, prev_index = None, -1
                result.done = t + 1
                yield SeriesProgress(done_bytes, total, ref.path, t)
                continue
            opened: Checkpoint | None = None
            try:
                opened = _open(ref.path, holdings, remote)
                entries = series_entries(opened)
            except Cancelled:
                let_go(opened)
                raise
            except Exception as exc:  # noqa: BLE001 - one checkpoint failing is a finding, the rest still read
                let_go(opened)
                ref.error = error_message(exc)
                _drop(result, t)
                let_go(prev)
                prev, prev_index = None, -1
                result.done = t + 1
                yield SeriesProgress(done_bytes, total, ref.path, t)
                continue
            ckpt = opened
            ref.unsafe_globals = list(ckpt.unsafe_globals)  # as opened now (it may have been re-saved)
            prev_infos = prev_names if prev is not None and prev_index == t - 1 else {}
            names_now: dict[str, TensorInfo] = {}
            for name, info, _ in entries:
                names_now.setdefault(name, info)  # the first, if a name repeats (as Checkpoint.tensor)
            base = done_bytes
            label = ref.file_name
            seen: set[str] = set()
            broke: str | None = None
            for name, info, param in entries:
                if name in seen:
                    continue  # the first, if a name repeats (as Checkpoint.tensor)
                seen.add(name)
                series = result.tensors.get(name)
                if series is None:  # the file changed since planning: take it as it is now
                    result.tensors = merge_names(result.tensors, [name], len(result.checkpoints))
                    series = result.tensors[name]
                series.shapes[t], series.dtypes[t] = tuple(info.shape), info.dtype
                if param is not None:
                    series.param = param
                if info.storage is None and not info.broken:
                    continue  # saved without data (meta): a shape and a dtype, no figures
                before = prev_infos.get(name)
                if before is not None and (tuple(before.shape) != tuple(info.shape) or t == 0
                                           or result.tensors[name].stats[t - 1] is None):
                    before = None
                gen = _measure(info, before, token, chunk_elems, ahead)
                while True:
                    try:
                        step = next(gen)
                    except StopIteration as stop:
                        measure = stop.value
                        break
                    except Cancelled:
                        raise
                    except Exception as exc:  # noqa: BLE001 - any failure of one tensor: that tensor's error
                        measure = Measure(error=error_message(exc))
                        break
                    yield SeriesProgress(base + step.done, total, f"{label}: {name}")
                if measure.changed:
                    broke = measure.error
                    break  # this file is no longer the one opened: the whole checkpoint is dropped below
                record_figures(series, t, measure)
                base += info.nbytes
            done_bytes += ref.nbytes
            changed = check_unchanged(ckpt, ref.path) or broke
            if changed is not None:
                ref.error = changed
                _drop(result, t)
            if prev is not None and prev_index == t - 1:
                before_changed = check_unchanged(prev, result.checkpoints[t - 1].path)
                if before_changed is not None:  # changed while it was the previous side of this one
                    result.checkpoints[t - 1].error = before_changed
                    _drop(result, t - 1)
            let_go(prev)
            if ref.error is not None:
                let_go(ckpt)
                prev, prev_index = None, -1
            else:
                prev, prev_index, prev_names = ckpt, t, names_now
            result.done = t + 1
            yield SeriesProgress(done_bytes, total, ref.path, t)
    finally:
        let_go(prev)
    result.findings = find_findings(result)
    return result


def check_unchanged(ckpt: Checkpoint, path: str) -> str | None:
    """The error of a checkpoint whose files changed on disk since it was opened, else None."""
    what = ckpt.changed_on_disk()
    if what is None:
        return None
    if what.startswith(path + ": "):
        what = what[len(path) + 2:]
    return changed_message(what)


def _drop(result: SeriesResult, t: int) -> None:
    """Forget checkpoint ``t``'s figures, and the update ratios measured against it."""
    for s in result.tensors.values():
        s.stats[t] = s.errors[t] = s.shapes[t] = s.dtypes[t] = None
        for column in (s.update_ratio, s.frac_changed, s.sq_change, s.changed, s.compared):
            column[t] = None
            if t + 1 < len(column):
                column[t + 1] = None


def run_series(paths: list[str], stall_threshold: float = 0.0, explode_factor: float = 10.0,
               token: CancelToken | None = None, chunk_elems: int = SERIES_CHUNK_ELEMS,
               remote: RemoteOptions = DEFAULT_REMOTE) -> SeriesResult:
    """Plan and read a whole run (plain-function form of :func:`plan_series` + :func:`iter_series`)."""
    result = plan_series(paths, stall_threshold, explode_factor, remote=remote)
    return drain(iter_series(result, token, chunk_elems, remote=remote))


def model_tensors(ckpt: Checkpoint) -> list[tuple[str, TensorInfo]]:
    """(name, info) of the tensors a run follows: a training folder's model file, named as in that file
    (its optimizer, scheduler and RNG files are not the weights); any other checkpoint whole, its mapped
    optimizer state named by parameter (see :func:`series_entries`)."""
    return [(name, info) for name, info, _ in series_entries(ckpt)]


def series_entries(ckpt: Checkpoint) -> list[tuple[str, TensorInfo, str | None]]:
    """(name, info, parameter) of the tensors a run follows (:func:`model_tensors`).

    The state of an optimizer whose mapping is known (the mapping the window's optimizer panel shows,
    :func:`ckptview.core.inspect.optimizer.find_optimizers`) is named by its parameter, not by its id:
    ``optimizer.state.fc.weight.exp_avg`` instead of ``optimizer.state.8.exp_avg``, so a run follows each
    parameter's state even where an optimizer rebuilt over a grown model numbers its parameters anew. The
    third item is that parameter's name (None for every other tensor).
    """
    model = ckpt.metadata.get("model_entry")
    if model:
        prefix = f"{model}."
        return [(e.name[len(prefix):], e.info, None) for e in ckpt.tensors() if e.path and e.path[0] == model]
    renamed = _state_by_parameter(ckpt)
    out: list[tuple[str, TensorInfo, str | None]] = []
    for e in ckpt.tensors():
        found = renamed.get(id(e.info))
        out.append((found[0], e.info, found[1]) if found is not None else (e.name, e.info, None))
    return out


def _state_by_parameter(ckpt: Checkpoint) -> dict[int, tuple[str, str]]:
    """id(TensorInfo) -> (series name, parameter name) for the state of mapped optimizers."""
    if not _has_param_groups(ckpt):
        return {}
    out: dict[int, tuple[str, str]] = {}
    for opt in find_optimizers(ckpt):
        if opt.mapping not in ("exact", "by-order"):  # names not known: the ids stay
            continue
        for p in opt.params:
            if p.node is None or p.name is None:
                continue
            base = p.node.path[:-1]  # (..., "state")
            for node in p.node.walk():
                if node.tensor is not None:
                    rest = node.path[len(p.node.path):]
                    name = ".".join(part for part in (join_path(base), p.name, join_path(rest)) if part)
                    out[id(node.tensor)] = (name, p.name)
    return out


def _has_param_groups(ckpt: Checkpoint) -> bool:
    stack = [ckpt.root]
    while stack:
        children = stack.pop().children
        if children:
            if any(c.key == "param_groups" for c in children):
                return True
            stack.extend(c for c in children if c.children)
    return False


def _by_name(ckpt: Checkpoint) -> dict[str, TensorInfo]:
    out: dict[str, TensorInfo] = {}
    for name, info in model_tensors(ckpt):
        out.setdefault(name, info)  # the first, if a name repeats (as Checkpoint.tensor)
    return out


def series_tensor(ckpt: Checkpoint, name: str) -> TensorInfo | None:
    """The tensor a run calls ``name`` in ``ckpt`` (optimizer state by parameter), or None."""
    return _by_name(ckpt).get(name)


@dataclass
class Measure:
    summary: Summary | None = None
    sums: Sums | None = None
    error: str | None = None
    changed: bool = False  # the current file changed on disk while it was read


def _measure(info: TensorInfo, before: TensorInfo | None, token: CancelToken | None,
             chunk_elems: int, ahead: ReadAhead | None = None) -> Generator[Progress, None, Measure]:
    """One streamed pass over ``info`` (paired with ``before`` chunk by chunk when given).

    A view that repeats its storage is read as its stored part (`values.repeats`), each value counted as
    often as it repeats; it is paired with ``before`` only when both are read the same way (the same
    layout), so the pass costs what the two versions store (the executor's lanes follow the same rule)."""
    part, weight = stored_part(info)
    if before is not None and reading_layout(before) != reading_layout(info):
        before = None  # one repeats its storage and the other not (or differently): no update figures
    if before is not None:
        sums = Sums()
        try:
            summary = yield from _paired_pass(iter_chunks(stored_part(before)[0], chunk_elems, ahead),
                                              iter_chunks(part, chunk_elems, ahead),
                                              sums, part.numel, token, weight)
            return Measure(summary, sums)
        except _SideError as exc:
            if exc.side == "cur":
                return Measure(error=str(exc), changed=exc.changed)
            # The previous file failed this time (it changed?): still measure this one, without a ratio.
    try:
        summary = yield from iter_summary(_tagged(iter_chunks(part, chunk_elems, ahead), "cur"), part.numel, token,
                                          weight)
    except _SideError as exc:
        return Measure(error=str(exc), changed=exc.changed)
    return Measure(summary)


def _paired_pass(prev_chunks: Iterable[np.ndarray], cur_chunks: Iterable[np.ndarray], sums: Sums, total: int,
                 token: CancelToken | None, weight: int = 1) -> Generator[Progress, None, Summary]:
    def current() -> Iterator[np.ndarray]:
        pairs = paired_chunks(_tagged(prev_chunks, "prev"), _tagged(cur_chunks, "cur"))
        for ca, cb in _tagged_pairs(pairs):
            part = compare_arrays(ca, cb, max(ca.size, 1))
            sums.add(part if weight == 1 else repeated_sums(part, weight))
            yield cb

    return (yield from iter_summary(current(), total, token, weight))


def _tagged_pairs(pairs: Iterator[tuple[np.ndarray, np.ndarray]]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    try:
        yield from pairs
    except CheckpointError as exc:  # paired_chunks: the two sides disagree on their length
        raise _SideError("cur", str(exc)) from None


def record_figures(series: TensorSeries, t: int, measure: Measure) -> None:
    if measure.error is not None or measure.summary is None:
        series.errors[t] = measure.error or "cannot read values"
        return
    stats = measure.summary.stats
    series.stats[t] = stats
    sums = measure.sums
    if sums is None:
        return
    prev = series.stats[t - 1] if t > 0 else None
    prev_norm = prev.l2 if prev is not None else 0.0
    if sums.numel == 0:
        return  # an empty tensor has no update to measure
    if sums.finite == 0:
        ratio: float | None = None  # no position is finite on both sides: nothing to measure
    elif prev_norm > 0 and math.isfinite(prev_norm):
        ratio = math.sqrt(sums.dd) / prev_norm
    else:
        ratio = 0.0 if sums.dd == 0 else None
    series.update_ratio[t] = ratio if ratio is None or math.isfinite(ratio) else None
    series.frac_changed[t] = sums.changed / sums.numel
    series.sq_change[t] = sums.dd
    series.changed[t] = sums.changed
    series.compared[t] = sums.numel

"""A training run as a timeline: per-tensor figures over a run's checkpoints, streamed (Qt-free, no torch).

Figures per tensor and checkpoint (the conventions of :mod:`ckptview.core.stats`, computed in float64 over
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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ckptview.core.diff import Sums, compare_arrays, paired_chunks
from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.model import Checkpoint, TensorInfo
from ckptview.core.open import open_checkpoint
from ckptview.core.series_discover import (
    Position,
    choose_order,
    find_checkpoints,
    find_position,
    order_key,
)
from ckptview.core.stats import Summary, TensorStats, iter_summary

SERIES_CHUNK_ELEMS = 1 << 20
FIGURES = ("norm", "mean", "std", "abs_max", "nan", "inf", "update_ratio", "frac_changed")


@dataclass
class CheckpointRef:
    """One checkpoint of the run, in run order."""

    path: str
    position: Position
    format: str = ""
    nbytes: int = 0  # bytes of its tensors (progress)
    error: str | None = None  # could not be opened or read as a whole

    def to_json(self) -> dict[str, Any]:
        """The contract's checkpoint object (with where the step and epoch were found)."""
        p = self.position
        out: dict[str, Any] = {"path": self.path, "step": p.step, "epoch": p.epoch,
                               "step_source": p.step_source, "epoch_source": p.epoch_source,
                               "format": self.format}
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class TensorSeries:
    """The figures of one tensor over the run: one entry per checkpoint, None where it is absent."""

    name: str
    shapes: list[tuple[int, ...] | None]
    dtypes: list[str | None]
    stats: list[TensorStats | None]
    update_ratio: list[float | None]
    frac_changed: list[float | None]
    sq_change: list[float | None]  # ||w_t - w_{t-1}||^2 (module aggregation)
    changed: list[int | None]
    compared: list[int | None]  # elements compared with t-1
    errors: list[str | None]

    @classmethod
    def empty(cls, name: str, count: int) -> TensorSeries:
        """A tensor absent everywhere so far."""
        return cls(name, *([None] * count for _ in range(9)))

    def present(self, t: int) -> bool:
        """True when the tensor exists in checkpoint ``t``."""
        return self.shapes[t] is not None

    @property
    def shape(self) -> tuple[int, ...] | None:
        """Its shape in the last checkpoint that has it."""
        return next((s for s in reversed(self.shapes) if s is not None), None)

    @property
    def dtype(self) -> str | None:
        """Its dtype in the last checkpoint that has it."""
        return next((d for d in reversed(self.dtypes) if d is not None), None)

    def figure(self, key: str) -> list[Any]:
        """One figure over the run (see FIGURES); None where absent or unreadable."""
        if key == "update_ratio":
            return list(self.update_ratio)
        if key == "frac_changed":
            return list(self.frac_changed)
        return [None if s is None else _stat(s, key) for s in self.stats]

    def to_json(self) -> dict[str, Any]:
        """The contract's tensor object."""
        out: dict[str, Any] = {"name": self.name, "shape": _list(self.shape), "dtype": self.dtype}
        for key in FIGURES:
            out[key] = [_json_number(v) for v in self.figure(key)]
        out["shapes"] = [_list(s) for s in self.shapes]
        out["dtypes"] = list(self.dtypes)
        return out


@dataclass
class ModuleSeries:
    """A module's figures over the run: its tensors taken together as one flat vector."""

    name: str
    tensors: list[str]
    norm: list[float | None]
    mean: list[float | None]
    std: list[float | None]
    abs_max: list[float | None]
    nan: list[int | None]
    inf: list[int | None]
    update_ratio: list[float | None]
    frac_changed: list[float | None]

    def to_json(self) -> dict[str, Any]:
        """The ``"modules"`` entry of ``ckptview series --json``."""
        out: dict[str, Any] = {"name": self.name, "tensors": len(self.tensors)}
        for key in FIGURES:
            out[key] = [_json_number(v) for v in getattr(self, key)]
        return out


@dataclass
class Finding:
    """Something worth a look, naming the tensor (None for a whole checkpoint) and the checkpoint."""

    kind: str  # nan | inf | stalled | explosion | appeared | disappeared | shape_changed | dtype_changed | unreadable
    tensor: str | None
    index: int  # checkpoint index in run order
    checkpoint: str
    detail: str

    def to_json(self, refs: list[CheckpointRef]) -> dict[str, Any]:
        """The contract's finding object (plus the checkpoint's index and step)."""
        return {"kind": self.kind, "tensor": self.tensor, "checkpoint": self.checkpoint, "detail": self.detail,
                "index": self.index, "step": refs[self.index].position.step if self.index < len(refs) else None}


@dataclass
class SeriesResult:
    """A run: its checkpoints in order, one TensorSeries per tensor name, and the findings."""

    checkpoints: list[CheckpointRef]
    order_by: str  # "step", "epoch" or "name"
    tensors: dict[str, TensorSeries] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    done: int = 0  # checkpoints whose figures are complete
    stall_threshold: float = 0.0
    explode_factor: float = 10.0

    @property
    def order_sources(self) -> list[str]:
        """Where the ordering key was found, each source once ("file: global_step", "name", ...)."""
        key = "step_source" if self.order_by == "step" else "epoch_source"
        found: list[str] = []
        for ref in self.checkpoints:
            source = getattr(ref.position, key) if self.order_by != "name" else "name"
            if source and source not in found:
                found.append(source)
        return found

    def label(self, t: int) -> str:
        """How checkpoint ``t`` is called on an axis: 'step 300', 'epoch 2', or its name."""
        pos = self.checkpoints[t].position
        if self.order_by == "step":
            return f"step {pos.step}"
        if self.order_by == "epoch":
            return f"epoch {pos.epoch}"
        return os.path.basename(os.path.normpath(self.checkpoints[t].path))

    def x_values(self) -> list[float]:
        """The x coordinate of every checkpoint: its step, epoch, or index."""
        out = []
        for i, ref in enumerate(self.checkpoints):
            pos = ref.position
            value = pos.step if self.order_by == "step" else pos.epoch if self.order_by == "epoch" else None
            out.append(float(value) if value is not None else float(i))
        return out

    def to_json(self) -> dict[str, Any]:
        """The ``ckptview series --json`` object."""
        return {
            "checkpoints": [r.to_json() for r in self.checkpoints],
            "order": {"by": self.order_by, "sources": self.order_sources},
            "tensors": [t.to_json() for t in self.tensors.values()],
            "modules": [m.to_json() for m in module_series(self)],
            "findings": [f.to_json(self.checkpoints) for f in self.findings],
            "thresholds": {"stall_threshold": self.stall_threshold, "explode_factor": self.explode_factor},
        }


@dataclass(frozen=True)
class SeriesProgress(Progress):
    """Progress of a run; ``checkpoint`` is the index whose figures were just completed (-1: none)."""

    checkpoint: int = -1


# ---------------------------------------------------------------------------------------------------
# Planning: find, open (metadata only), order.


def plan_series(paths: list[str], stall_threshold: float = 0.0, explode_factor: float = 10.0) -> SeriesResult:
    """Find the run's checkpoints, read each one's step/epoch and tensor list, and order them."""
    found = find_checkpoints(paths)
    refs: list[CheckpointRef] = []
    names: list[list[TensorInfoRow]] = []
    for path in found:
        if not os.path.isdir(path) and not os.path.isfile(path):
            refs.append(CheckpointRef(path, _name_position(path), error="not a regular file (a FIFO, socket "
                                                                          "or device is never opened)"))
            names.append([])
            continue
        try:
            ckpt = open_checkpoint(path)
        except (CheckpointError, OSError) as exc:
            refs.append(CheckpointRef(path, _name_position(path), error=_message(exc)))
            names.append([])
            continue
        try:
            refs.append(CheckpointRef(path, find_position(ckpt, path), ckpt.format,
                                      sum(e.info.nbytes for e in ckpt.tensors())))
            names.append([(e.name, tuple(e.info.shape), e.info.dtype) for e in ckpt.tensors()])
        finally:
            ckpt.close()
    readable = [(r, n) for r, n in zip(refs, names, strict=True) if r.error is None]
    if not readable:
        if len(refs) == 1:
            raise CheckpointError(f"{refs[0].path}: {refs[0].error}")
        raise CheckpointError(f"none of the {len(refs)} checkpoints could be read (first: {refs[0].path}: "
                              f"{refs[0].error})")
    order_by = choose_order([r.position for r, _ in readable])
    pairs = sorted(zip(refs, names, strict=True), key=lambda rn: _sort_key(rn[0], order_by))
    result = SeriesResult([r for r, _ in pairs], order_by, stall_threshold=stall_threshold,
                          explode_factor=explode_factor)
    count = len(result.checkpoints)
    order: dict[str, TensorSeries] = {}
    for t, (_, rows) in enumerate(pairs):
        order = _merge_names(order, [name for name, _, _ in rows], count)
        for name, shape, dtype in rows:
            order[name].shapes[t], order[name].dtypes[t] = shape, dtype
    result.tensors = order
    return result


TensorInfoRow = tuple[str, tuple[int, ...], str]


def _sort_key(ref: CheckpointRef, order_by: str) -> tuple[Any, ...]:
    # Unreadable checkpoints go where their name puts them, or last when that says nothing.
    pos = ref.position
    if order_by == "step" and pos.step is None or order_by == "epoch" and pos.epoch is None:
        return (1, order_key(ref.path, pos, "name"))
    return (0, order_key(ref.path, pos, order_by))


def _name_position(path: str) -> Position:
    from ckptview.core.series_discover import _from_name

    pos = Position()
    _from_name(path, pos)
    return pos


def _merge_names(order: dict[str, TensorSeries], names: list[str], count: int) -> dict[str, TensorSeries]:
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
    """A read error, tagged with the side ("prev" or "cur") whose file failed."""

    def __init__(self, side: str, message: str) -> None:
        super().__init__(message)
        self.side = side


def _tagged(chunks: Iterable[np.ndarray], side: str) -> Iterator[np.ndarray]:
    try:
        yield from chunks
    except (CheckpointError, OSError, ValueError) as exc:
        raise _SideError(side, _message(exc)) from None


def _message(exc: BaseException) -> str:
    if isinstance(exc, CheckpointError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"cannot read file: {exc.strerror or exc}"
    return f"cannot read values: {exc}"


def iter_series(result: SeriesResult, token: CancelToken | None = None,
                chunk_elems: int = SERIES_CHUNK_ELEMS) -> Generator[SeriesProgress, None, SeriesResult]:
    """Fill in every figure of ``result`` checkpoint by checkpoint; yields progress, returns it with findings."""
    total = sum(r.nbytes for r in result.checkpoints)
    done_bytes = 0
    prev: Checkpoint | None = None
    prev_index = -1
    yield SeriesProgress(0, total, "reading")
    try:
        for t, ref in enumerate(result.checkpoints):
            if token is not None:
                token.check()
            if ref.error is not None:
                _close(prev)
                prev, prev_index = None, -1
                result.done = t + 1
                yield SeriesProgress(done_bytes, total, ref.path, t)
                continue
            try:
                ckpt = open_checkpoint(ref.path)
            except (CheckpointError, OSError) as exc:
                ref.error = _message(exc)
                _close(prev)
                prev, prev_index = None, -1
                result.done = t + 1
                yield SeriesProgress(done_bytes, total, ref.path, t)
                continue
            prev_infos = _by_name(prev) if prev is not None and prev_index == t - 1 else {}
            base = done_bytes
            label = os.path.basename(os.path.normpath(ref.path))
            for name, info in _by_name(ckpt).items():
                series = result.tensors.get(name)
                if series is None:  # the file changed since planning: take it as it is now
                    result.tensors = _merge_names(result.tensors, [name], len(result.checkpoints))
                    series = result.tensors[name]
                series.shapes[t], series.dtypes[t] = tuple(info.shape), info.dtype
                if info.storage is None and not info.broken:
                    continue  # saved without data (meta): a shape and a dtype, no figures
                before = prev_infos.get(name)
                if before is not None and (tuple(before.shape) != tuple(info.shape) or t == 0
                                           or result.tensors[name].stats[t - 1] is None):
                    before = None
                gen = _measure(info, before, token, chunk_elems)
                while True:
                    try:
                        step = next(gen)
                    except StopIteration as stop:
                        measure = stop.value
                        break
                    yield SeriesProgress(base + step.done, total, f"{label}: {name}")
                _record(series, t, measure)
                base += info.nbytes
            done_bytes += ref.nbytes
            _close(prev)
            prev, prev_index = ckpt, t
            result.done = t + 1
            yield SeriesProgress(done_bytes, total, ref.path, t)
    finally:
        _close(prev)
    result.findings = find_findings(result)
    return result


def run_series(paths: list[str], stall_threshold: float = 0.0, explode_factor: float = 10.0,
               token: CancelToken | None = None, chunk_elems: int = SERIES_CHUNK_ELEMS) -> SeriesResult:
    """Plan and read a whole run (plain-function form of :func:`plan_series` + :func:`iter_series`)."""
    result = plan_series(paths, stall_threshold, explode_factor)
    gen = iter_series(result, token, chunk_elems)
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def _close(ckpt: Checkpoint | None) -> None:
    if ckpt is not None:
        ckpt.close()


def _by_name(ckpt: Checkpoint) -> dict[str, TensorInfo]:
    out: dict[str, TensorInfo] = {}
    for entry in ckpt.tensors():
        out.setdefault(entry.name, entry.info)  # the first, if a name repeats (as Checkpoint.tensor)
    return out


@dataclass
class _Measure:
    summary: Summary | None = None
    sums: Sums | None = None
    error: str | None = None


def _measure(info: TensorInfo, before: TensorInfo | None, token: CancelToken | None,
             chunk_elems: int) -> Generator[Progress, None, _Measure]:
    """One streamed pass over ``info`` (paired with ``before`` chunk by chunk when given)."""
    from ckptview.core.values import iter_chunks

    if before is not None:
        sums = Sums()
        try:
            summary = yield from _paired_pass(iter_chunks(before, chunk_elems), iter_chunks(info, chunk_elems),
                                              sums, info.numel, token)
            return _Measure(summary, sums)
        except _SideError as exc:
            if exc.side == "cur":
                return _Measure(error=str(exc))
            # The previous file failed this time (it changed?): still measure this one, without a ratio.
    try:
        summary = yield from iter_summary(_tagged(iter_chunks(info, chunk_elems), "cur"), info.numel, token)
    except _SideError as exc:
        return _Measure(error=str(exc))
    return _Measure(summary)


def _paired_pass(prev_chunks: Iterable[np.ndarray], cur_chunks: Iterable[np.ndarray], sums: Sums, total: int,
                 token: CancelToken | None) -> Generator[Progress, None, Summary]:
    def current() -> Iterator[np.ndarray]:
        pairs = paired_chunks(_tagged(prev_chunks, "prev"), _tagged(cur_chunks, "cur"))
        for ca, cb in _tagged_pairs(pairs):
            sums.add(compare_arrays(ca, cb, max(ca.size, 1)))
            yield cb

    return (yield from iter_summary(current(), total, token))


def _tagged_pairs(pairs: Iterator[tuple[np.ndarray, np.ndarray]]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    try:
        yield from pairs
    except CheckpointError as exc:  # paired_chunks: the two sides disagree on their length
        raise _SideError("cur", str(exc)) from None


def _record(series: TensorSeries, t: int, measure: _Measure) -> None:
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


# ---------------------------------------------------------------------------------------------------
# Figures, modules, findings.


def _stat(s: TensorStats, key: str) -> Any:
    if key == "norm":
        return s.l2
    if key == "inf":
        return s.posinf + s.neginf
    return getattr(s, key)


def _json_number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _list(shape: tuple[int, ...] | None) -> list[int] | None:
    return None if shape is None else list(shape)


def module_names(names: Iterable[str]) -> dict[str, list[str]]:
    """Every dotted prefix of the tensor names ('model', 'model.fc') -> the tensors under it, in order."""
    out: dict[str, list[str]] = {}
    for name in names:
        parts = name.split(".")
        for depth in range(1, len(parts)):
            out.setdefault(".".join(parts[:depth]), []).append(name)
    return out


def module_series(result: SeriesResult, only: Iterable[str] | None = None) -> list[ModuleSeries]:
    """The figures of every module (dotted prefix; just those in ``only`` when given), tensors taken together."""
    from ckptview.core.stats import merge_stats

    count = len(result.checkpoints)
    wanted = set(only) if only is not None else None
    out = []
    for module, members in module_names(result.tensors).items():
        if wanted is not None and module not in wanted:
            continue
        series = [result.tensors[n] for n in members]
        m = ModuleSeries(module, members, *([None] * count for _ in range(8)))
        for t in range(count):
            parts = [s.stats[t] for s in series if s.stats[t] is not None]
            if parts:
                merged = merge_stats(parts)  # type: ignore[arg-type]
                m.norm[t], m.mean[t], m.std[t] = merged.l2, merged.mean, merged.std
                m.abs_max[t] = merged.abs_max
                m.nan[t], m.inf[t] = merged.nan, merged.posinf + merged.neginf
            compared = [s for s in series if s.sq_change[t] is not None]
            if compared:
                dd = sum(s.sq_change[t] for s in compared)  # type: ignore[misc]
                aa = sum(s.stats[t - 1].l2 ** 2 for s in compared)  # type: ignore[union-attr]
                ratio = math.sqrt(dd) / math.sqrt(aa) if aa > 0 else (0.0 if dd == 0 else None)
                m.update_ratio[t] = ratio if ratio is None or math.isfinite(ratio) else None
                numel = sum(s.compared[t] for s in compared)  # type: ignore[misc]
                m.frac_changed[t] = sum(s.changed[t] for s in compared) / numel if numel else 0.0  # type: ignore[misc]
        out.append(m)
    return out


def _shape_text(shape: tuple[int, ...] | None) -> str:
    return "[" + ", ".join(map(str, shape or ())) + "]"


def _num(x: float) -> str:
    return f"{x:.4g}"


def find_findings(result: SeriesResult) -> list[Finding]:
    """Every finding over the checkpoints completed so far, in run order then tensor order."""
    done = result.done
    refs = result.checkpoints
    found: list[tuple[int, int, Finding]] = []

    def add(kind: str, order: int, name: str | None, t: int, detail: str) -> None:
        found.append((t, order, Finding(kind, name, t, refs[t].path, detail)))

    for t in range(done):
        if refs[t].error is not None:
            add("unreadable", -1, None, t, refs[t].error or "")
    for order, (name, s) in enumerate(result.tensors.items()):
        first_nan = first_inf = False
        for t in range(done):
            if refs[t].error is not None:
                continue
            if s.errors[t] is not None:
                add("unreadable", order, name, t, s.errors[t] or "")
            neighbour = t > 0 and refs[t - 1].error is None
            if neighbour:
                if s.present(t) and not s.present(t - 1):
                    add("appeared", order, name, t, f"new tensor {s.dtypes[t]} {_shape_text(s.shapes[t])}")
                elif s.present(t - 1) and not s.present(t):
                    add("disappeared", order, name, t,
                        f"{s.dtypes[t - 1]} {_shape_text(s.shapes[t - 1])} is no longer in this checkpoint")
                elif s.present(t) and s.present(t - 1):
                    if s.shapes[t] != s.shapes[t - 1]:
                        add("shape_changed", order, name, t,
                            f"shape {_shape_text(s.shapes[t - 1])} -> {_shape_text(s.shapes[t])}")
                    if s.dtypes[t] != s.dtypes[t - 1]:
                        add("dtype_changed", order, name, t, f"dtype {s.dtypes[t - 1]} -> {s.dtypes[t]}")
            st = s.stats[t]
            if st is None:
                continue
            if st.nan and not first_nan:
                first_nan = True
                add("nan", order, name, t, f"first NaN: {st.nan} of {st.numel} values")
            inf = st.posinf + st.neginf
            if inf and not first_inf:
                first_inf = True
                add("inf", order, name, t, f"first Inf: {inf} of {st.numel} values")
            before = s.stats[t - 1] if neighbour else None
            if before is not None and before.l2 > 0 and st.l2 > result.explode_factor * before.l2:
                add("explosion", order, name, t,
                    f"norm {_num(before.l2)} -> {_num(st.l2)} (x{_num(st.l2 / before.l2)}, "
                    f"factor {_num(result.explode_factor)})")
        stall = _stall_start(s, done, result.stall_threshold)
        if stall is not None:
            last = s.update_ratio[done - 1]
            if result.stall_threshold > 0:
                detail = (f"update ratio below {_num(result.stall_threshold)} from here on "
                          f"({done - stall} of {done} checkpoints; last {_num(last or 0.0)})")
            else:
                detail = f"no change from here on ({done - stall} of {done} checkpoints)"
            add("stalled", order, name, stall, detail)
    found.sort(key=lambda item: (item[0], item[1]))
    return [f for _, _, f in found]


def _stall_start(s: TensorSeries, done: int, threshold: float) -> int | None:
    """The first checkpoint of the run's tail over which the tensor did not (or barely) change."""
    start = None
    for t in range(done - 1, 0, -1):
        ratio, frac = s.update_ratio[t], s.frac_changed[t]
        if ratio is None or not (ratio < threshold if threshold > 0 else ratio == 0 and frac == 0):
            break
        start = t
    return start


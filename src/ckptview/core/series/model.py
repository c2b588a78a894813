"""The figures of a training run, per tensor and checkpoint, and what stands out (plain data, Qt-free)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ckptview.core import dtypes
from ckptview.core.checkpoint import module_prefixes
from ckptview.core.compare.diff import Sums
from ckptview.core.compare.sections import STEP_KEYS
from ckptview.core.figures.stats import TensorStats, merge_stats
from ckptview.core.jobs import Progress
from ckptview.core.series.discover import Position
from ckptview.core.series.logged import CHECKPOINT, BestCheckpoint, RunLog, ScalarCurve, curve_json, place

FIGURES = ("norm", "mean", "std", "abs_max", "nan", "inf", "update_ratio", "frac_changed")
SPECTRAL_FIGURES = ("alpha", "stable_rank")  # with --spectral: of 2-D weights (spectral.matrix_of)


@dataclass
class TensorFigures:
    """One tensor in one checkpoint: its statistics (or why not), and the sums of its update from the
    previous checkpoint of the chain (None when there is no comparable previous tensor)."""

    stats: TensorStats | None = None
    error: str | None = None
    sums: Sums | None = None
    alpha: float | None = None  # with ChainTask.spectral: of a 2-D weight whose spectrum could be fitted
    stable_rank: float | None = None
    spectral: bool = False  # its spectrum was looked at (a cache entry without it is read again)


@dataclass
class CheckpointRef:
    """One checkpoint of the run, in run order."""

    path: str
    position: Position
    format: str = ""
    nbytes: int = 0  # bytes of its tensors (progress)
    error: str | None = None  # could not be opened or read as a whole, or changed on disk while read
    unsafe_globals: list[str] = field(default_factory=list)  # globals outside the safe set (recorded, never run)
    # The scalars it holds about the run (series/scalars.py: loss, lr, epoch, a monitored metric, ...) and
    # the best checkpoint its state names (a dict of BestCheckpoint's fields; kept as is in the cache).
    values: dict[str, float] = field(default_factory=dict)
    best: dict[str, Any] | None = None

    @property
    def file_name(self) -> str:
        """The checkpoint's own name (the last component of its path)."""
        return os.path.basename(os.path.normpath(self.path)) or self.path

    def to_json(self) -> dict[str, Any]:
        """The contract's checkpoint object (with where the step and epoch were found)."""
        p = self.position
        out: dict[str, Any] = {"path": self.path, "step": p.step, "epoch": p.epoch,
                               "step_source": p.step_source, "epoch_source": p.epoch_source,
                               "format": self.format, "unsafe_globals": list(self.unsafe_globals)}
        out["values"] = {k: _json_number(v) for k, v in self.values.items()}
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
    param: str | None = None  # optimizer state: the parameter it belongs to (the optimizer mapping's name)
    # Weight spectra (``series --spectral``): per checkpoint, None where absent or not analysed; empty
    # lists when the run was read without spectra.
    alpha: list[float | None] = field(default_factory=list)
    stable_rank: list[float | None] = field(default_factory=list)

    @classmethod
    def empty(cls, name: str, count: int) -> TensorSeries:
        """A tensor absent everywhere so far."""
        columns: list[list[Any]] = [[None] * count for _ in range(9)]
        return cls(name, *columns)  # type: ignore[arg-type]  # nine lists, then the defaults

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

    def set_spectral(self, t: int, alpha: float | None, stable_rank: float | None) -> None:
        """Record checkpoint ``t``'s alpha and stable rank (the lists grow to the run's length)."""
        count = len(self.shapes)
        for column, value in ((self.alpha, alpha), (self.stable_rank, stable_rank)):
            column.extend([None] * (count - len(column)))
            column[t] = value

    def spectral(self, key: str) -> list[float | None]:
        """``alpha`` or ``stable_rank`` over the run (None where absent or not analysed)."""
        column = self.alpha if key == "alpha" else self.stable_rank
        return list(column) + [None] * (len(self.shapes) - len(column))

    def to_json(self, spectral: bool = False) -> dict[str, Any]:
        """The contract's tensor object (with ``alpha`` and ``stable_rank`` when ``spectral``)."""
        out: dict[str, Any] = {"name": self.name, "shape": _list(self.shape), "dtype": self.dtype}
        for key in FIGURES:
            out[key] = [_json_number(v) for v in self.figure(key)]
        if spectral:
            for key in SPECTRAL_FIGURES:
                out[key] = [_json_number(v) for v in self.spectral(key)]
        out["shapes"] = [_list(s) for s in self.shapes]
        out["dtypes"] = list(self.dtypes)
        if self.param is not None:
            out["param"] = self.param
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

    # nan | inf | stalled | explosion | appeared | disappeared | shape_changed | dtype_changed | unreadable | unsafe
    # | alpha (--spectral)
    kind: str
    tensor: str | None
    index: int  # checkpoint index in run order
    checkpoint: str
    detail: str
    module: str | None = None  # loss_spike: the module whose update stood out at that checkpoint

    def to_json(self, refs: list[CheckpointRef]) -> dict[str, Any]:
        """The contract's finding object (plus the checkpoint's index and step, and a module where one is named)."""
        out = {"kind": self.kind, "tensor": self.tensor, "checkpoint": self.checkpoint, "detail": self.detail,
               "index": self.index, "step": refs[self.index].position.step if self.index < len(refs) else None}
        if self.module is not None:
            out["module"] = self.module
        return out


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
    spectral: bool = False  # read with weight spectra (alpha, stable rank)
    log: RunLog | None = None  # what the run logged beside its checkpoints (series/log_files.py), once read

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
        """How checkpoint ``t`` is called on an axis: 'step 300', 'epoch 2', or its name (also when it has no
        step or epoch, as an unreadable file may not)."""
        pos = self.checkpoints[t].position
        if self.order_by == "step" and pos.step is not None:
            return f"step {pos.step}"
        if self.order_by == "epoch" and pos.epoch is not None:
            return f"epoch {pos.epoch}"
        return self.checkpoints[t].file_name

    def x_values(self) -> list[float]:
        """The x coordinate of every checkpoint: its step, epoch, or index."""
        out = []
        for i, ref in enumerate(self.checkpoints):
            pos = ref.position
            value = pos.step if self.order_by == "step" else pos.epoch if self.order_by == "epoch" else None
            out.append(float(value) if value is not None else float(i))
        return out

    def scalar_curves(self) -> list[ScalarCurve]:
        """Every scalar the run holds: one curve per value its checkpoints hold (loss, lr, ...), then the
        curves its log files hold (`log`)."""
        curves: dict[str, ScalarCurve] = {}
        for t, ref in enumerate(self.checkpoints):
            for name, value in ref.values.items():
                curve = curves.get(name)
                if curve is None:
                    curve = curves[name] = ScalarCurve(name, "checkpoint", CHECKPOINT)
                curve.add(ref.position.step, ref.position.epoch, value, t)
        return list(curves.values()) + (list(self.log.curves) if self.log is not None else [])

    def best_checkpoint(self) -> tuple[BestCheckpoint, int | None] | None:
        """The best checkpoint a trainer's state names (the log's, else the last checkpoint's own state), and
        its index in the run (None when it is not one of the run's checkpoints)."""
        best = self.log.best if self.log is not None else None
        if best is None:
            own = next((ref.best for ref in reversed(self.checkpoints) if ref.best), None)
            try:
                best = BestCheckpoint(**own) if own is not None else None
            except TypeError:  # a cache entry of another shape
                best = None
            if best is None:
                return None
        index = None
        if best.path:
            wanted = best.path.rstrip("/\\")
            index = next((t for t, ref in enumerate(self.checkpoints) if ref.path.rstrip("/\\") == wanted), None)
            if index is None:  # written on another machine, or the run moved: by its name
                name = os.path.basename(wanted.replace("\\", "/"))
                index = next((t for t, ref in enumerate(self.checkpoints) if ref.file_name == name), None)
        if index is None and best.step is not None:
            index = next((t for t, ref in enumerate(self.checkpoints) if ref.position.step == best.step), None)
        return best, index

    def to_json(self) -> dict[str, Any]:
        """The ``ckptview series --json`` object."""
        x = self.x_values()
        best = self.best_checkpoint()
        log = self.log if self.log is not None else RunLog()
        return {
            "checkpoints": [r.to_json() for r in self.checkpoints],
            "order": {"by": self.order_by, "sources": self.order_sources},
            "tensors": [t.to_json(self.spectral) for t in self.tensors.values()],
            "modules": [m.to_json() for m in module_series(self)],
            "findings": [f.to_json(self.checkpoints) for f in self.findings],
            "thresholds": {"stall_threshold": self.stall_threshold, "explode_factor": self.explode_factor},
            "scalars": [curve_json(c, place(c, self.order_by, x)) for c in self.scalar_curves()],
            "best_checkpoint": None if best is None else {
                "source": best[0].source, "metric": best[0].metric, "value": _json_number(best[0].value),
                "path": best[0].path, "step": best[0].step, "index": best[1]},
            "hyper_parameters": [{"name": n, "value": v, "source": s} for n, v, s in log.hyper_parameters],
            "log_files": [f.to_json() for f in log.files],
        }


@dataclass(frozen=True)
class SeriesProgress(Progress):
    """Progress of a run; ``checkpoint`` is the index whose figures were just completed (-1: none)."""

    checkpoint: int = -1


# Per-module figures: a module's floating-point tensors other than step counters, taken together.

def is_counter(s: TensorSeries) -> bool:
    """True for what counts rather than learns: a tensor not floating-point, or a one-element step counter."""
    dtype = s.dtype
    if dtype is not None and not (dtypes.is_floating(dtype) or dtypes.is_complex(dtype)):
        return True
    shape = s.shape
    return shape is not None and math.prod(shape) == 1 and s.name.rsplit(".", 1)[-1] in STEP_KEYS


def module_names(names: Iterable[str]) -> dict[str, list[str]]:
    """Every dotted prefix of the tensor names ('model', 'model.fc') -> the tensors under it, in order."""
    out: dict[str, list[str]] = {}
    for name in names:
        for prefix in module_prefixes(name):  # bounded: a 100,000-dot name is not 100,000 modules
            out.setdefault(prefix, []).append(name)
    return out


def module_series(result: SeriesResult, only: Iterable[str] | None = None) -> list[ModuleSeries]:
    """The figures of every module (dotted prefix; just those in ``only`` when given), its floating-point
    tensors other than step counters taken together."""
    count = len(result.checkpoints)
    wanted = set(only) if only is not None else None
    out = []
    for module, members in module_names(result.tensors).items():
        if wanted is not None and module not in wanted:
            continue
        # Over what learns: a step counter (1 -> 50) would outweigh a BatchNorm's four weights.
        series = [s for n in members if not is_counter(s := result.tensors[n])]
        columns: list[list[Any]] = [[None] * count for _ in range(8)]
        m = ModuleSeries(module, members, *columns)
        for t in range(count):
            parts = [st for s in series if (st := s.stats[t]) is not None]
            if parts:
                merged = merge_stats(parts)
                m.norm[t], m.mean[t], m.std[t] = merged.l2, merged.mean, merged.std
                m.abs_max[t] = merged.abs_max
                m.nan[t], m.inf[t] = merged.nan, merged.posinf + merged.neginf
            compared = [s for s in series if s.sq_change[t] is not None]
            if compared:
                # The change, its count and the previous stats are set together (timeline.record_figures);
                # previous stats missing count as a zero norm there, and so here.
                dd = sum(s.sq_change[t] or 0.0 for s in compared)
                aa = sum(prev.l2 ** 2 for s in compared if (prev := s.stats[t - 1]) is not None)
                ratio = math.sqrt(dd) / math.sqrt(aa) if aa > 0 else (0.0 if dd == 0 else None)
                m.update_ratio[t] = ratio if ratio is None or math.isfinite(ratio) else None
                numel = sum(s.compared[t] or 0 for s in compared)
                m.frac_changed[t] = sum(s.changed[t] or 0 for s in compared) / numel if numel else 0.0
        out.append(m)
    return out


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

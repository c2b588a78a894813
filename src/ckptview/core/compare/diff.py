"""Compare two checkpoints tensor by tensor, streamed chunk by chunk (Qt-free, no torch).

Statuses (the strings of ``ckptview diff --json``):

- ``identical``: same dtype and shape and every value equal (NaN matches NaN at the same position,
  ``-0.0`` matches ``0.0``). Byte-equal chunks are recognised by comparing raw bytes, without float math.
- ``changed``: same dtype and shape, some value differs.
- ``dtype_mismatch``: same shape, different dtype; the values are still compared (figures given).
- ``shape_mismatch``: different shapes (no figures).
- ``only_a`` / ``only_b``: the tensor exists on one side only.
- ``error``: a side's values cannot be read (broken entry, truncated file); ``error`` says why.

Figures, for the comparable statuses, computed in float64 (complex128 when either side is complex):

- ``max_abs_diff``, ``mean_abs_diff``: max and mean of ``|B - A|``;
- ``rel_l2``: ``||B - A|| / ||A||`` (L2 norms of the flattened tensors; ``inf`` when ``||A|| = 0`` and
  B differs, so ``null`` in JSON);
- ``cosine``: ``<A, B> / (||A|| ||B||)`` (real part of ``sum(conj(A) * B)`` for complex); ``None`` when
  a norm is zero, except that identical tensors have cosine 1;
- ``frac_changed``: the fraction of all elements whose value differs.

A quantized checkpoint (`core/read/quant`) is compared by its logical tensors: the real, dequantized weights.
Comparing a model with its quantized version tells **what quantization cost**: each row whose side holds a
quantized weight gets `quantization` (its scheme) and ``sqnr_db``, the signal-to-quantization-noise ratio
``10 log10(||A||^2 / ||B - A||^2)`` (``rel_l2`` is then the relative error ``||Q - W|| / ||W||``,
``max_abs_diff`` the max |error|); the result's `quantization` section gives the same over all quantized
weights together and lists them worst first. A side's names and values can be seen through a `SideView`
(a format whose tensors are named or laid out otherwise, as GGUF's: its names mapped, its rows unpermuted).

NaN and infinities: a position where both sides hold NaN, or the same infinity, is unchanged. Any other
position with a NaN or infinity on either side is changed (it counts in ``frac_changed`` and in
``nonfinite_changed``) but is left out of the other figures, which are computed over the positions where
both values are finite. Integers are compared in float64 (exact up to 2**53).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ckptview.core import dtypes
from ckptview.core.checkpoint import Checkpoint, Quantization, TensorEntry, TensorInfo
from ckptview.core.compare.align import Alignment, align
from ckptview.core.compare.sections import classify_rows, match_tied
from ckptview.core.compare.values import ValueChange, value_changes
from ckptview.core.errors import CheckpointError, FileChangedError
from ckptview.core.inspect.roles import learnable_dtype
from ckptview.core.jobs import CancelToken, Progress, drain, relay
from ckptview.core.read.bytes.files import read_ahead
from ckptview.core.read.values.reading import ReadBuffers, iter_chunks, read_small
from ckptview.core.read.values.repeats import paired_parts

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

# Values are read 256 Ki elements at a time (1 MiB of fp32: sequential reads whose buffers the
# allocator reuses; 16 MiB reads cost a fresh mapping and its page faults each time, twice as slow)
# and compared in blocks of 64 Ki, whose float64 work buffers (4 x 512 KiB) stay in cache.
DIFF_CHUNK_ELEMS = 1 << 18
BLOCK_ELEMS = 1 << 16

STATUSES = ("changed", "dtype_mismatch", "shape_mismatch", "only_a", "only_b", "error", "identical")
FIGURES = ("max_abs_diff", "mean_abs_diff", "rel_l2", "cosine", "frac_changed")


@dataclass
class Sums:
    """Running sums over the compared positions of one tensor pair (they merge by addition)."""

    numel: int = 0
    finite: int = 0  # positions where both values are finite
    changed: int = 0
    nonfinite_changed: int = 0
    max_abs: float = 0.0
    sum_abs: float = 0.0
    aa: float = 0.0  # ||A||^2
    bb: float = 0.0
    ab: float = 0.0  # Re <A, B>
    dd: float = 0.0  # ||B - A||^2

    def add(self, other: Sums) -> None:
        """Merge another chunk's sums into these."""
        self.numel += other.numel
        self.finite += other.finite
        self.changed += other.changed
        self.nonfinite_changed += other.nonfinite_changed
        self.max_abs = max(self.max_abs, other.max_abs)
        self.sum_abs += other.sum_abs
        self.aa += other.aa
        self.bb += other.bb
        self.ab += other.ab
        self.dd += other.dd

    def figures(self) -> dict[str, float | None]:
        """The five figures of the module docstring."""
        norm_a, norm_b = math.sqrt(self.aa), math.sqrt(self.bb)
        rel: float
        cosine: float | None
        if self.changed == 0:
            rel, cosine = 0.0, 1.0
        else:
            rel = math.sqrt(self.dd) / norm_a if norm_a > 0 else (0.0 if self.dd == 0 else math.inf)
            cosine = self.ab / (norm_a * norm_b) if norm_a > 0 and norm_b > 0 else None
            if cosine is not None:
                cosine = max(-1.0, min(1.0, cosine))
        return {
            "max_abs_diff": self.max_abs if self.finite else None,
            "mean_abs_diff": self.sum_abs / self.finite if self.finite else None,
            "rel_l2": rel,
            "cosine": cosine,
            "frac_changed": self.changed / self.numel if self.numel else 0.0,
        }


@dataclass
class TensorDiff:
    """One row of a comparison."""

    name: str
    status: str
    name_a: str | None = None
    name_b: str | None = None
    info_a: TensorInfo | None = field(default=None, repr=False)
    info_b: TensorInfo | None = field(default=None, repr=False)
    extra: bool = False  # outside the model state dict
    section: str = "weights"  # weights | other (optimizer state, sample inputs, counters: see sections.py)
    role: str = "parameter"  # parameter | buffer (running statistics, integer counters: see roles.py)
    label: str | None = None  # how a person reads the row ("exp_avg of encoder.0.weight"); None: the name
    tied_to: str | None = None  # matched to the other side's twin over the same storage (a tied weight)
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    rel_l2: float | None = None
    cosine: float | None = None
    frac_changed: float | None = None
    nonfinite_changed: int = 0
    error: str | None = None
    sums: Sums | None = field(default=None, repr=False)
    done: bool = False  # figures computed (or nothing to compute)

    @property
    def quantized(self) -> Quantization | None:
        """The quantization of whichever side holds a quantized weight (B's first), else None."""
        for info in (self.info_b, self.info_a):
            if info is not None and info.quant is not None:
                return info.quant
        return None

    @property
    def sqnr_db(self) -> float | None:
        """``10 log10(||A||^2 / ||B - A||^2)`` in dB (inf when equal: None in JSON; None without figures)."""
        return sqnr_db(self.sums)

    @property
    def shape_a(self) -> list[int] | None:
        return list(self.info_a.shape) if self.info_a is not None else None

    @property
    def shape_b(self) -> list[int] | None:
        return list(self.info_b.shape) if self.info_b is not None else None

    @property
    def dtype_a(self) -> str | None:
        return self.info_a.dtype if self.info_a is not None else None

    @property
    def dtype_b(self) -> str | None:
        return self.info_b.dtype if self.info_b is not None else None

    def to_json(self) -> dict[str, Any]:
        """The contract's tensor object (NaN/Inf figures become null)."""
        out: dict[str, Any] = {
            "name": self.name, "status": self.status, "shape_a": self.shape_a, "shape_b": self.shape_b,
            "dtype_a": self.dtype_a, "dtype_b": self.dtype_b,
        }
        for key in FIGURES:
            out[key] = _finite_or_none(getattr(self, key))
        out["name_a"], out["name_b"] = self.name_a, self.name_b
        out["section"] = self.section
        out["role"] = self.role
        if self.label:
            out["label"] = self.label
        if self.tied_to:
            out["tied_to"] = self.tied_to
        if self.nonfinite_changed:
            out["nonfinite_changed"] = self.nonfinite_changed
        if self.error:
            out["error"] = self.error
        quant = self.quantized
        if quant is not None:  # what quantization cost this weight
            out["sqnr_db"] = _finite_or_none(self.sqnr_db)
            out["quantization"] = {"scheme": quant.scheme, "label": quant.label,
                                   "bits_per_weight": quant.bits_per_weight,
                                   "side": "b" if self.info_b is not None and self.info_b.quant is quant else "a"}
        return out


def sqnr_db(sums: Sums | None) -> float | None:
    """The signal-to-noise ratio of B against A in dB: ``10 log10(||A||^2 / ||B - A||^2)``."""
    if sums is None:
        return None
    if sums.dd == 0:
        return math.inf
    if sums.aa == 0:
        return -math.inf
    return 10.0 * math.log10(sums.aa / sums.dd)


@dataclass(frozen=True)
class SideView:
    """How one side of a comparison is seen: `rename` maps a stored name to the name it is aligned by
    (None: left out), `transform` gives the tensor whose values are compared (GGUF's q/k rows unpermuted)."""

    rename: Callable[[str], str | None] | None = None
    transform: Callable[[str, TensorInfo], TensorInfo] | None = None

    def entries(self, entries: Sequence[TensorEntry]) -> list[TensorEntry]:
        """`entries` renamed and transformed (the path of a flat name follows its new name)."""
        out: list[TensorEntry] = []
        for entry in entries:
            renamed = entry.name if self.rename is None else self.rename(entry.name)
            if renamed is None:
                continue
            name: str = renamed
            info = entry.info if self.transform is None else self.transform(entry.name, entry.info)
            path = (name,) if entry.path == (entry.name,) and name != entry.name else entry.path
            out.append(TensorEntry(name, path, info, entry.node))
        return out


@dataclass
class DiffResult:
    """A whole comparison: the alignment and one TensorDiff per aligned name, in model order."""

    path_a: str
    path_b: str
    alignment: Alignment
    tensors: list[TensorDiff]
    values: list[ValueChange] = field(default_factory=list)  # non-tensor entries that differ (compare/values.py)

    @property
    def weights(self) -> list[TensorDiff]:
        """The rows of model weights (every row when neither side has any: nothing else to compare)."""
        rows = [t for t in self.tensors if t.section == "weights"]
        return rows if rows else list(self.tensors)

    @property
    def other(self) -> list[TensorDiff]:
        """The rows outside the model weights (optimizer state, sample inputs, step counters)."""
        weights = set(map(id, self.weights))
        return [t for t in self.tensors if id(t) not in weights]

    @property
    def parameters(self) -> list[TensorDiff]:
        """The weight rows the headline is about: the model's learnable parameters (see `roles`)."""
        return [t for t in self.weights if t.role == "parameter"]

    @property
    def buffers(self) -> list[TensorDiff]:
        """The weight rows that are buffers: running statistics, integer counters (their own line)."""
        return [t for t in self.weights if t.role != "parameter"]

    def summary(self, rows: list[TensorDiff] | None = None) -> dict[str, int]:
        """Count per status over the weight rows (or ``rows``; only statuses that occur)."""
        out: dict[str, int] = {}
        for t in self.weights if rows is None else rows:
            out[t.status] = out.get(t.status, 0) + 1
        return out

    @property
    def identical(self) -> bool:
        """True when every model weight is identical."""
        return all(t.status == "identical" for t in self.weights)

    def overall_rel_l2(self, rows: list[TensorDiff] | None = None) -> float | None:
        """``||B - A|| / ||A||`` over the parameters (or the floating-point ones of ``rows``) flattened
        into one vector: the headline (None if there is nothing to sum).

        Integer tensors never count: a step counter going 5 -> 55 is a relative change of 10 that would
        drown every weight. Nor do buffers, unless ``rows`` asks for them (their own line).
        """
        dd = aa = 0.0
        seen = False
        for t in self.parameters if rows is None else rows:
            if t.sums is not None and _floating_pair(t):
                seen = True
                dd += t.sums.dd
                aa += t.sums.aa
        if not seen:
            return None
        return math.sqrt(dd) / math.sqrt(aa) if aa > 0 else (0.0 if dd == 0 else math.inf)

    @property
    def quantized(self) -> list[TensorDiff]:
        """The compared weight rows one side of which is a quantized weight, worst (largest error) first."""
        rows = [t for t in self.weights if t.quantized is not None and t.sums is not None and t.rel_l2 is not None]
        return sorted(rows, key=lambda t: -(t.rel_l2 if t.rel_l2 is not None and math.isfinite(t.rel_l2)
                                             else math.inf))

    def quantization_cost(self) -> dict[str, Any] | None:
        """What quantization cost over all quantized weights together (None when neither side has one):
        relative error ``sqrt(sum ||Q - W||^2 / sum ||W||^2)``, SQNR in dB, max |error|, cosine of the
        weights taken as one vector, the schemes, and every weight worst first."""
        rows = self.quantized
        pending = [t for t in self.weights if t.quantized is not None]
        if not pending:
            return None
        total = Sums()
        for t in rows:
            assert t.sums is not None
            total.add(t.sums)
        figures = total.figures() if rows else {}
        schemes = sorted({q.label for t in pending if (q := t.quantized) is not None})
        return {
            "tensors": len(pending), "compared": len(rows), "schemes": schemes,
            "rel_error": _finite_or_none(figures.get("rel_l2")) if rows else None,
            "sqnr_db": _finite_or_none(sqnr_db(total)) if rows else None,
            "max_abs_error": _finite_or_none(figures.get("max_abs_diff")) if rows else None,
            "cosine": _finite_or_none(figures.get("cosine")) if rows else None,
            "worst": [{"name": t.name, "rel_error": _finite_or_none(t.rel_l2), "sqnr_db": _finite_or_none(t.sqnr_db),
                       "max_abs_error": _finite_or_none(t.max_abs_diff), "cosine": _finite_or_none(t.cosine),
                       "scheme": q.label if (q := t.quantized) is not None else None} for t in rows],
        }

    def to_json(self) -> dict[str, Any]:
        """The ``ckptview diff --json`` object."""
        return {key: list(value) if isinstance(value, Iterator) else value for key, value in self.json_items()}

    def json_items(self) -> Iterator[tuple[str, Any]]:
        """`to_json`'s keys and values in order, the two row lists as iterators (written as they come)."""
        al = self.alignment
        yield "a", self.path_a
        yield "b", self.path_b
        yield "strip", {"a": al.strip_a, "b": al.strip_b}
        yield "map", [f"{pa}={pb}" for pa, pb in al.mapping]
        # Every status with its count, zeros included: scripts can index any status.
        yield "summary", {status: self.summary().get(status, 0) for status in STATUSES}
        yield "overall_rel_l2", _finite_or_none(self.overall_rel_l2())  # over the parameters only
        buffers = self.buffers
        yield "buffers_summary", {status: self.summary(buffers).get(status, 0) for status in STATUSES}
        yield "buffers_rel_l2", _finite_or_none(self.overall_rel_l2(buffers))  # floating-point buffers
        yield "not_compared", {"a": al.not_compared_a, "b": al.not_compared_b}
        # The values beside the tensors that differ (epoch, step, lr, loss, hyper-parameters, ...), ranked.
        yield "values", [v.to_json() for v in self.values]
        yield "tensors", (t.to_json() for t in self.weights)
        # Entries outside the model weights: same row shape, their own counts, not in the exit status.
        yield "other", (t.to_json() for t in self.other)
        yield "other_summary", {status: self.summary(self.other).get(status, 0) for status in STATUSES}
        cost = self.quantization_cost()
        if cost is not None:  # a quantized side: what quantization cost, the worst weights first
            yield "quantization", cost


@dataclass(frozen=True)
class DiffProgress(Progress):
    """Progress of a comparison; ``index`` is the row whose figures were just completed (-1: none yet)."""

    index: int = -1


def _floating_pair(t: TensorDiff) -> bool:
    """Both sides hold values a model learns (floating point, complex, quantized): no integer counters."""
    return all(d is None or learnable_dtype(d) for d in (t.dtype_a, t.dtype_b))


def _finite_or_none(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


# ---------------------------------------------------------------------------------------------------
# Planning: alignment and the statuses metadata decides.


def plan_diff(a: Checkpoint, b: Checkpoint, strip_a: str | None = None, strip_b: str | None = None,
              mapping: Sequence[tuple[str, str]] = (), views: tuple[SideView | None, SideView | None] = (None, None)
              ) -> DiffResult:
    """Align A and B and set every status that needs no values; comparable rows are left ``pending``.
    `views`: how each side's names and values are seen (see `SideView`)."""
    entries_a = a.tensors() if views[0] is None else views[0].entries(a.tensors())
    entries_b = b.tensors() if views[1] is None else views[1].entries(b.tensors())
    alignment = align(entries_a, entries_b, strip_a, strip_b, mapping)
    match_tied(alignment, a, b)
    rows = []
    for pair in alignment.pairs:
        ia = pair.a.info if pair.a is not None else None
        ib = pair.b.info if pair.b is not None else None
        row = TensorDiff(pair.key, "pending", pair.a.name if pair.a else None, pair.b.name if pair.b else None,
                         ia, ib, pair.extra)
        if ia is None or ib is None:
            row.status, row.done = ("only_b" if ia is None else "only_a"), True
        elif tuple(ia.shape) != tuple(ib.shape):
            row.status, row.done = "shape_mismatch", True
        elif ia.broken or ib.broken:
            row.status, row.done, row.error = "error", True, ia.broken or ib.broken
        elif ia.storage is None and ib.storage is None:  # meta tensors: shape and dtype are all there is
            same = dtypes.canonical(ia.dtype) == dtypes.canonical(ib.dtype)
            row.status, row.done = ("identical" if same else "dtype_mismatch"), True
        row.tied_to = pair.tied_to
        rows.append(row)
    classify_rows(rows, a, b)
    try:
        values = value_changes(a, b)
    except CheckpointError:  # more values than the files pay for: the tensors are still compared
        values = []
    return DiffResult(a.path, b.path, alignment, rows, values)


# ---------------------------------------------------------------------------------------------------
# Streaming the values.


def _pair_bytes(row: TensorDiff) -> int:
    """Bytes a pending row reads (both sides exist for every row still to compare)."""
    assert row.info_a is not None and row.info_b is not None
    return row.info_a.nbytes + row.info_b.nbytes


def iter_compare(result: DiffResult, token: CancelToken | None = None,
                 chunk_elems: int = DIFF_CHUNK_ELEMS) -> Generator[DiffProgress, None, DiffResult]:
    """Fill in the figures of every pending row of ``result`` in place; yields progress per chunk.

    Small tensors' bytes come from windows of each file read at once (`read_ahead`): a diff of 100,000
    small tensors makes a read per megabyte, not two per tensor.
    """
    return read_ahead(lambda ahead: _iter_compare(result, token, chunk_elems, ahead))


def _iter_compare(result: DiffResult, token: CancelToken | None, chunk_elems: int,
                  ahead: ReadAhead | None = None) -> Generator[DiffProgress, None, DiffResult]:
    pending = [i for i, t in enumerate(result.tensors) if not t.done]
    sizes = [_pair_bytes(result.tensors[i]) for i in pending]
    total = sum(sizes)
    done = 0
    works: dict[np.dtype, _Work] = {}  # one set of buffers per wide dtype for every pair
    buffers = (ReadBuffers(), ReadBuffers())  # and the read buffers of each side
    # A pair of views seen before (a tied weight on both sides: lm_head over wte's storage) is read once.
    seen: dict[tuple[tuple[object, ...], tuple[object, ...]], Sums] = {}
    yield DiffProgress(0, total, "comparing")
    for index, size in zip(pending, sizes, strict=True):
        row = result.tensors[index]
        ia, ib = row.info_a, row.info_b
        assert ia is not None and ib is not None
        key = (_view_key(ia), _view_key(ib))
        try:
            sums = replace(seen[key]) if key in seen else _compare_small(ia, ib, token, chunk_elems, works, ahead)
            if sums is None:
                def rebase(step: Progress, base: int = done, name: str = row.name) -> DiffProgress:
                    return DiffProgress(base + step.done, total, name)

                sums = yield from relay(iter_compare_tensors(ia, ib, token, chunk_elems, ahead, works, buffers),
                                        rebase)
        except FileChangedError:
            raise  # every figure after this would compare another file: the whole diff fails
        except CheckpointError as exc:
            row.status, row.error, row.done = "error", str(exc), True
        else:
            _set_figures(row, sums)
            if key[0] and key[1]:
                seen.setdefault(key, sums)
        done += size
        yield DiffProgress(done, total, row.name, index)
    return result


def _view_key(info: TensorInfo) -> tuple[object, ...]:
    """What makes two tensors the same values: one storage object, viewed alike (empty: no storage)."""
    if info.storage is None:
        return ()
    return (id(info.storage), info.dtype, tuple(info.shape), tuple(info.stride), info.offset)


def _set_figures(row: TensorDiff, sums: Sums) -> None:
    row.sums = sums
    same_dtype = dtypes.canonical(row.dtype_a or "") == dtypes.canonical(row.dtype_b or "")
    row.status = "dtype_mismatch" if not same_dtype else ("identical" if sums.changed == 0 else "changed")
    for key, value in sums.figures().items():
        setattr(row, key, value)
    row.nonfinite_changed = sums.nonfinite_changed
    row.done = True


def iter_diff(a: Checkpoint, b: Checkpoint, strip_a: str | None = None, strip_b: str | None = None,
              mapping: Sequence[tuple[str, str]] = (), token: CancelToken | None = None,
              chunk_elems: int = DIFF_CHUNK_ELEMS, views: tuple[SideView | None, SideView | None] = (None, None)
              ) -> Generator[DiffProgress, None, DiffResult]:
    """Plan and compare in one job: yields progress, returns the DiffResult."""
    result = plan_diff(a, b, strip_a, strip_b, mapping, views)
    return (yield from iter_compare(result, token, chunk_elems))


def diff_checkpoints(a: Checkpoint, b: Checkpoint, **kwargs: Any) -> DiffResult:
    """Plain-function form of :func:`iter_diff`."""
    return drain(iter_diff(a, b, **kwargs))


def iter_compare_tensors(ia: TensorInfo, ib: TensorInfo, token: CancelToken | None = None,
                         chunk_elems: int = DIFF_CHUNK_ELEMS, ahead: ReadAhead | None = None,
                         works: dict[np.dtype, _Work] | None = None,
                         buffers: tuple[ReadBuffers, ReadBuffers] | None = None) -> Generator[Progress, None, Sums]:
    """Sums over two same-shape tensors, streamed; yields Progress in bytes of both sides (`ahead`: the
    read-ahead of the walk reading them; `works` and `buffers`: work buffers by wide dtype and each side's
    read buffers, shared by a walk's pairs).

    One pass: both sides' chunks are read in lockstep into read buffers of their own, reused, and
    every figure of a block pair comes from the same widened copies."""
    # Views that repeat their storage: both the same view, their stored parts; one of them, both whole (the
    # other side stores as many elements); both, differently: refused (RepeatedStorage, the pair's error).
    ia, ib, weight, _exact = paired_parts(ia, ib)
    same_bytes_possible = dtypes.canonical(ia.dtype) == dtypes.canonical(ib.dtype)
    wide = _wide_dtype(ia.dtype, ib.dtype)
    size = min(chunk_elems, max(ia.numel, 1), BLOCK_ELEMS)
    work = works.get(wide) if works is not None and size == min(chunk_elems, BLOCK_ELEMS) else None
    if work is None:  # (a block is min(chunk, BLOCK_ELEMS) or the whole pair: the same blocks either way)
        work = _Work(size, wide)
        if works is not None and size == min(chunk_elems, BLOCK_ELEMS):
            works[wide] = work
    sums = Sums()
    done = 0
    per_elem = dtypes.itemsize(ia.dtype) + dtypes.itemsize(ib.dtype)
    total = ia.numel * per_elem * weight
    buf_a, buf_b = buffers if buffers is not None else (ReadBuffers(), ReadBuffers())
    # paired_chunks asks a side for a chunk only once its last is used up: the buffers' rule holds.
    for ca, cb in paired_chunks(iter_chunks(ia, chunk_elems, ahead, expand=True, buffers=buf_a),
                                iter_chunks(ib, chunk_elems, ahead, expand=True, buffers=buf_b)):
        if token is not None:
            token.check()
        sums.add(_weighted(compare_chunk(ca, cb, work, same_bytes_possible), weight))
        done += ca.size * per_elem * weight
        yield Progress(done, total, "comparing")
    return sums


def _weighted(part: Sums, weight: int) -> Sums:
    return repeated_sums(part, weight) if weight != 1 else part


def _compare_small(ia: TensorInfo, ib: TensorInfo, token: CancelToken | None, chunk_elems: int,
                   works: dict[np.dtype, _Work], ahead: ReadAhead | None = None) -> Sums | None:
    """`iter_compare_tensors` in one step for two small contiguous tensors stored plainly in files (the
    same chunk compared by the same code, without the streaming around it); None for any other pair."""
    limit = min(chunk_elems, BLOCK_ELEMS)  # one chunk, one block: exactly what the streamed path computes
    ca = read_small(ia, limit, ahead)
    cb = read_small(ib, limit, ahead) if ca is not None else None
    if ca is None or cb is None or ca.size != cb.size:
        return None
    if token is not None:
        token.check()
    same_bytes_possible = ia.dtype == ib.dtype or dtypes.canonical(ia.dtype) == dtypes.canonical(ib.dtype)
    wide = _wide_dtype(ia.dtype, ib.dtype)
    work = works.get(wide)
    if work is None:
        work = works[wide] = _Work(limit, wide)
    return compare_chunk(ca, cb, work, same_bytes_possible)


def repeated_sums(part: Sums, weight: int) -> Sums:
    """The sums of `part` with every position counted `weight` times (all but the maximum scale)."""
    return Sums(part.numel * weight, part.finite * weight, part.changed * weight, part.nonfinite_changed * weight,
                part.max_abs, part.sum_abs * weight, part.aa * weight, part.bb * weight, part.ab * weight,
                part.dd * weight)


def compare_arrays(a: np.ndarray, b: np.ndarray, chunk_elems: int = DIFF_CHUNK_ELEMS) -> Sums:
    """Sums over two in-memory arrays of the same shape (the same rules as the streamed path)."""
    import numpy as np

    if np.shape(a) != np.shape(b):
        raise ValueError(f"shapes differ: {np.shape(a)} vs {np.shape(b)}")
    fa, fb = np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1)
    work = _Work(min(chunk_elems, max(fa.size, 1)), _wide_np(fa.dtype, fb.dtype))
    sums = Sums()
    for start in range(0, fa.size, chunk_elems):
        sums.add(compare_chunk(fa[start:start + chunk_elems], fb[start:start + chunk_elems], work,
                               fa.dtype == fb.dtype))
    return sums


def paired_chunks(chunks_a: Iterable[np.ndarray], chunks_b: Iterable[np.ndarray]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Re-cut two chunk streams of the same total length into pairs of equal-length 1-D pieces."""
    it_a, it_b = iter(chunks_a), iter(chunks_b)
    ca = cb = None
    while True:
        if ca is None or ca.size == 0:
            ca = next(it_a, None)
            if ca is not None:
                ca = ca.reshape(-1)
        if cb is None or cb.size == 0:
            cb = next(it_b, None)
            if cb is not None:
                cb = cb.reshape(-1)
        if ca is None or cb is None:
            if (ca is None) != (cb is None) and (ca if ca is not None else cb).size:  # type: ignore[union-attr]
                raise CheckpointError("the two tensors yielded different numbers of values")
            return
        n = min(ca.size, cb.size)
        yield ca[:n], cb[:n]
        ca, cb = ca[n:], cb[n:]


def _wide_dtype(name_a: str, name_b: str) -> np.dtype:
    import numpy as np

    return np.dtype(np.complex128 if dtypes.is_complex(name_a) or dtypes.is_complex(name_b) else np.float64)


def _wide_np(a: np.dtype, b: np.dtype) -> np.dtype:
    import numpy as np

    return np.dtype(np.complex128 if a.kind == "c" or b.kind == "c" else np.float64)


class _Work:
    """Reusable wide buffers, so a chunk costs no allocation of its own."""

    def __init__(self, size: int, wide: np.dtype) -> None:
        import numpy as np

        self.wide = wide
        size = min(size, BLOCK_ELEMS)
        self.a = np.empty(size, wide)
        self.b = np.empty(size, wide)
        self.d = np.empty(size, wide)
        self.m = np.empty(size, np.float64)  # |B - A|


def compare_chunk(ca: np.ndarray, cb: np.ndarray, work: _Work, same_dtype: bool) -> Sums:
    """Sums of one pair of equal-length 1-D chunks, block by block (see `BLOCK_ELEMS`)."""
    block = work.a.size
    if ca.size <= block:
        return _compare_block(ca, cb, work, same_dtype)
    sums = Sums()
    for start in range(0, ca.size, block):
        sums.add(_compare_block(ca[start:start + block], cb[start:start + block], work, same_dtype))
    return sums


def _compare_block(ca: np.ndarray, cb: np.ndarray, work: _Work, same_dtype: bool) -> Sums:
    """Sums of one pair of equal-length 1-D pieces no longer than the work buffers."""
    import numpy as np

    n = ca.size
    if n == 0:
        return Sums()
    a, b = work.a[:n], work.b[:n]
    if same_dtype and ca.dtype == cb.dtype and _same_bytes(ca, cb):
        # Byte-equal: nothing changed; only ||A|| is needed (for the overall relative change).
        _widen(ca, a)
        aa = _sq(a)
        if math.isfinite(aa):
            return Sums(numel=n, finite=n, aa=aa, bb=aa, ab=aa)
        fin = np.isfinite(a)
        af = a[fin]
        aa = _sq(af)
        return Sums(numel=n, finite=int(np.count_nonzero(fin)), aa=aa, bb=aa, ab=aa)
    _widen(ca, a)
    _widen(cb, b)
    d, m = work.d[:n], work.m[:n]
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(b, a, out=d)
        dd = _sq(d)
    if not math.isfinite(dd):
        return _careful(a, b, ca, cb, same_dtype)
    np.abs(d, out=m)
    if same_dtype and ca.dtype == cb.dtype and ca.dtype.kind in "iubfc":
        # Every value is finite here, and finite B - A is 0 exactly when B == A (gradual underflow): the
        # count of |B - A| != 0, from a comparison of the narrow values (a third of the float64 count's time).
        changed = int(np.count_nonzero(ca != cb))
    else:  # every |d| is finite and not -0.0: nonzero exactly where its bits are (twice as fast as floats)
        changed = int(np.count_nonzero(m.view(np.uint64)))
    aa, bb = _sq(a), _sq(b)
    return Sums(numel=n, finite=n, changed=changed, max_abs=float(np.maximum.reduce(m)),
                sum_abs=float(np.add.reduce(m)), aa=aa, bb=bb, ab=_inner(aa, bb, dd), dd=dd)


def _careful(a: np.ndarray, b: np.ndarray, ca: np.ndarray, cb: np.ndarray, same_dtype: bool) -> Sums:
    """The slow path of a chunk holding NaN or infinities (or a float64 overflow)."""
    import numpy as np

    n = a.size
    fin = np.isfinite(a) & np.isfinite(b)
    nf = n - int(np.count_nonzero(fin))
    if nf:
        both_nan = np.isnan(a) & np.isnan(b)
        with np.errstate(invalid="ignore"):
            same_inf = np.isinf(a) & (a == b)
        nonfinite_changed = nf - int(np.count_nonzero(both_nan | same_inf))
    else:
        nonfinite_changed = 0
    af, bf = a[fin], b[fin]
    with np.errstate(over="ignore", invalid="ignore"):
        df = bf - af
        m = np.abs(df)
    if same_dtype and ca.dtype.kind in "iub":
        changed = int(np.count_nonzero(ca != cb))
    else:
        changed = int(np.count_nonzero(m)) + nonfinite_changed
    aa, bb, dd = _sq(af), _sq(bf), _sq(df)
    return Sums(numel=n, finite=af.size, changed=changed, nonfinite_changed=nonfinite_changed,
                max_abs=float(m.max()) if m.size else 0.0, sum_abs=float(m.sum()),
                aa=aa, bb=bb, ab=_inner(aa, bb, dd), dd=dd)


def _same_bytes(ca: np.ndarray, cb: np.ndarray) -> bool:
    import numpy as np

    ra = np.ascontiguousarray(ca).reshape(-1).view(np.uint8)
    rb = np.ascontiguousarray(cb).reshape(-1).view(np.uint8)
    if ra.size != rb.size:
        return False
    head = min(ra.size, 64)  # a changed pair almost always differs in its first values: no full pass
    if ra[:head].tobytes() != rb[:head].tobytes():
        return False
    if ra.size % 8 == 0:  # compared as 8-byte words: an eighth of the element comparisons
        return bool(np.array_equal(ra.view(np.uint64), rb.view(np.uint64)))
    return bool(np.array_equal(ra, rb))


def _widen(chunk: np.ndarray, out: np.ndarray) -> None:
    import numpy as np

    if chunk.dtype.kind == "c" and out.dtype.kind != "c":
        raise TypeError("complex values need a complex work buffer")
    if chunk.dtype.kind not in "fciub":  # ml_dtypes (bf16, fp8) convert through float32 exactly
        chunk = chunk.astype(np.float32)
    np.copyto(out, chunk, casting="unsafe")


def _sq(x: np.ndarray) -> float:
    """Squared L2 norm in float64. einsum, not np.dot: a BLAS dot spins its thread pool and runs 10-30x
    slower on a busy machine, and the extra threads buy nothing for a memory-bound sum."""
    import numpy as np

    if x.dtype.kind == "c":
        x = x.view(np.float64)  # |z|^2 summed = re^2 + im^2 summed
    return float(np.einsum("i,i->", x, x))


def _inner(aa: float, bb: float, dd: float) -> float:
    """Re <A, B> from the three squared norms: ||B - A||^2 = ||A||^2 + ||B||^2 - 2 Re <A, B>.

    Saves a pass; the error is about 1e-16 * (||A||^2 + ||B||^2), so the cosine is off by ~1e-16 at most.
    """
    return (aa + bb - dd) / 2


def diff_chunks(ia: TensorInfo, ib: TensorInfo, chunk_elems: int = DIFF_CHUNK_ELEMS) -> Iterator[np.ndarray]:
    """``B - A`` in float64 (complex128 when complex), chunk by chunk, for a histogram of the change."""
    import numpy as np

    ia, ib, _weight, _exact = paired_parts(ia, ib)  # bounded by what the sides store (see iter_compare_tensors)
    wide = _wide_dtype(ia.dtype, ib.dtype)
    for ca, cb in paired_chunks(iter_chunks(ia, chunk_elems, expand=True), iter_chunks(ib, chunk_elems, expand=True)):
        a = np.empty(ca.size, wide)
        b = np.empty(cb.size, wide)
        _widen(ca, a)
        _widen(cb, b)
        with np.errstate(invalid="ignore", over="ignore"):
            yield b - a

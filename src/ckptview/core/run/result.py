"""The typed result of a forward-pass run, shared by the worker, the CLI, the GUI and tests (no torch).

Each record has `to_json()` (the exact JSON of `ckptview run --json`: keys in the documented order,
optional keys left out when they do not apply) and `from_json()` (which checks what the worker sent and
raises `ProtocolError` for anything malformed). Records are also read-only mappings over their JSON keys,
so a script written against the earlier dict form (`result["load"]["missing"]`) keeps working. A key
that is absent takes the field's default; a key that is present must have the right type.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ckptview.core.run.json_checks import (
    MAX_ITEMS,
    MAX_OUTPUTS,
    MAX_TEXT,
    ProtocolError,
    get_int,
    get_ints,
    get_list,
    get_num,
    get_obj,
    get_opt_int,
    get_opt_num,
    get_opt_str,
    get_scalars,
    get_str,
    get_strs,
)
from ckptview.core.run.record import Record
from ckptview.core.units import figure, human_bytes, plural

# `architecture.source` of a class the user gave as model code: a value of the `--json` contract (it has always
# been the flag's name), worded by `result_lines`.
USER_CODE = "--model"

__all__ = ["CompareResult", "InputReport", "Latency", "LoadReport",
           "OtherOutput", "OutputDiff", "OutputInfo", "OutputStats", "PartialRun",
           "RunResult", "ShapeMismatch", "Unplaced", "finite_json", "partial_words", "result_json_text",
           "result_lines"]


@dataclass(eq=False)
class ShapeMismatch(Record):
    """A weight whose shape differs between the checkpoint and the model."""

    checkpoint: list[int]
    model: list[int]

    @classmethod
    def from_json(cls, data: Any, where: str = "shape") -> ShapeMismatch:
        """Checked inverse of `to_json`."""
        d = get_obj(data, where)
        return cls(get_ints(d, "checkpoint", where), get_ints(d, "model", where))


@dataclass(eq=False)
class Unplaced(Record):
    """A tensor the reader could not put on the device, and why."""

    name: str
    reason: str

    @classmethod
    def from_json(cls, data: Any, where: str = "unplaced") -> Unplaced:
        """Checked inverse of `to_json`."""
        d = get_obj(data, where)
        return cls(get_str(d, "name", where), get_str(d, "reason", where, ""))


@dataclass(eq=False)
class LoadReport(Record):
    """What loading put into the model: key problems, counts, bytes, which loader, device memory after."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset(
        {"tensor_bytes", "loader", "seconds", "cuda_allocated", "cuda_reserved", "mps_allocated", "tied"})

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    mismatched_shapes: dict[str, ShapeMismatch] = field(default_factory=dict)
    stripped_prefixes: list[str] = field(default_factory=list)
    state_dict_key: str = ""
    tensors: int = 0
    bytes_moved: int = 0
    tensor_bytes: int | None = None  # graphs and pickled modules: the bytes their own tensors hold
    unplaced: list[Unplaced] = field(default_factory=list)
    loader: str | None = None  # state dicts: torch.load after the safe check, or ckptview's reader
    seconds: float | None = None
    cuda_allocated: int | None = None
    cuda_reserved: int | None = None
    mps_allocated: int | None = None
    # {key the checkpoint lacks: the loaded key it is tied to} (an LM head over the embedding): not missing.
    tied: dict[str, str] | None = None

    @classmethod
    def from_json(cls, data: Any, where: str = "load") -> LoadReport:
        """Checked inverse of `to_json`."""
        d = get_obj(data, where)
        shapes = get_obj(d.get("mismatched_shapes", {}), f"{where}.mismatched_shapes")
        return cls(
            missing=get_strs(d, "missing", where), unexpected=get_strs(d, "unexpected", where),
            mismatched=get_strs(d, "mismatched", where),
            mismatched_shapes={str(k)[:MAX_TEXT]: ShapeMismatch.from_json(v, f"{where}.mismatched_shapes")
                               for k, v in list(shapes.items())[:MAX_ITEMS]},
            stripped_prefixes=get_strs(d, "stripped_prefixes", where),
            state_dict_key=get_str(d, "state_dict_key", where, ""), tensors=get_int(d, "tensors", where, 0),
            bytes_moved=get_int(d, "bytes_moved", where, 0), tensor_bytes=get_opt_int(d, "tensor_bytes", where),
            unplaced=[Unplaced.from_json(u, f"{where}.unplaced") for u in get_list(d, "unplaced", where)],
            loader=get_opt_str(d, "loader", where), seconds=get_opt_num(d, "seconds", where),
            cuda_allocated=get_opt_int(d, "cuda_allocated", where), cuda_reserved=get_opt_int(d, "cuda_reserved", where),
            mps_allocated=get_opt_int(d, "mps_allocated", where),
            tied=None if d.get("tied") is None else {
                str(k)[:MAX_TEXT]: str(v)[:MAX_TEXT]
                for k, v in list(get_obj(d["tied"], f"{where}.tied").items())[:MAX_ITEMS]})


@dataclass(eq=False)
class InputReport(Record):
    """One input of the run: where it came from, and for generated ones the spec that made it."""

    shape: list[int]
    dtype: str
    name: str = ""
    origin: str = ""  # "file", "spec", "graph", "guessed from the first layer"
    fill: str | None = None  # the fields below: None for values read from a file
    low: float | None = None
    high: float | None = None
    spec: str | None = None

    def to_json(self) -> dict[str, Any]:
        """File inputs as {name, shape, dtype, origin}; generated ones as their spec, its text and origin."""
        if self.spec is None:
            return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "origin": self.origin}
        return {"shape": list(self.shape), "dtype": self.dtype, "fill": self.fill, "low": self.low,
                "high": self.high, "name": self.name, "spec": self.spec, "origin": self.origin}

    def _keys(self) -> list[str]:
        return list(self.to_json())

    @classmethod
    def from_json(cls, data: Any, where: str = "inputs") -> InputReport:
        """Checked inverse of `to_json`."""
        d = get_obj(data, where)
        return cls(shape=get_ints(d, "shape", where), dtype=get_str(d, "dtype", where, ""), name=get_str(d, "name", where, ""),
                   origin=get_str(d, "origin", where, ""), fill=get_opt_str(d, "fill", where),
                   low=get_opt_num(d, "low", where), high=get_opt_num(d, "high", where), spec=get_opt_str(d, "spec", where))


@dataclass(eq=False)
class OutputStats(Record):
    """Statistics over an output's finite values (sample std, as everywhere), with NaN/Inf counted apart."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    nan: int
    inf: int
    numel: int

    @classmethod
    def from_json(cls, data: Any, where: str = "stats") -> OutputStats:
        """Checked inverse of `to_json`."""
        d = get_obj(data, where)
        return cls(get_opt_num(d, "mean", where), get_opt_num(d, "std", where), get_opt_num(d, "min", where),
                   get_opt_num(d, "max", where), nan=get_int(d, "nan", where, 0), inf=get_int(d, "inf", where, 0), numel=get_int(d, "numel", where, 0))


@dataclass(eq=False)
class OutputInfo(Record):
    """One tensor output: name in the flattened output, shape, dtype, device, statistics, first values."""

    name: str
    shape: list[int]
    dtype: str
    device: str
    stats: OutputStats | None  # None on meta: no values
    first: list[Any] | None  # non-finite floats and complex values as strings (JSON has neither)

    @classmethod
    def from_json(cls, data: Any, where: str = "outputs") -> OutputInfo:
        """Checked inverse of `to_json`."""
        d = get_obj(data, where)
        stats = None if d.get("stats") is None else OutputStats.from_json(d["stats"], f"{where}.stats")
        return cls(get_str(d, "name", where), get_ints(d, "shape", where), get_str(d, "dtype", where, ""),
                   get_str(d, "device", where, ""), stats, get_scalars(d, "first", where))


@dataclass(eq=False)
class OtherOutput(Record):
    """An output leaf that is not a tensor: its type and a short repr."""

    name: str
    type: str
    repr: str

    @classmethod
    def from_json(cls, data: Any, where: str = "other_outputs") -> OtherOutput:
        """Checked inverse of `to_json`."""
        d = get_obj(data, where)
        return cls(get_str(d, "name", where), get_str(d, "type", where, ""), get_str(d, "repr", where, ""))


@dataclass(eq=False)
class Latency(Record):
    """Milliseconds of the timed forward passes (after `warmup` untimed ones)."""

    median: float
    min: float
    max: float
    runs: int
    warmup: int

    @classmethod
    def from_times(cls, times: list[float], warmup: int) -> Latency:
        """Median, min and max of the measured times."""
        ordered = sorted(times)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        return cls(median, ordered[0], ordered[-1], len(times), warmup)

    @classmethod
    def from_json(cls, data: Any, where: str = "latency_ms") -> Latency:
        """Checked inverse of `to_json`."""
        d = get_obj(data, where)
        return cls(get_num(d, "median", where), get_num(d, "min", where, 0.0), get_num(d, "max", where, 0.0),
                   get_int(d, "runs", where, 0), get_int(d, "warmup", where, 0))


@dataclass(eq=False)
class OutputDiff(Record):
    """How one output of the second checkpoint differs from the first's (same input)."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"note", "max_abs_diff", "mean_abs_diff"})

    name: str
    shape: list[int]
    equal: bool | None  # None on meta: no values to compare
    note: str | None = None
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None

    @classmethod
    def from_json(cls, data: Any, where: str = "compare.diff") -> OutputDiff:
        """Checked inverse of `to_json`."""
        d = get_obj(data, where)
        equal = d.get("equal")
        if equal is not None and not isinstance(equal, bool):
            raise ProtocolError(f"{where}.equal: expected true, false or null")
        return cls(get_str(d, "name", where), get_ints(d, "shape", where), equal, get_opt_str(d, "note", where),
                   get_opt_num(d, "max_abs_diff", where), get_opt_num(d, "mean_abs_diff", where))


@dataclass(eq=False)
class CompareResult(Record):
    """The same input through the second checkpoint: its load report, outputs and their differences."""

    path: str
    load: LoadReport
    outputs: list[OutputInfo] = field(default_factory=list)
    diff: list[OutputDiff] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any, where: str = "compare") -> CompareResult:
        """Checked inverse of `to_json`."""
        d = get_obj(data, where)
        return cls(get_str(d, "path", where, ""), LoadReport.from_json(d.get("load", {}), f"{where}.load"),
                   [OutputInfo.from_json(o, f"{where}.outputs") for o in get_list(d, "outputs", where, MAX_OUTPUTS)],
                   [OutputDiff.from_json(o, f"{where}.diff") for o in get_list(d, "diff", where, MAX_OUTPUTS)])


@dataclass(eq=False)
class RunResult(Record):
    """Everything a successful run reports (README "Devices and a test forward pass" lists the keys)."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"compare", "architecture", "next_tokens", "partial"})

    device: str
    source: str | None
    load_seconds: float
    load: LoadReport
    inputs: list[InputReport]
    outputs: list[OutputInfo]
    other_outputs: list[OtherOutput]
    latency_ms: Latency
    peak_memory_bytes: int | None
    peak_memory_kind: str
    torch_version: str
    worker_seconds: float
    compare: CompareResult | None = None
    warnings: list[str] = field(default_factory=list)  # weights that did not load (set by the parent)
    # A model its library built: {"library", "class", "source"} (`core.run.architectures`).
    architecture: dict[str, str] | None = None
    # Causal language models with a tokenizer.json: {"prompt", "top": [{"id", "token", "prob"}]}.
    next_tokens: dict[str, Any] | None = None
    # A partial load the user asked for (--allow-missing): the model's weights that did not come from the file.
    partial: list[str] | None = None

    @classmethod
    def from_json(cls, data: Any, where: str = "result") -> RunResult:
        """Checked inverse of `to_json` (what the parent accepts from the worker)."""
        d = get_obj(data, where)
        compare = None if d.get("compare") is None else CompareResult.from_json(d["compare"])
        return cls(
            device=get_str(d, "device", where), source=get_opt_str(d, "source", where),
            load_seconds=get_num(d, "load_seconds", where, 0.0), load=LoadReport.from_json(d.get("load", {})),
            inputs=[InputReport.from_json(i) for i in get_list(d, "inputs", where, MAX_OUTPUTS)],
            outputs=[OutputInfo.from_json(o) for o in get_list(d, "outputs", where, MAX_OUTPUTS)],
            other_outputs=[OtherOutput.from_json(o) for o in get_list(d, "other_outputs", where, MAX_OUTPUTS)],
            latency_ms=Latency.from_json(d.get("latency_ms", {"median": 0.0})),
            peak_memory_bytes=get_opt_int(d, "peak_memory_bytes", where),
            peak_memory_kind=get_str(d, "peak_memory_kind", where, ""),
            torch_version=get_str(d, "torch_version", where, ""), worker_seconds=get_num(d, "worker_seconds", where, 0.0),
            compare=compare, warnings=get_strs(d, "warnings", where),
            architecture=_architecture(d.get("architecture"), f"{where}.architecture"),
            next_tokens=_next_tokens(d.get("next_tokens"), f"{where}.next_tokens"),
            partial=None if d.get("partial") is None else get_strs(d, "partial", where))


def _architecture(data: Any, where: str) -> dict[str, str] | None:
    if data is None:
        return None
    d = get_obj(data, where)
    return {key: get_str(d, key, where) for key in ("library", "class", "source")}


def _next_tokens(data: Any, where: str) -> dict[str, Any] | None:
    if data is None:
        return None
    d = get_obj(data, where)
    top = []
    for item in get_list(d, "top", where, 100):
        t = get_obj(item, f"{where}.top")
        top.append({"id": get_int(t, "id", where, 0), "token": get_str(t, "token", where, ""),
                    "prob": get_num(t, "prob", where, 0.0)})
    return {"prompt": get_str(d, "prompt", where, ""), "top": top}


@dataclass(eq=False)
class PartialRun(Record):
    """What a failed run had reported before it failed: the load report, inputs and the traceback."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"load", "load_seconds", "inputs", "traceback"})

    load: LoadReport | None = None
    load_seconds: float | None = None
    inputs: list[InputReport] | None = None
    traceback: str | None = None

    @classmethod
    def from_json(cls, data: Any, where: str = "failure") -> PartialRun:
        """The parts of a failure message that are present and well-formed (a bad part is dropped)."""
        d = get_obj(data, where)
        out = cls()
        try:
            out.load = None if d.get("load") is None else LoadReport.from_json(d["load"])
            out.load_seconds = get_opt_num(d, "load_seconds", where)
            out.inputs = (None if d.get("inputs") is None
                          else [InputReport.from_json(i) for i in get_list(d, "inputs", where, MAX_OUTPUTS)])
        except ProtocolError:
            pass  # the error message itself is what matters; a garbled report is not shown
        tb = d.get("traceback")
        out.traceback = tb[:MAX_TEXT] if isinstance(tb, str) else None
        return out


def result_lines(result: RunResult, outputs: bool = True) -> list[str]:
    """A run's result for a person, one fact a line: the one rendering of a `RunResult`, which the CLI
    prints whole and the run panel shows above its table of outputs (`outputs=False`: the outputs and
    their differences from the second checkpoint are the table's). Names come from the file: escape
    each line before it is shown."""
    load = result.load
    lines = []
    if result.architecture is not None:
        arch = result.architecture
        source = "the model code given" if arch["source"] == USER_CODE else arch["source"]
        lines.append(f"architecture {arch['library']} {arch['class']} from {source}")
    lines.append(f"device {result.device} ({result.source}), loaded in {result.load_seconds:.3f} s, "
                 f"{plural(load.tensors, 'tensor')}, {human_bytes(load.bytes_moved)}")
    if load.cuda_allocated is not None:
        lines.append(f"  CUDA allocated {human_bytes(load.cuda_allocated)}, reserved {human_bytes(load.cuda_reserved)}")
    if load.tied:
        lines.append(f"  tied ({len(load.tied)}): " + ", ".join(f"{k} -> {v}" for k, v in list(load.tied.items())[:10]))
    for key, names in (("missing", load.missing), ("unexpected", load.unexpected), ("mismatched", load.mismatched)):
        if names:
            lines.append(f"  {key} ({len(names)}): {', '.join(names[:10])}" + (" ..." if len(names) > 10 else ""))
    if load.stripped_prefixes:
        lines.append(f"  stripped prefixes: {' '.join(load.stripped_prefixes)}")
    for item in load.unplaced:
        lines.append(f"  not placed: {item.name} ({item.reason})")
    for inp in result.inputs:
        lines.append(f"input {inp.name or ''} {inp.shape} {inp.dtype} ({inp.origin})")
    specs = [i.spec for i in result.inputs if i.spec]
    if specs and len(specs) == len(result.inputs):  # in --input-shape's syntax: copy, edit, run again
        lines.append(f"inputs made: {';'.join(specs)}")
    for out in result.outputs if outputs else ():
        s = out.stats
        stats = "no values (meta)" if s is None else (
            "mean {} std {} min {} max {}".format(*(figure(v, ".6g") for v in (s.mean, s.std, s.min, s.max)))
            + (f" nan {s.nan}" if s.nan else "") + (f" inf {s.inf}" if s.inf else ""))
        lines.append(f"output {out.name}: {out.shape} {out.dtype} on {out.device}: {stats}")
    if result.next_tokens is not None:
        top = ", ".join(f"{t['token']!r} {t['prob']:.3f}" for t in result.next_tokens["top"])
        lines.append(f"next token after {result.next_tokens['prompt']!r}: {top}")
    lat = result.latency_ms
    lines.append(f"latency {lat.median:.3f} ms median (min {lat.min:.3f}, max {lat.max:.3f}, {plural(lat.runs, 'run')} "
                 f"after {lat.warmup} warm-up)")
    if result.peak_memory_bytes is not None:
        lines.append(f"peak memory {human_bytes(result.peak_memory_bytes)} ({result.peak_memory_kind})")
    if result.compare is not None:
        if not outputs:
            lines.append(f"compared with {result.compare.path}")
        for d in result.compare.diff if outputs else ():
            lines.append(f"vs {result.compare.path}: {d.name} max |diff| {figure(d.max_abs_diff, '.6g')}"
                         f"{' (identical)' if d.equal else ''}")
    mark = partial_words(result)
    if mark:  # a partial load the user asked for: no line of it may be read as a whole model's
        lines = [f"{line}  {mark}" for line in lines]
    return lines


def partial_words(result: RunResult) -> str:
    """The mark every line of a partial load's result carries (empty for a whole load)."""
    count = len(result.partial or ())
    return f"[partial load: {count} weight{'s' if count != 1 else ''} not from the file]" if count else ""


def finite_json(obj: Any) -> Any:
    """JSON has no NaN/Inf: such floats become strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [finite_json(v) for v in obj]
    return obj


def result_json_text(result: RunResult) -> str:
    """The text `ckptview run --json` prints for a result (the Run panel's "Copy result as JSON" too)."""
    return json.dumps(finite_json(result.to_json()), indent=2)

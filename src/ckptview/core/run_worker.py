"""The forward-pass worker process: `python -m ckptview.core.run_worker`, a JSON request on stdin.

It writes JSON lines to the stdout it was started with: `{"event": "phase", "phase": ...}` as it goes,
then one `{"event": "result", "ok": ...}`. Its file descriptor 1 is pointed at stderr first, so whatever
user code prints cannot corrupt that stream. This is the only place where ckptview runs model code, and
the only place where a full-model pickle is unpickled (after the user's explicit --trust).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import math
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ckptview.core import run_inputs
from ckptview.core.run_inputs import InputSpec

Emit = Callable[[dict[str, Any]], None]


class WorkerError(Exception):
    """A failure with a message for a person and a kind for the parent."""

    def __init__(self, message: str, kind: str = "exception") -> None:
        super().__init__(message)
        self.kind = kind


class Job:
    """State of one request: the phase reached and the report so far (sent even when the job fails)."""

    def __init__(self, request: dict[str, Any], emit: Emit) -> None:
        self.request = request
        self.emit = emit
        self.phase = "starting"
        self.report: dict[str, Any] = {}

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.emit({"event": "phase", "phase": phase})


# ---------------------------------------------------------------------------------------------------
# Entry point


def entry() -> None:
    """The worker process's entry point (see runner.worker_command): run `main`, then leave at once."""
    status = main()
    sys.stderr.flush()
    # Skip interpreter teardown: threads left running by model code or a slow device shutdown must not
    # keep the process alive after the result is written.
    os._exit(status)


def main() -> int:
    """Read the request, do the job, write the result; never raise."""
    result_fd = os.dup(1)
    os.dup2(2, 1)  # user prints (fd 1 and sys.stdout) now go to stderr
    out = os.fdopen(result_fd, "w", buffering=1, encoding="utf-8")

    def emit(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj, default=str) + "\n")
        out.flush()

    job = Job({}, emit)
    try:
        job.request = json.loads(sys.stdin.read() or "{}")
        result = handle(job)
        emit({"event": "result", "ok": True, **result})
    except WorkerError as exc:
        emit({"event": "result", "ok": False, "error": str(exc), "kind": exc.kind, **job.report})
    except BaseException as exc:  # noqa: BLE001 - anything from user code becomes one line
        emit({"event": "result", "ok": False, "kind": _error_kind(exc),
              "error": f"{_phase_words(job.phase)}: {type(exc).__name__}: {_one_line(exc)}",
              "traceback": traceback.format_exc(limit=20), **job.report})
    out.flush()
    return 0


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else "(no message)"


def _error_kind(exc: BaseException) -> str:
    name = type(exc).__name__
    if name == "OutOfMemoryError" or "out of memory" in str(exc).lower():
        return "oom"
    return "exception"


def _phase_words(phase: str) -> str:
    return {"model code": "in the model code", "forward pass": "in the forward pass",
            "loading": "while loading", "warm-up": "in the forward pass (warm-up)",
            "timing": "in the forward pass (timed runs)", "compare": "while running the second checkpoint",
            "inputs": "while making the inputs"}.get(phase, f"during {phase}")


def handle(job: Job) -> dict[str, Any]:
    """Dispatch one request by its `op`."""
    op = job.request.get("op", "run")
    job.enter("importing torch")
    import torch  # noqa: F401 - imported here so the time shows as its own phase

    if op == "devices":
        from ckptview.core.devices import list_devices

        return {"devices": [d.to_json() for d in list_devices()]}
    if op == "inspect":
        job.enter("loading")
        model = load_graph(job, job.request["source"], job.request["path"], "cpu", "main")
        specs = graph_inputs(model, job.request["source"])
        return {"inputs": None if specs is None else [s.to_json() for s in specs]}
    if op == "run":
        return run_job(job)
    raise WorkerError(f"unknown request '{op}'", kind="protocol")


# ---------------------------------------------------------------------------------------------------
# The run


def run_job(job: Job) -> dict[str, Any]:
    """Load the model on the device, make the inputs, run, time, and describe the outputs."""
    import torch

    req = job.request
    started = time.perf_counter()
    device = _check_device(req.get("device", "cpu"))
    allow_caller_imports(req)
    _reset_peak(device)
    job.enter("loading")
    t0 = time.perf_counter()
    model, load = load_model(job, req["path"], device)
    load["seconds"] = time.perf_counter() - t0
    load.update(_memory_after_load(device))
    job.report["load"] = load
    job.report["load_seconds"] = load["seconds"]

    job.enter("inputs")
    inputs, input_report = make_inputs(req, model, device)
    job.report["inputs"] = input_report

    first_n = int(req.get("first_values", 8))
    with torch.no_grad():
        job.enter("forward pass")
        output = model(*inputs)
        outputs, others = describe_outputs(output, first_n)
        job.enter("warm-up")
        for _ in range(max(0, int(req.get("warmup", 2)) - 1)):
            model(*inputs)
        job.enter("timing")
        times = time_runs(model, inputs, device, max(1, int(req.get("runs", 10))))
        compare = None
        if req.get("compare_path"):
            job.enter("compare")
            compare = compare_checkpoint(job, model, output, inputs, device, first_n)
    result = {
        "device": device,
        "source": req.get("source"),
        "load_seconds": load["seconds"],
        "load": load,
        "inputs": input_report,
        "outputs": outputs,
        "other_outputs": others,
        "latency_ms": _latency(times, int(req.get("warmup", 2))),
        **_peak_memory(device),
        "torch_version": torch.__version__,
        "worker_seconds": time.perf_counter() - started,
    }
    if compare is not None:
        result["compare"] = compare
    return result


def _check_device(name: str) -> str:
    from ckptview.core.devices import DeviceError, find_device, list_devices

    try:
        return find_device(name, list_devices()).name
    except DeviceError as exc:
        raise WorkerError(str(exc), kind="device") from None


# ---------------------------------------------------------------------------------------------------
# Loading


def load_model(job: Job, path: str, device: str) -> tuple[Any, dict[str, Any]]:
    """The model on `device` and the load report, by source kind."""
    source = job.request.get("source")
    if source in ("torchscript", "export"):
        model = load_graph(job, source, path, device, "main")
        return model, _module_report(model, device)
    if source == "pickle":
        if not job.request.get("trust"):
            raise WorkerError("refusing to unpickle a full model without trust", kind="refused")
        model = _load_trusted_pickle(job, path, device, "main")
        return model, _module_report(model, device)
    if source == "state_dict":
        job.enter("model code")
        model = build_user_model(job.request["model"], job.request.get("model_kwargs") or {},
                                 job.request.get("cwd"))
        job.enter("loading")
        model = _place_module(model, device)
        report = load_weights(model, path, device)
        return model, report
    raise WorkerError(f"unknown model source '{source}'", kind="protocol")


def _consent(job: Job, role: str) -> list[str] | None:
    """The findings the user accepted for the main or the second file; None: not trusted."""
    consent = job.request.get("consent") or {}
    value = consent.get(role) if isinstance(consent, dict) else None
    return [str(v) for v in value] if isinstance(value, list) else None


def torch_load(job: Job | None, path: str, how: str, device: str, role: str) -> Any:
    """Every torch load of the worker goes through the load gate (private copy, census, consent)."""
    from ckptview.core.errors import CheckpointError
    from ckptview.core.load_gate import LoadRefused, load_with_torch

    consent = _consent(job, role) if job is not None else None
    try:
        return load_with_torch(path, how, device=device, consent=consent, folder=os.path.join(os.getcwd(), "gate"))
    except LoadRefused as exc:
        raise WorkerError(str(exc), kind="refused") from None
    except CheckpointError as exc:  # FileChangedError: not what the user trusted
        raise WorkerError(str(exc), kind="changed") from None


def load_graph(job: Job | None, source: str, path: str, device: str, role: str) -> Any:
    """A TorchScript module or an exported program's module on `device`, loaded through the gate."""
    if source == "torchscript":
        return torch_load(job, path, "torchscript", device, role).eval()
    program = torch_load(job, path, "export", device, role)
    # An exported program's module refuses .eval(): its graph was captured in the mode it was exported in.
    module = program.module().to(device)
    module._ckptview_program = program  # sample inputs and range constraints, for the inputs
    return module


def _load_trusted_pickle(job: Job, path: str, device: str, role: str) -> Any:
    obj = torch_load(job, path, "pickle", device, role)  # the user trusted exactly these findings
    model = _find_module(obj)
    if model is None:
        raise WorkerError(f"the file holds a {type(obj).__name__}, not an nn.Module", kind="input")
    return model.eval()


def _find_module(obj: Any, depth: int = 0) -> Any:
    import torch

    if isinstance(obj, torch.nn.Module):
        return obj
    if depth < 3 and isinstance(obj, Mapping):
        for value in obj.values():
            found = _find_module(value, depth + 1)
            if found is not None:
                return found
    return None


class _FolderFinder(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: finds top-level modules in one folder, only `names` (None: any), only when
    nothing installed has them."""

    def __init__(self, folder: str, names: set[str] | None) -> None:
        self.folder = folder
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if path is not None or (self.names is not None and fullname not in self.names):
            return None  # submodules are found through their package's own __path__
        return importlib.machinery.PathFinder.find_spec(fullname, [self.folder])


@contextlib.contextmanager
def _fallback_folder(folder: str, names: set[str] | None) -> Iterator[None]:
    finder = _FolderFinder(folder, names)
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def allow_caller_imports(req: dict[str, Any]) -> None:
    """Let the caller's folder answer only the top-level modules the user named, after the installed ones.

    Those are the module of a `package.module:factory` spec and, for a trusted full pickle (main or
    second file), the modules of the classes it names. The folder is never put on sys.path.
    """
    folder = req.get("cwd")
    if not folder or not os.path.isdir(folder):
        return
    names: set[str] = set()
    spec = req.get("model") or ""
    target = spec.rpartition(":")[0]
    if target and not target.endswith(".py"):
        names.add(target.split(".")[0])
    consent = req.get("consent") or {}
    for role in ("main", "compare"):
        for finding in (consent.get(role) or []) if isinstance(consent, dict) else []:
            if isinstance(finding, str) and not finding.startswith("unreadable pickle "):
                names.add(finding.split(".")[0])
    names -= set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
    if names:
        sys.meta_path.append(_FolderFinder(folder, names))


def build_user_model(spec: str, kwargs: dict[str, Any], caller_dir: str | None = None) -> Any:
    """Import `package.module:factory` or `path/file.py:Name` and call it with `kwargs`.

    While the user's module is imported, its folder (the file's, or for a module spec the caller's
    folder when the module is found there) answers the imports nothing installed answers.
    """
    import torch

    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise WorkerError(f"model spec '{spec}' must be package.module:factory or path/to/file.py:ClassName",
                          kind="input")
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise WorkerError(f"model file not found: {target}", kind="input")
        name = "ckptview_user_model_" + os.path.splitext(os.path.basename(target))[0]
        module_spec = importlib.util.spec_from_file_location(name, target)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        # While the file runs, its own folder answers the imports nothing installed answers (its sibling
        # modules); a json.py or torch.py beside it never shadows the real one, and the folder is gone after.
        with _fallback_folder(os.path.dirname(os.path.abspath(target)), None):
            module_spec.loader.exec_module(module)
    else:
        found = importlib.util.find_spec(target.split(".")[0])
        origin = getattr(found, "origin", None) or ""
        here = caller_dir and os.path.abspath(origin).startswith(os.path.join(os.path.abspath(caller_dir), ""))
        with _fallback_folder(caller_dir, None) if here and caller_dir else contextlib.nullcontext():
            module = importlib.import_module(target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise WorkerError(f"model spec '{spec}': {target} has no '{attr}'", kind="input")
        obj = getattr(obj, part)
    model = obj(**kwargs)
    if not isinstance(model, torch.nn.Module):
        raise WorkerError(f"model spec '{spec}' returned a {type(model).__name__}, not an nn.Module",
                          kind="input")
    return model.eval()


def _place_module(model: Any, device: str) -> Any:
    try:
        return model.to(device)
    except (RuntimeError, TypeError) as exc:
        raise WorkerError(f"cannot move the model to {device}: {_one_line(exc)}", kind="device") from None


# Formats torch.load reads: a state dict in one of them whose pickles are all safe is loaded by torch
# (weights_only, through the gate), so that it loads exactly as model.load_state_dict(torch.load(...)) would:
# module versions (`_metadata`), quantized tensors, packed parameters and other non-tensor entries included.
TORCH_LOADABLE = ("torch-zip", "torch-legacy")
# Above this size the gate's private copy costs more than exactness buys: ckptview's reader maps the values.
TORCH_LOAD_MAX_BYTES = 2 << 30


def load_weights(model: Any, path: str, device: str) -> dict[str, Any]:
    """Load the checkpoint's state dict into `model` non-strictly: by torch when checked safe, else by ckptview."""
    from ckptview.core import open_checkpoint
    from ckptview.core.runner import find_state_dict, state_dict_node, strip_prefixes

    checkpoint = open_checkpoint(path)
    try:
        found_under, infos = find_state_dict(checkpoint)
        if (device != "meta" and checkpoint.format in TORCH_LOADABLE and not checkpoint.unsafe_globals
                and os.path.getsize(path) <= TORCH_LOAD_MAX_BYTES):
            state = _torch_state_dict(path, state_dict_node(checkpoint).path)
            if state is not None:
                return _load_torch_state_dict(model, state, found_under)
        model_state = model.state_dict()
        mapping, stripped = strip_prefixes(infos, model_state)
        missing = [k for k in model_state if k not in set(mapping.values())]
        unexpected, mismatched, shapes = [], [], {}
        to_load: dict[str, Any] = {}
        unplaced: list[dict[str, str]] = []
        bytes_moved = 0
        for ckpt_key, key in mapping.items():
            info = infos[ckpt_key]
            if key not in model_state:
                unexpected.append(ckpt_key)
                continue
            want = tuple(model_state[key].shape)
            if tuple(info.shape) != want:
                mismatched.append(key)
                shapes[key] = {"checkpoint": list(info.shape), "model": list(want)}
                continue
            tensor, reason = place_tensor(info, device)
            if tensor is None:
                unplaced.append({"name": key, "reason": reason})
                continue
            to_load[key] = tensor
            bytes_moved += info.nbytes if device != "meta" else 0  # meta tensors hold no bytes
        if device != "meta":
            model.load_state_dict(to_load, strict=False)
        return {"missing": missing, "unexpected": unexpected, "mismatched": mismatched,
                "mismatched_shapes": shapes, "stripped_prefixes": stripped, "state_dict_key": found_under,
                "tensors": len(to_load), "bytes_moved": bytes_moved, "unplaced": unplaced,
                "loader": "ckptview reader"}
    finally:
        checkpoint.close()


def _torch_state_dict(path: str, base: tuple[Any, ...]) -> Any:
    """The state dict as torch.load(weights_only=True) returns it (through the gate), or None to read it safely."""
    try:
        obj = torch_load(None, path, "weights", "cpu", "main")
    except WorkerError:
        return None  # the gate found something: the safe reader path runs nothing
    except Exception:  # noqa: BLE001 - weights_only refused a construct the safe reader handles
        return None
    for key in base:
        if not isinstance(obj, Mapping) or key not in obj:
            return None
        obj = obj[key]
    if not isinstance(obj, Mapping) or not all(isinstance(k, str) for k in obj):
        return None
    return obj


def _load_torch_state_dict(model: Any, state: Mapping[str, Any], found_under: str) -> dict[str, Any]:
    """load_state_dict(strict=False) of a torch-loaded state dict, keeping its module versions; the report."""
    from collections import OrderedDict

    import torch

    from ckptview.core.runner import strip_prefixes

    model_state = model.state_dict()
    mapping, stripped = strip_prefixes(list(state), model_state)
    loaded_keys = set(mapping.values())
    missing = [k for k in model_state if k not in loaded_keys]
    unexpected: list[str] = []
    mismatched: list[str] = []
    shapes: dict[str, Any] = {}
    to_load: OrderedDict[str, Any] = OrderedDict()
    for ckpt_key, key in mapping.items():
        value, want = state[ckpt_key], model_state.get(key)
        if key not in model_state:
            unexpected.append(ckpt_key)
            continue
        if isinstance(value, torch.Tensor) and isinstance(want, torch.Tensor) and value.shape != want.shape:
            mismatched.append(key)
            shapes[key] = {"checkpoint": list(value.shape), "model": list(want.shape)}
            continue
        to_load[key] = value
    metadata = getattr(state, "_metadata", None)
    if isinstance(metadata, Mapping):
        to_load._metadata = OrderedDict((_strip(k, stripped), v) for k, v in metadata.items())  # type: ignore[attr-defined]
    model.load_state_dict(to_load, strict=False)
    tensors = [t for v in to_load.values() for t in _tensors_in(v)]
    return {"missing": missing, "unexpected": unexpected, "mismatched": mismatched, "mismatched_shapes": shapes,
            "stripped_prefixes": stripped, "state_dict_key": found_under, "tensors": len(tensors),
            "bytes_moved": sum(t.numel() * t.element_size() for t in tensors), "unplaced": [],
            "loader": "torch.load(weights_only=True) after the safe check"}


def _strip(key: str, prefixes: list[str]) -> str:
    for prefix in prefixes:
        key = key.removeprefix(prefix)
    return key


def _tensors_in(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_in(v)]
    return []


def place_tensor(info: Any, device: str) -> tuple[Any, str]:
    """(tensor on `device`, '') from the safe reader's values, or (None, why it could not be placed)."""
    import torch

    dtype = getattr(torch, info.dtype, None)
    if dtype is None:
        return None, f"dtype {info.dtype} is unknown to this torch"
    if device == "meta":
        return torch.empty(tuple(info.shape), dtype=dtype, device="meta"), ""
    try:
        array = _read_values(info)
        tensor = numpy_to_torch(array, info.dtype)
        return tensor.to(device), ""
    except Exception as exc:  # noqa: BLE001 - e.g. float64 on mps, a broken record: report and go on
        return None, f"{info.dtype} on {device}: {_one_line(exc)}"


def _read_values(info: Any) -> Any:
    from ckptview.core.values import read_values

    return read_values(info)


def numpy_to_torch(array: Any, dtype_name: str) -> Any:
    """A CPU tensor over `array`'s values (bf16/fp8 through their bit patterns, without a float detour)."""
    import numpy as np
    import torch

    target = getattr(torch, dtype_name)
    if array.dtype.type.__module__ != "numpy":  # ml_dtypes: reinterpret the bits
        bits = np.ascontiguousarray(array).view(f"uint{array.dtype.itemsize * 8}")
        return torch.from_numpy(bits).view(target)
    with warnings.catch_warnings():
        # Read-only mmap views are fine: load_state_dict copies into the parameters, never writes here.
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(array)
    return tensor if tensor.dtype == target else tensor.to(target)


def _module_report(model: Any, device: str) -> dict[str, Any]:
    tensors = [*model.parameters(), *model.buffers()]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    return {"missing": [], "unexpected": [], "mismatched": [], "mismatched_shapes": {},
            "stripped_prefixes": [], "state_dict_key": "", "tensors": len(tensors),
            "bytes_moved": 0 if device == "meta" else nbytes, "tensor_bytes": nbytes, "unplaced": []}


def _memory_after_load(device: str) -> dict[str, Any]:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
        return {"cuda_allocated": torch.cuda.memory_allocated(device),
                "cuda_reserved": torch.cuda.memory_reserved(device)}
    if device == "mps":
        return {"mps_allocated": torch.mps.current_allocated_memory()}
    return {}


def _reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def _peak_memory(device: str) -> dict[str, Any]:
    import torch

    if device.startswith("cuda"):
        return {"peak_memory_bytes": int(torch.cuda.max_memory_allocated(device)),
                "peak_memory_kind": "cuda max allocated"}
    if device == "mps":
        return {"peak_memory_bytes": int(torch.mps.driver_allocated_memory()),
                "peak_memory_kind": "mps driver allocated (at the end)"}
    if device == "cpu":
        try:
            import resource

            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
            return {"peak_memory_bytes": int(rss * scale), "peak_memory_kind": "worker process peak RSS"}
        except ImportError:
            pass
    return {"peak_memory_bytes": None, "peak_memory_kind": "not measured"}


# ---------------------------------------------------------------------------------------------------
# Inputs


def graph_inputs(model: Any, source: str) -> list[InputSpec] | None:
    """Input specs declared by a TorchScript (traced shapes) or exported graph; None when unknown."""
    specs: list[InputSpec] = []
    if source == "export":
        program = getattr(model, "_ckptview_program", None)
        placeholders = [n for n in model.graph.nodes if n.op == "placeholder"]
        samples = _sample_tensors(program)
        if samples is not None and len(samples) == len(placeholders):
            # The inputs it was exported with satisfy its range constraints by construction.
            return [InputSpec(shape=tuple(t.shape), dtype=str(t.dtype).removeprefix("torch."),
                              fill=_default_fill(str(t.dtype)), name=n.name)
                    for n, t in zip(placeholders, samples, strict=True)] or None
        ranges = getattr(program, "range_constraints", None) or {}
        for node in placeholders:
            val = node.meta.get("val")
            if val is None or not hasattr(val, "shape"):
                continue
            shape = tuple(_concrete_size(s, ranges) for s in val.shape)
            specs.append(InputSpec(shape=shape, dtype=str(val.dtype).removeprefix("torch."),
                                   fill=_default_fill(str(val.dtype)), name=node.name))
        return specs or None
    if source == "torchscript":
        for value in list(model.graph.inputs())[1:]:  # the first is `self`
            ty = value.type()
            sizes = ty.sizes() if hasattr(ty, "sizes") else None
            if not sizes or any(s is None for s in sizes):
                return None
            dtype = _scalar_type_name(ty.scalarType())
            specs.append(InputSpec(shape=tuple(sizes), dtype=dtype, fill=_default_fill(dtype),
                                   name=value.debugName().split(".")[0]))
        return specs or None
    return None


def _sample_tensors(program: Any) -> list[Any] | None:
    """The positional tensors an exported program keeps as its sample inputs, when that is all they are."""
    import torch

    example = getattr(program, "example_inputs", None)
    if not isinstance(example, tuple) or len(example) != 2:
        return None
    args, kwargs = example
    if kwargs or not isinstance(args, (tuple, list)) or not all(isinstance(a, torch.Tensor) for a in args):
        return None
    return list(args)


PREFERRED_DYNAMIC_SIZE = 2


def _concrete_size(size: Any, ranges: Mapping[Any, Any]) -> int:
    """A static size as is; a dynamic one as 2 clamped into the program's range constraint for it."""
    try:
        return int(size)
    except (TypeError, ValueError, RuntimeError):
        pass
    expr = getattr(getattr(size, "node", None), "expr", None)
    bounds = ranges.get(expr) if expr is not None else None
    low = _finite_int(getattr(bounds, "lower", None), 0)
    high = _finite_int(getattr(bounds, "upper", None), None)
    value = max(PREFERRED_DYNAMIC_SIZE, low)
    return min(value, high) if high is not None else value


def _finite_int(value: Any, default: int | None) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return default
    return number if abs(number) < 2**62 else default


def _default_fill(dtype: str) -> str:
    return "normal" if ("float" in dtype or "complex" in dtype) else "zeros"


def _scalar_type_name(scalar: str | None) -> str:
    names = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
             "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
             "Bool": "bool", "ComplexFloat": "complex64", "ComplexDouble": "complex128"}
    return names.get(scalar or "Float", "float32")


def make_inputs(req: dict[str, Any], model: Any, device: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """Input tensors on `device` from a file, the spec, the graph or a guess; with a report of each."""
    if req.get("input_file"):
        arrays = run_inputs.load_input_file(req["input_file"])
        tensors = [run_inputs.to_torch(a, None, device) for _, a in arrays]
        return tensors, [{"name": n, "shape": list(a.shape), "dtype": str(t.dtype).removeprefix("torch."),
                          "origin": "file"} for (n, a), t in zip(arrays, tensors, strict=True)]
    origin = "spec"
    specs = [InputSpec.from_json(s) for s in req["inputs"]] if req.get("inputs") else None
    if specs is None and req.get("source") in ("torchscript", "export"):
        specs, origin = graph_inputs(model, req["source"]), "graph"
    if specs is None and req.get("source") in ("state_dict", "pickle"):
        specs, origin = _guess_from_module(model), "guessed from the first layer"
    if not specs:
        raise WorkerError("no input shape: pass --input-shape, e.g. 2,20 (the model does not declare one)",
                          kind="input")
    seed = int(req.get("seed", 0))
    tensors = [run_inputs.to_torch(run_inputs.make_array(s, seed, i), s.dtype, device)
               for i, s in enumerate(specs)]
    return tensors, [{**s.to_json(), "spec": s.text(), "origin": origin} for s in specs]


def _guess_from_module(model: Any) -> list[InputSpec] | None:
    for name, param in model.named_parameters():
        if name.endswith("weight") and param.dim() == 2 and "embed" not in name:
            return [InputSpec(shape=(2, int(param.shape[1])))]
        break
    return None


# ---------------------------------------------------------------------------------------------------
# Running and describing outputs


def synchronize(device: str) -> None:
    """Wait for queued device work, so that timings measure the work and not its launch."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device == "mps":
        torch.mps.synchronize()
    elif device.startswith("xla"):
        import torch_xla.core.xla_model as xm  # type: ignore[import-not-found]

        xm.mark_step()
        xm.wait_device_ops()


def time_runs(model: Any, inputs: list[Any], device: str, runs: int) -> list[float]:
    """Milliseconds of each of `runs` synchronised forward passes."""
    times = []
    for _ in range(runs):
        synchronize(device)
        t0 = time.perf_counter()
        model(*inputs)
        synchronize(device)
        times.append((time.perf_counter() - t0) * 1000.0)
    return times


def _latency(times: list[float], warmup: int) -> dict[str, Any]:
    ordered = sorted(times)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1], "runs": len(times), "warmup": warmup}


def flatten_outputs(output: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(name, leaf) pairs of a nested output: tuples/lists by index, dicts by key, namedtuples by field."""
    import torch

    if isinstance(output, torch.Tensor):
        return [(prefix or "output", output)]
    items: list[tuple[str, Any]] = []
    if isinstance(output, Mapping):
        pairs = list(output.items())
    elif isinstance(output, tuple) and hasattr(output, "_fields"):
        pairs = list(zip(output._fields, output, strict=True))
    elif isinstance(output, (list, tuple)):
        pairs = list(enumerate(output))
    else:
        return [(prefix or "output", output)]
    for key, value in pairs:
        items += flatten_outputs(value, f"{prefix}.{key}" if prefix else str(key))
    return items


MAX_OUTPUTS = 1000  # outputs described in the result (a model may return a million tensors)


def describe_outputs(output: Any, first_n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Tensor outputs with shape/dtype/device/stats/first values; other leaves with their repr."""
    import torch

    tensors, others = [], []
    for name, leaf in flatten_outputs(output)[:MAX_OUTPUTS]:
        if isinstance(leaf, torch.Tensor):
            tensors.append({"name": name, "shape": list(leaf.shape), "dtype": str(leaf.dtype).removeprefix("torch."),
                            "device": str(leaf.device), "stats": tensor_stats(leaf),
                            "first": first_values(leaf, first_n)})
        else:
            others.append({"name": name, "type": type(leaf).__name__, "repr": repr(leaf)[:200]})
    return tensors, others


def _stat_dtype(tensor: Any) -> Any:
    import torch

    return torch.float32 if tensor.device.type == "mps" else torch.float64  # mps has no float64


def tensor_stats(tensor: Any) -> dict[str, Any] | None:
    """mean/std (population)/min/max over finite values and NaN/Inf counts; None on meta."""
    import torch

    if tensor.device.type == "meta":
        return None
    t = tensor.detach()
    if t.is_complex():
        t = t.abs()
    t = t.to(_stat_dtype(t))
    nan = int(torch.isnan(t).sum())
    inf = int(torch.isinf(t).sum())
    finite = t[torch.isfinite(t)]
    if finite.numel() == 0:
        return {"mean": None, "std": None, "min": None, "max": None, "nan": nan, "inf": inf,
                "numel": t.numel()}
    return {"mean": float(finite.mean()), "std": float(finite.std(correction=0)) if finite.numel() else 0.0,
            "min": float(finite.min()), "max": float(finite.max()), "nan": nan, "inf": inf,
            "numel": t.numel()}


def first_values(tensor: Any, count: int) -> list[Any] | None:
    """The first `count` values in C order (floats that are not finite as strings, JSON has no NaN)."""
    import torch

    if tensor.device.type == "meta":
        return None
    flat = tensor.detach().reshape(-1)[:count]
    if flat.is_complex():
        return [str(complex(v)) for v in flat.cpu().tolist()]
    if flat.dtype.is_floating_point:
        flat = flat.to(torch.float32 if flat.device.type == "mps" else torch.float64)
    return [v if not isinstance(v, float) or math.isfinite(v) else str(v) for v in flat.cpu().tolist()]


# ---------------------------------------------------------------------------------------------------
# Run with another checkpoint


def compare_checkpoint(job: Job, model: Any, output: Any, inputs: list[Any], device: str,
                       first_n: int) -> dict[str, Any]:
    """Same inputs through the same architecture with the second checkpoint's weights; output differences."""
    import torch

    req = job.request
    path = req["compare_path"]
    source = req.get("source")
    if source == "state_dict":
        second = model
        load = load_weights(second, path, device)
    elif source in ("torchscript", "export"):
        from ckptview.core import open_checkpoint

        checkpoint = open_checkpoint(path)
        kind = {"torchscript": "torchscript", "torch-export": "export"}.get(checkpoint.format)
        checkpoint.close()
        if kind is None:
            raise WorkerError("the second checkpoint is not a TorchScript or .pt2 archive", kind="input")
        second = load_graph(job, kind, path, device, "compare")
        load = _module_report(second, device)
    else:
        second = _load_trusted_pickle(job, path, device, "compare")
        load = _module_report(second, device)
    before = {name: t.detach().clone() for name, t in flatten_outputs(output) if isinstance(t, torch.Tensor)}
    other = second(*inputs)
    diffs = []
    for name, t in flatten_outputs(other):
        if not isinstance(t, torch.Tensor) or name not in before:
            continue
        a = before[name]
        entry: dict[str, Any] = {"name": name, "shape": list(t.shape)}
        if a.shape != t.shape:
            entry.update(equal=False, note=f"shape {list(a.shape)} vs {list(t.shape)}")
        elif device == "meta":
            entry.update(equal=None, note="meta: no values")
        else:
            diff = (a.to(_stat_dtype(a)) - t.to(_stat_dtype(t))).abs()
            diff = diff[torch.isfinite(diff)]
            entry.update(equal=bool(torch.equal(a, t)),
                         max_abs_diff=float(diff.max()) if diff.numel() else 0.0,
                         mean_abs_diff=float(diff.mean()) if diff.numel() else 0.0)
        diffs.append(entry)
    out_stats, _ = describe_outputs(other, first_n)
    return {"path": path, "load": load, "outputs": out_stats, "diff": diffs}


if __name__ == "__main__":
    entry()

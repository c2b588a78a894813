"""The forward pass in the run worker: its inputs, the timed runs, peak memory, and the outputs described.

torch is imported inside the functions; every result is a `core.run_result` record.
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ckptview.core import dtypes
from ckptview.core.message import Fix, Hint, Message, message_of
from ckptview.core.run import input_specs as run_inputs
from ckptview.core.run.input_specs import InputSpec, conv_input, guess_inputs, token_input
from ckptview.core.run.json_checks import MAX_OUTPUTS
from ckptview.core.run.protocol import WorkerError
from ckptview.core.run.result import InputReport, OtherOutput, OutputInfo, OutputStats
from ckptview.core.worker.declared_inputs import NoDeclaredInputs, declared_inputs

if TYPE_CHECKING:
    import numpy as np

def reset_peak(device: str) -> None:
    """Start measuring the device's peak memory from here (CUDA)."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: str) -> tuple[int | None, str]:
    """(bytes, what was measured) of the run's peak memory on `device`; (None, 'not measured') when unknown."""
    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(device)), "cuda max allocated"
    if device == "mps":
        return int(torch.mps.driver_allocated_memory()), "mps driver allocated (at the end)"
    if device == "cpu":
        try:
            import resource

            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
            return int(rss * scale), "worker process peak RSS"
        except ImportError:
            pass
    return None, "not measured"


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
    low = _finite_int(getattr(bounds, "lower", None)) or 0
    high = _finite_int(getattr(bounds, "upper", None))
    value = max(PREFERRED_DYNAMIC_SIZE, low)
    return min(value, high) if high is not None else value


def _finite_int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None
    return number if abs(number) < 2**62 else None


def _default_fill(dtype: str) -> str:
    return "normal" if ("float" in dtype or "complex" in dtype) else "zeros"


def _scalar_type_name(scalar: str | None) -> str:
    names = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
             "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
             "Bool": "bool", "ComplexFloat": "complex64", "ComplexDouble": "complex128"}
    return names.get(scalar or "Float", "float32")


def make_inputs(req: dict[str, Any], model: Any,
                device: str) -> tuple[list[Any], list[InputReport], list[str] | None]:
    """Input tensors on `device` from a file, the spec, the graph, what a library model declares, or a guess;
    a report of each; and the names to pass them by, where they go in by keyword (see `keyword_names`)."""
    if req.get("input_file"):
        arrays = run_inputs.load_input_file(req["input_file"])
        tensors = [to_torch(a, None, device) for _, a in arrays]
        reports = [InputReport(name=n, shape=list(a.shape), dtype=str(t.dtype).removeprefix("torch."),
                               origin="file") for (n, a), t in zip(arrays, tensors, strict=True)]
        named = not str(req["input_file"]).lower().endswith(".npy")  # a .npy holds one unnamed array
        return tensors, reports, keyword_names(model, [n for n, _ in arrays]) if named else None
    origin = str(req.get("input_origin") or "spec")
    specs = [InputSpec.from_json(s) for s in req["inputs"]] if req.get("inputs") else None
    origins: list[str] | None = None
    if specs is None and req.get("source") in ("torchscript", "export"):
        specs, origin = graph_inputs(model, req["source"]), "graph"
    if specs is None and req.get("source") == "library":
        specs, origins = _declared(model, req)
    if specs is None and req.get("source") == "lightning":
        specs, origin = example_inputs(model), "example_input_array"
    if specs is None and req.get("source") in ("state_dict", "pickle", "lightning"):
        specs, origin = _guess_from_module(model), "guessed from the first layer"
    if not specs:
        raise WorkerError(Message("no input shape (the model does not declare one)", Hint(Fix.INPUT_SHAPE)),
                          kind="input")
    seed = int(req.get("seed", 0))
    tensors = [to_torch(run_inputs.make_array(s, seed, i), s.dtype, device)
               for i, s in enumerate(specs)]
    origins = origins or [origin] * len(specs)
    reports = [InputReport(shape=list(s.shape), dtype=s.dtype, name=s.name, origin=o, fill=s.fill,
                           low=s.low, high=s.high, spec=s.text()) for s, o in zip(specs, origins, strict=True)]
    if origin == "graph" or req.get("source") in ("torchscript", "export"):
        return tensors, reports, None  # a graph's placeholders are its positional inputs, whatever they are called
    return tensors, reports, keyword_names(model, [s.name or "" for s in specs])


def _declared(model: Any, req: dict[str, Any]) -> tuple[list[InputSpec] | None, list[str] | None]:
    """The inputs a library model declares (its forward, its config, its preprocessor), each with its origin."""
    try:
        found = declared_inputs(model, req.get("architecture") or {}, req.get("preprocessor"))
    except NoDeclaredInputs as exc:
        raise WorkerError(message_of(exc), kind="input") from None
    if not found:
        return None, None
    return [s for s, _ in found], [o for _, o in found]


def example_inputs(model: Any) -> list[InputSpec] | None:
    """Shapes and dtypes of a LightningModule's `example_input_array` (a tensor or a tuple of them), if set."""
    import torch

    try:
        example = getattr(model, "example_input_array", None)
    except Exception:  # noqa: BLE001 - a property of the user's class that fails: guess instead
        return None
    tensors = [example] if isinstance(example, torch.Tensor) else list(example) \
        if isinstance(example, (tuple, list)) else []
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    return [InputSpec(shape=tuple(t.shape), dtype=str(t.dtype).removeprefix("torch."),
                      fill=_default_fill(str(t.dtype))) for t in tensors]


# numpy's names for arrays saved without names (np.savez(f, a, b)): those stay positional.
_UNNAMED = re.compile(r"arr_\d+")


class KeywordCall:
    """Calls a model with its inputs by name (`model(input_ids=..., attention_mask=...)`)."""

    def __init__(self, module: Any, names: list[str]) -> None:
        self.module = module
        self.names = names

    def __call__(self, *tensors: Any) -> Any:
        return self.module(**dict(zip(self.names, tensors, strict=True)))


class ShapesOnly:
    """A forward pass on `meta` under fake tensors: library models read values of small tensors on the way
    (an attention mask's `.item()`), which meta tensors refuse; fake ones answer with shapes alone."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.module = getattr(call, "module", call)

    def __call__(self, *tensors: Any) -> Any:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            return self.call(*tensors)


def keyword_names(model: Any, names: list[str]) -> list[str] | None:
    """`names` when every one is a parameter the model's forward declares by name (not a `**kwargs`
    catch-all, not numpy's `arr_0` for an unnamed array); None (by position, in order) otherwise."""
    import inspect

    if not names or not all(names) or any(_UNNAMED.fullmatch(n) for n in names):
        return None
    forward = getattr(model, "forward", model)
    schema = getattr(forward, "schema", None)
    if schema is not None:  # a TorchScript method: `self` first, then the declared inputs
        declared = {a.name for a in schema.arguments[1:]}
    else:
        try:
            parameters = inspect.signature(forward).parameters.values()
        except (TypeError, ValueError):
            return None
        declared = {p.name for p in parameters
                    if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    return names if set(names) <= declared else None


def forward_call(model: Any, by_name: list[str] | None, library_on_meta: bool = False) -> Any:
    """The model, or a call by keyword when `make_inputs` named the inputs for the forward."""
    call = KeywordCall(model, by_name) if by_name else model
    return ShapesOnly(call) if library_on_meta else call


def same_call(call: Any, module: Any) -> Any:
    """`call` (a module, a call by keyword, a shapes-only pass) made over another module."""
    if isinstance(call, ShapesOnly):
        return ShapesOnly(same_call(call.call, module))
    if isinstance(call, KeywordCall):
        return KeywordCall(module, call.names)
    return module


def _guess_from_module(model: Any) -> list[InputSpec] | None:
    """The input of the first module that takes one (a convolution, an embedding, a linear layer), in
    registration order; else the weights' guess (`guess_inputs`)."""
    from torch import nn

    for module in model.modules():
        if isinstance(module, nn.Embedding):
            return [token_input(int(module.num_embeddings))]
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            return [conv_input(int(module.in_channels), tuple(int(k) for k in module.kernel_size))]
        if isinstance(module, nn.Linear):
            return [InputSpec(shape=(2, int(module.in_features)))]
    return guess_inputs([(name, tuple(p.shape)) for name, p in model.named_parameters()])


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
        import torch_xla.core.xla_model as xm  # optional; mypy config ignores its missing stubs

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


def describe_outputs(output: Any, first_n: int) -> tuple[list[OutputInfo], list[OtherOutput]]:
    """Tensor outputs with shape/dtype/device/stats/first values; other leaves with their repr."""
    import torch

    tensors: list[OutputInfo] = []
    others: list[OtherOutput] = []
    for name, leaf in flatten_outputs(output)[:MAX_OUTPUTS]:
        if isinstance(leaf, torch.Tensor):
            tensors.append(OutputInfo(name, list(leaf.shape), str(leaf.dtype).removeprefix("torch."), str(leaf.device),
                                      output_stats(leaf), first_values(leaf, first_n)))
        else:
            others.append(OtherOutput(name, type(leaf).__name__, repr(leaf)[:200]))
    return tensors, others


def stat_dtype(tensor: Any) -> Any:
    """The dtype statistics are computed in on the tensor's device."""
    import torch

    return torch.float32 if tensor.device.type == "mps" else torch.float64  # mps has no float64


def output_stats(tensor: Any) -> OutputStats | None:
    """mean/std/min/max over finite values and NaN/Inf counts; None on meta.

    The same conventions as every other statistic of ckptview (`core/figures/stats.py`, torch.std's
    default): the sample standard deviation (correction 1), null below two finite values.
    """
    import torch

    if tensor.device.type == "meta":
        return None
    t = tensor.detach()
    if t.is_complex():
        t = t.abs()
    t = t.to(stat_dtype(t))
    nan = int(torch.isnan(t).sum())
    inf = int(torch.isinf(t).sum())
    finite = t[torch.isfinite(t)]
    if finite.numel() == 0:
        return OutputStats(None, None, None, None, nan=nan, inf=inf, numel=t.numel())
    std = float(finite.std(correction=1)) if finite.numel() > 1 else None
    return OutputStats(float(finite.mean()), std, float(finite.min()),
                       float(finite.max()), nan=nan, inf=inf, numel=t.numel())


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


def to_torch(array: np.ndarray, dtype_name: str | None, device: str) -> Any:
    """A torch tensor of `array` cast to `dtype_name` on `device` (meta: an empty tensor of that shape)."""
    import numpy as np
    import torch

    target = getattr(torch, dtypes.canonical(dtype_name)) if dtype_name else None
    if device == "meta":
        return torch.empty(array.shape, dtype=target or _torch_dtype_of(array), device="meta")
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if target is not None and tensor.dtype != target:
        tensor = tensor.to(target)
    return tensor.to(device)


def _torch_dtype_of(array: np.ndarray) -> Any:
    import numpy as np
    import torch

    return torch.from_numpy(np.zeros(0, dtype=array.dtype)).dtype

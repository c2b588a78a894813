"""Loading in the run worker: the model from its source, the checkpoint's weights into it, the load report.

Every torch load goes through `core.load_gate` (private copy, census of every pickle, the user's consent);
nothing here reads a file with torch any other way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ckptview.core.errors import CheckpointError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.run.protocol import Job, WorkerError, one_line
from ckptview.core.run.result import LoadReport, ShapeMismatch, Unplaced
from ckptview.core.run.state_dict import find_state_dict, state_dict_node, strip_prefixes
from ckptview.core.worker.load_gate import LoadRefused, load_with_torch
from ckptview.core.worker.tensors import place_tensor

if TYPE_CHECKING:
    from ckptview.core.checkpoint import Checkpoint


def consent_for(job: Job, role: str) -> list[str] | None:
    """The findings the user accepted for the main or the second file; None: not trusted."""
    consent = job.request.get("consent") or {}
    value = consent.get(role) if isinstance(consent, dict) else None
    return [str(v) for v in value] if isinstance(value, list) else None


def torch_load(job: Job | None, path: str, how: str, device: str, role: str) -> Any:
    """Every torch load of the worker goes through the load gate (private copy, census, consent)."""
    consent = consent_for(job, role) if job is not None else None
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


def load_trusted_pickle(job: Job, path: str, device: str, role: str) -> Any:
    """The nn.Module in a full-model pickle the user trusted (loaded through the gate), in eval mode."""
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


def place_module(model: Any, device: str) -> Any:
    try:
        return model.to(device)
    except (RuntimeError, TypeError) as exc:
        raise WorkerError(f"cannot move the model to {device}: {one_line(exc)}", kind="device") from None


# Formats torch.load reads: a state dict in one of them whose pickles are all safe is loaded by torch
# (weights_only, through the gate), so that it loads exactly as model.load_state_dict(torch.load(...)) would:
# module versions (`_metadata`), quantized tensors, packed parameters and other non-tensor entries included.
TORCH_LOADABLE = ("torch-zip", "torch-legacy")
# Above this size the gate's private copy costs more than exactness buys: ckptview's reader maps the values.
TORCH_LOAD_MAX_BYTES = 2 << 30


def load_weights(model: Any, path: str, device: str, opened: Checkpoint | None = None) -> LoadReport:
    """Load the checkpoint's state dict into `model` non-strictly: by torch when checked safe, else by ckptview.

    `opened`: the checkpoint at `path`, already open (the caller closes it); else it is opened here."""
    checkpoint = opened if opened is not None else open_checkpoint(path)
    try:
        found_under, infos = find_state_dict(checkpoint)
        if (device != "meta" and checkpoint.format in TORCH_LOADABLE and not checkpoint.unsafe_globals
                and os.path.getsize(path) <= TORCH_LOAD_MAX_BYTES):
            state = torch_state_dict(path, state_dict_node(checkpoint).path)
            if state is not None:
                return load_torch_state_dict(model, state, found_under)
        model_state = model.state_dict()
        mapping, stripped = strip_prefixes(infos, model_state)
        missing = [k for k in model_state if k not in set(mapping.values())]
        tied = tied_to(model, missing, {k for k in mapping.values() if k in model_state})
        missing = [k for k in missing if k not in tied]
        unexpected: list[str] = []
        mismatched: list[str] = []
        shapes: dict[str, ShapeMismatch] = {}
        to_load: dict[str, Any] = {}
        batch_bytes = loaded = 0
        unplaced: list[Unplaced] = []
        bytes_moved = 0
        for ckpt_key, key in mapping.items():
            info = infos[ckpt_key]
            if key not in model_state:
                unexpected.append(ckpt_key)
                continue
            want = tuple(model_state[key].shape)
            if tuple(info.shape) != want:
                mismatched.append(key)
                shapes[key] = ShapeMismatch(list(info.shape), list(want))
                continue
            tensor, reason = place_tensor(info, device)
            if tensor is None:
                unplaced.append(Unplaced(key, reason))
                continue
            to_load[key] = tensor
            loaded += 1
            bytes_moved += info.nbytes if device != "meta" else 0  # meta tensors hold no bytes
            batch_bytes += info.nbytes
            if batch_bytes >= LOAD_BATCH_BYTES:  # into the model now: never a second copy of all weights
                _load_batch(model, to_load, device)
                batch_bytes = 0
        _load_batch(model, to_load, device)
        return LoadReport(missing=missing, unexpected=unexpected, mismatched=mismatched, mismatched_shapes=shapes,
                          stripped_prefixes=stripped, state_dict_key=found_under, tensors=loaded, tied=tied or None,
                          bytes_moved=bytes_moved, unplaced=unplaced, loader="ckptview reader")
    finally:
        if opened is None:
            checkpoint.close()


# Tensors read by ckptview go into the model in batches of about this many bytes, so that loading holds the
# model and one batch, not the model and a second copy of every weight.
LOAD_BATCH_BYTES = 256 << 20


def _load_batch(model: Any, batch: dict[str, Any], device: str) -> None:
    if batch and device != "meta":
        model.load_state_dict(batch, strict=False)
    batch.clear()


def torch_state_dict(path: str, base: tuple[Any, ...]) -> Any:
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


def load_torch_state_dict(model: Any, state: Mapping[str, Any], found_under: str) -> LoadReport:
    """load_state_dict(strict=False) of a torch-loaded state dict, keeping its module versions; the report."""
    from collections import OrderedDict

    import torch


    model_state = model.state_dict()
    mapping, stripped = strip_prefixes(list(state), model_state)
    loaded_keys = set(mapping.values())
    missing = [k for k in model_state if k not in loaded_keys]
    tied = tied_to(model, missing, loaded_keys & set(model_state))
    missing = [k for k in missing if k not in tied]
    unexpected: list[str] = []
    mismatched: list[str] = []
    shapes: dict[str, ShapeMismatch] = {}
    to_load: OrderedDict[str, Any] = OrderedDict()
    for ckpt_key, key in mapping.items():
        value, want = state[ckpt_key], model_state.get(key)
        if key not in model_state:
            unexpected.append(ckpt_key)
            continue
        if isinstance(value, torch.Tensor) and isinstance(want, torch.Tensor) and value.shape != want.shape:
            mismatched.append(key)
            shapes[key] = ShapeMismatch(list(value.shape), list(want.shape))
            continue
        to_load[key] = value
    metadata = getattr(state, "_metadata", None)
    if isinstance(metadata, Mapping):
        to_load._metadata = OrderedDict((_strip(k, stripped), v) for k, v in metadata.items())  # type: ignore[attr-defined]
    model.load_state_dict(to_load, strict=False)
    tensors = [t for v in to_load.values() for t in _tensors_in(v)]
    return LoadReport(missing=missing, unexpected=unexpected, mismatched=mismatched, mismatched_shapes=shapes,
                      stripped_prefixes=stripped, state_dict_key=found_under, tensors=len(tensors),
                      tied=tied or None, bytes_moved=sum(t.numel() * t.element_size() for t in tensors),
                      loader="torch.load(weights_only=True) after the safe check")


def tied_to(model: Any, missing: list[str], loaded: set[str]) -> dict[str, str]:
    """{missing key: the loaded key it is tied to}: `lm_head.weight` is the embedding's own Parameter (a
    safetensors file keeps one name of the two), so loading the embedding loads it too. By identity, so
    it holds on `meta` as well."""
    if not missing:
        return {}
    holders: dict[int, list[str]] = {}
    for key, value in model.state_dict(keep_vars=True).items():
        holders.setdefault(id(value), []).append(key)
    wanted, out = set(missing), dict[str, str]()
    for group in holders.values():
        twin = next((k for k in group if k in loaded), None)
        if twin is not None:
            out.update((k, twin) for k in group if k in wanted)
    return out


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


def module_report(model: Any, device: str) -> LoadReport:
    """The load report of a module that carries its own weights (a graph or a pickled module)."""
    tensors = [*model.parameters(), *model.buffers()]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    return LoadReport(tensors=len(tensors), bytes_moved=0 if device == "meta" else nbytes, tensor_bytes=nbytes)


def note_memory_after_load(report: LoadReport, device: str) -> None:
    """Add the device's allocated (and reserved) memory after loading to the report."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
        report.cuda_allocated = int(torch.cuda.memory_allocated(device))
        report.cuda_reserved = int(torch.cuda.memory_reserved(device))
    elif device == "mps":
        report.mps_allocated = int(torch.mps.current_allocated_memory())

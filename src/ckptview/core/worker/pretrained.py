"""Library models in the run worker, loaded as their library's own loading loads them.

The checkpoint's tensors are read by ckptview (the safe reader, positioned reads, nothing unpickled) and handed
to the library: transformers gets them through `from_pretrained(None, config=..., state_dict=...)`, its
documented way in for weights held in memory, so that every key conversion it applies to its own files (the
Hub layouts it renames and merges while loading, `_checkpoint_conversion_mapping`, legacy renames), its dtype
choice (`dtype="auto"`), its tied weights and its initialisation of whatever the file lacks are the library's,
not a copy of them. diffusers, timm and torchvision build the model from its config and load the state dict
as their own `from_pretrained` / `create_model` do (diffusers' deprecated-key fixes; its float32 default).

The load report is the library's: what it calls missing, unexpected and mismatched.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ckptview.core.read.open import open_checkpoint
from ckptview.core.run.declared_sizes import Listing
from ckptview.core.run.protocol import Job, WorkerError, one_line
from ckptview.core.run.result import LoadReport, ShapeMismatch, Unplaced
from ckptview.core.run.state_dict import find_state_dict, strip_prefixes
from ckptview.core.worker.build_guard import guarded_build
from ckptview.core.worker.library import build, check_against_file, checked_config, transformers_class
from ckptview.core.worker.tensors import read_like_file

if TYPE_CHECKING:
    from ckptview.core.checkpoint import Checkpoint

READERS = 4  # tensors read at once


def load_library_model(job: Job, path: str, device: str) -> tuple[Any, LoadReport]:
    """The model its library names in the checkpoint's config, with the checkpoint's weights, and the report."""
    arch = job.request["architecture"]
    checkpoint = open_checkpoint(path)  # once: its tensors fill the model
    try:
        if arch["library"] == "transformers":
            return _transformers(job, arch, checkpoint, device)
        return _built(job, arch, checkpoint, device)
    finally:
        checkpoint.close()


def _read_state(job: Job, checkpoint: Checkpoint, device: str) -> tuple[str, dict[str, Any], list[Unplaced], int]:
    """(key the weights were found under, {key: CPU tensor placed as the file's map would hold it}, tensors that
    could not be read, bytes read); on `meta`, empty tensors of the same shapes and dtypes (nothing read)."""
    import torch

    job.enter("reading the weights")
    found_under, infos = find_state_dict(checkpoint)
    state: dict[str, Any] = {}
    unplaced: list[Unplaced] = []
    moved = 0
    readable: dict[str, Any] = {}
    for key, info in infos.items():
        dtype = getattr(torch, info.dtype, None)
        if not isinstance(dtype, torch.dtype):
            unplaced.append(Unplaced(key, f"dtype {info.dtype} is unknown to this torch"))
        elif device == "meta":
            state[key] = torch.empty(tuple(info.shape), dtype=dtype, device="meta")
        else:
            readable[key] = info
    # Positioned reads release the interpreter: a few at once keep the disk and the page cache busy (a 0.7 GiB
    # folder: 2.0 s one at a time, 0.34 s four at a time).
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        for key, (tensor, error) in zip(readable, pool.map(_read_one, readable.values()), strict=True):
            if tensor is None:
                unplaced.append(Unplaced(key, f"{readable[key].dtype}: {error}"))
                continue
            state[key] = tensor
            moved += readable[key].nbytes
    return found_under, state, unplaced, moved


def _read_one(info: Any) -> tuple[Any, str]:
    """(tensor, '') read like the file's map, or (None, why not): a broken record is reported, the rest loads."""
    try:
        return read_like_file(info), ""
    except Exception as exc:  # noqa: BLE001 - one line in the report
        return None, one_line(exc)


def _transformers(job: Job, arch: dict[str, Any], checkpoint: Checkpoint, device: str) -> tuple[Any, LoadReport]:
    try:
        import transformers
    except Exception as exc:  # noqa: BLE001 - an install that cannot import is one line, not a traceback
        raise WorkerError(f"transformers is installed but cannot be imported: {one_line(exc)}", kind="input") from None
    name = arch["class"]
    what = f"transformers {name}"
    config_data = checked_config(arch)  # config_guard again, as for every build in the worker
    check_against_file(arch, Listing.from_json(job.request.get("expect")))  # on meta, before anything is read
    found_under, state, unplaced, moved = _read_state(job, checkpoint, device)  # before the guard: files
    raw_keys = set(state)
    job.enter("loading")
    guard = None
    kwargs: dict[str, Any] = {}
    try:
        # The class, its config and from_pretrained's build and load run under the build guard: they may open
        # only the library itself, fetch nothing, start nothing (the weights are in memory already).
        with guarded_build() as guard:
            cls, config = transformers_class(transformers, name, config_data)
            kwargs = {"config": config, "state_dict": state, "output_loading_info": True,
                      "local_files_only": True, "trust_remote_code": False, _dtype_word(transformers): "auto"}
            if device != "cpu":
                kwargs["device_map"] = {"": device}
            model, info = cls.from_pretrained(None, **kwargs)
        guard.check(what)
    except WorkerError:
        raise
    except Exception as exc:  # noqa: BLE001 - the library refused the config or the weights: one line
        if guard is not None and (refused := guard.message(what)) is not None:
            raise WorkerError(refused, kind="refused") from None
        raise WorkerError(f"transformers could not build {name} and load the weights: {one_line(exc)}",
                          kind="input") from None
    finally:
        del state, kwargs  # the model holds what it kept; the rest (unexpected keys) goes now
    mismatched: list[str] = []
    shapes: dict[str, ShapeMismatch] = {}
    for item in info.get("mismatched_keys") or ():
        key, *sizes = item if isinstance(item, (tuple, list)) else (item,)
        mismatched.append(str(key))
        if len(sizes) == 2:
            shapes[str(key)] = ShapeMismatch([int(s) for s in sizes[0]], [int(s) for s in sizes[1]])
    unexpected = sorted(str(k) for k in info.get("unexpected_keys") or ())
    missing = {str(k) for k in info.get("missing_keys") or ()}
    # transformers 4.57 leaves a tied pair on meta when the file holds only its target, and reports nothing.
    unloaded = sorted(k for k, t in model.state_dict(keep_vars=True).items() if t.is_meta) if device != "meta" else []
    if unloaded:
        raise WorkerError(f"{len(unloaded)} weight{'s' if len(unloaded) != 1 else ''} of the model not loaded "
                          f"from the file: transformers {transformers.__version__} left "
                          f"{', '.join(unloaded[:5])}{' ...' if len(unloaded) > 5 else ''} without values "
                          f"(on the meta device)", kind="weights")
    report = LoadReport(missing=sorted(missing), unexpected=unexpected,
                        mismatched=sorted(mismatched), mismatched_shapes=shapes, state_dict_key=found_under,
                        tensors=max(0, len(raw_keys) - len(unexpected) - len(mismatched)), bytes_moved=moved,
                        unplaced=unplaced, tied=_tied(model, raw_keys) or None,
                        loader=f"transformers {transformers.__version__} from_pretrained(state_dict=...) over "
                               f"ckptview's reader")
    return model.eval(), report


def _dtype_word(transformers: Any) -> str:
    """`dtype`, the name of from_pretrained's dtype argument since 4.56; `torch_dtype` before."""
    parts = transformers.__version__.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return "dtype"
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def _tied(model: Any, file_keys: set[str]) -> dict[str, str]:
    """{model key the file lacks: the key it holds that is the same tensor} (an LM head over the embedding)."""
    holders: dict[int, list[str]] = {}
    for key, value in model.state_dict(keep_vars=True).items():
        holders.setdefault(id(value), []).append(key)
    out: dict[str, str] = {}
    for group in holders.values():
        twin = next((k for k in group if k in file_keys), None)
        if twin is not None:
            out.update((k, twin) for k in group if k not in file_keys)
    return out


def _built(job: Job, arch: dict[str, Any], checkpoint: Checkpoint, device: str) -> tuple[Any, LoadReport]:
    """A diffusers, timm or torchvision model (or ckptview's example) built from its config in the library's
    default dtype, then the state dict loaded as the library loads it: diffusers by assignment after its
    deprecated-key fixes (its weights stay where they were read), the others by copy into the model."""
    import torch

    job.enter("building the model")
    model = build(arch, device, None, Listing.from_json(job.request.get("expect")))
    found_under, state, unplaced, moved = _read_state(job, checkpoint, device)
    job.enter("loading")
    library = arch["library"]
    fix = getattr(model, "_fix_state_dict_keys_on_load", None) if library == "diffusers" else None
    if callable(fix):
        fix(state)
    model_state = model.state_dict()
    mapping, stripped = strip_prefixes(list(state), model_state)
    loaded = {mapping[k]: v for k, v in state.items() if mapping[k] in model_state}
    unexpected = sorted(k for k in state if mapping[k] not in model_state)
    mismatched: list[str] = []
    shapes: dict[str, ShapeMismatch] = {}
    for key, value in list(loaded.items()):
        want = model_state[key]
        if tuple(value.shape) != tuple(want.shape):
            mismatched.append(key)
            shapes[key] = ShapeMismatch(list(value.shape), list(want.shape))
            del loaded[key]
        else:  # the model's dtype, as the library casts on load; its device
            cast = value.is_floating_point() and want.is_floating_point() and value.dtype != want.dtype
            loaded[key] = value.to(device=want.device, dtype=want.dtype if cast else value.dtype)
    assign = library == "diffusers" or device == "meta"
    with torch.no_grad():
        model.load_state_dict(loaded, strict=False, assign=assign)
    missing = [k for k in model_state if k not in loaded and k not in mismatched]
    tied = _tied(model, set(loaded))
    missing = [k for k in missing if k not in tied]
    report = LoadReport(missing=missing, unexpected=unexpected, mismatched=mismatched, mismatched_shapes=shapes,
                        stripped_prefixes=stripped, state_dict_key=found_under, tensors=len(loaded),
                        bytes_moved=moved, unplaced=unplaced, tied=tied or None,
                        loader=f"{library} state dict {'assigned' if assign else 'loaded'} from ckptview's reader")
    return model.eval(), report

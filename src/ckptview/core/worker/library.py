"""In the run worker: build a model class an installed library knows, from a config read as data.

Classes are looked up by name in the library's own registry (transformers' auto mappings, diffusers'
model classes, timm's and torchvision's model registries), never imported from the checkpoint's folder;
no `trust_remote_code`, and `from_pretrained` only as `from_pretrained(None, config=..., state_dict=...)`,
which names no repository to fetch or run anything from (`core/worker/pretrained.py` loads the weights).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from ckptview.core.errors import CheckpointError
from ckptview.core.message import message_of, rephrased
from ckptview.core.read.bytes.files import open_regular
from ckptview.core.run.config_guard import ConfigRefused, guarded_config, timm_parts
from ckptview.core.run.declared_sizes import Listing
from ckptview.core.run.protocol import WorkerError, one_line
from ckptview.core.worker.build_guard import guarded_build
from ckptview.core.worker.build_size import held_against
from ckptview.core.worker.example_model import MODELS

PROMPT = "The capital of France is"
TOP_K = 5
MAX_TOKENIZER_BYTES = 64 << 20  # a tokenizer.json larger than this is not read


def build(arch: dict[str, Any], device: str, dtype_name: str | None, listing: Listing | None = None) -> Any:
    """The model named by `arch` (see `core.run.architectures.Architecture.payload`) on `device`, in eval mode,
    built with `dtype_name` as the default floating-point dtype (None: the library's own default).

    `listing` (the request's `expect`: the checkpoint the model is for): the model is built on `meta` first,
    bounded by the listing and checked against it (`build_size`), and built on `device` only when it agrees."""
    if listing is not None:
        model = held_against(lambda on: _build(arch, on, dtype_name), listing, f"{arch['library']} {arch['class']}")
        if device == "meta":
            return model
        del model
    return _build(arch, device, dtype_name)


def check_against_file(arch: dict[str, Any], listing: Listing | None) -> None:
    """Build `arch` on `meta`, bounded by and checked against the checkpoint's `listing` (nothing kept); for a
    library that builds the model itself afterwards (transformers' from_pretrained)."""
    if listing is not None:
        build(arch, "meta", None, listing)


def _build(arch: dict[str, Any], device: str, dtype_name: str | None) -> Any:
    import torch

    library, name = arch["library"], arch["class"]
    config = checked_config(arch)
    try:
        module = __import__(library)
    except Exception as exc:  # noqa: BLE001 - an install that cannot import is one line, not a traceback
        raise WorkerError(f"{library} is installed but cannot be imported: {one_line(exc)}", kind="input") from None
    dtype = getattr(torch, dtype_name) if dtype_name else None
    previous = torch.get_default_dtype()
    guard = None
    try:
        if dtype is not None and dtype.is_floating_point:
            torch.set_default_dtype(dtype)
        # What the build opens, fetches or starts is guarded too: only the library itself (build_guard).
        with torch.device(device), guarded_build() as guard:
            model = _BUILDERS[library](module, name, config)
        guard.check(f"{library} {name}")
    except WorkerError:
        raise
    except Exception as exc:  # noqa: BLE001 - a config the class refuses: one line naming it
        if guard is not None and (refused := guard.message(f"{library} {name}")) is not None:
            raise WorkerError(refused, kind="refused") from None
        raise WorkerError(f"cannot build {library} {name} from config.json: {one_line(exc)}", kind="input") from None
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def checked_config(arch: dict[str, Any]) -> dict[str, Any]:
    """The request's config, checked again by `config_guard` (a request may come from elsewhere than
    `recognize`: a graph, a Trainer folder's order); WorkerError 'refused' for a field that would load."""
    library, name, config = arch["library"], arch["class"], arch.get("config") or {}
    if library == "ckptview":
        return {}  # the bundled example: ckptview's own model, which takes no config
    try:
        return guarded_config(library, name, config)
    except ConfigRefused as exc:
        raise WorkerError(rephrased(exc, lambda said: f"{library} {name}: {said}"), kind="refused") from None


def _transformers(transformers: Any, name: str, config: dict[str, Any]) -> Any:
    cls, cfg = transformers_class(transformers, name, config)
    return cls(cfg)


def transformers_class(transformers: Any, name: str, config: dict[str, Any]) -> tuple[Any, Any]:
    """(model class, config object) of a transformers architecture named in a config.json read as data: the
    class from the library's auto mappings (never the folder's code), the config by its `model_type`."""
    from transformers.models.auto import configuration_auto, modeling_auto

    known: set[str] = set()
    for attr in dir(modeling_auto):
        if attr.startswith("MODEL") and attr.endswith("_MAPPING_NAMES"):
            for value in getattr(modeling_auto, attr).values():
                known.update([value] if isinstance(value, str) else value)
    if name not in known:
        raise WorkerError(f"transformers does not know the model class {name}", kind="refused")
    model_type = config.get("model_type")
    try:  # the lazy mapping imports the config module on access; its get() does not
        config_class = configuration_auto.CONFIG_MAPPING[model_type] if isinstance(model_type, str) else None
    except KeyError:
        config_class = None
    if config_class is None:
        raise WorkerError(f"transformers does not know model_type {str(model_type)[:60]!r}", kind="refused")
    cls = getattr(transformers, name)
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        raise WorkerError(f"transformers' {name} is not a model class", kind="input")
    # No key-value cache: a test pass returns the model's outputs, not a cache object to carry on.
    cfg = config_class.from_dict({**{k: v for k, v in config.items() if k != "auto_map"}, "use_cache": False})
    return cls, cfg


def _diffusers(diffusers: Any, name: str, config: dict[str, Any]) -> Any:
    cls = getattr(diffusers, name, None)
    if not (isinstance(cls, type) and issubclass(cls, diffusers.ModelMixin)):
        raise WorkerError(f"diffusers does not know the model class {name}", kind="refused")
    return cls.from_config(config)  # type: ignore[attr-defined]  # ModelMixin's, via ConfigMixin


def _timm(timm: Any, name: str, config: dict[str, Any]) -> Any:
    """As `timm.create_model("local-dir:FOLDER", pretrained=False)` builds it: the model's keyword arguments
    from `model_args`, its defaults (classes, channels) from `pretrained_cfg`; never a download."""
    import dataclasses

    if not timm.is_model(name):
        raise WorkerError(f"timm does not know the architecture {name}", kind="refused")
    try:  # model_args reach the model's constructor; create_model's own (checkpoint_path...) are refused
        pretrained, args = timm_parts(config)
    except ConfigRefused as exc:
        raise WorkerError(message_of(exc), kind="refused") from None
    # This release's own parameters too, whatever they are called: given to create_model here, `checkpoint_path`
    # would torch.load a file the config names, `pretrained` download.
    own = sorted((set(inspect.signature(timm.create_model).parameters) - {"model_name", "kwargs"}) & set(args))
    if own:
        raise WorkerError(f"config.json's model_args name {', '.join(own)}: arguments of timm.create_model "
                          f"itself (loading, downloading), never taken from a model's folder", kind="refused")
    # Fields this timm does not know (a config written by another release) are left out, not an error.
    known = {f.name for f in dataclasses.fields(timm.models.PretrainedCfg)}
    pretrained = {k: v for k, v in pretrained.items() if k in known}
    return timm.create_model(name, pretrained=False, pretrained_cfg=pretrained or None, **args)


def _torchvision(torchvision: Any, name: str, config: dict[str, Any]) -> Any:
    models = torchvision.models
    if name not in models.list_models(module=models):
        raise WorkerError(f"torchvision does not know the model {name}", kind="refused")
    return models.get_model(name, weights=None, num_classes=int(config.get("num_classes", 1000)))


def _ckptview(ckptview: Any, name: str, config: dict[str, Any]) -> Any:
    """ckptview's own example model (`core/worker/example_model.py`): the code is ckptview's, not the file's."""
    if name not in MODELS:
        raise WorkerError(f"ckptview ships no example model {name}", kind="refused")
    return MODELS[name]()


_BUILDERS = {"transformers": _transformers, "diffusers": _diffusers, "timm": _timm, "torchvision": _torchvision,
             "ckptview": _ckptview}


def parameter_names(config: dict[str, Any], arch: str, listing: Listing | None = None) -> list[str]:
    """`named_parameters()` names of transformers' `arch` built on the meta device from `config` (the same
    build, checks and guard as a run's: a model class of the library's registry, nothing loaded), held against
    the checkpoint's `listing` when given."""
    model = build({"library": "transformers", "class": arch, "config": config}, "meta", None, listing)
    return [name for name, _ in model.named_parameters()]


def tie(model: Any) -> None:
    """Tie shared weights as the library does after loading (an LM head over the embedding)."""
    tie_weights = getattr(model, "tie_weights", None)
    if callable(tie_weights):
        tie_weights()


def next_tokens(model: Any, folder: str, device: str) -> dict[str, Any] | None:
    """The top-k next tokens after a short prompt, when the folder has a tokenizer.json (read as data)."""
    import os

    import torch

    path = os.path.join(folder, "tokenizer.json") if folder else ""
    if device == "meta" or not path or not os.path.isfile(path):
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    text = _folder_file(path, MAX_TOKENIZER_BYTES)
    if text is None:
        return None
    tokenizer = Tokenizer.from_str(text)  # parsed from the bytes read here: no path handed to the library
    ids = tokenizer.encode(PROMPT).ids
    if not ids:
        return None
    with torch.no_grad():
        output = model(input_ids=torch.tensor([ids], device=device))
    logits = output["logits"] if isinstance(output, dict) or hasattr(output, "keys") else output[0]
    probs = torch.softmax(logits[0, -1].double(), dim=-1)
    top = torch.topk(probs, min(TOP_K, probs.numel()))
    return {"prompt": PROMPT, "top": [{"id": int(i), "token": tokenizer.decode([int(i)]), "prob": float(p)}
                                      for p, i in zip(top.values.tolist(), top.indices.tolist(), strict=True)]}


def _folder_file(path: str, limit: int) -> str | None:
    """A small text file of the model's folder, read through the byte layer (never a FIFO, never past
    `limit`, never a link to a file outside the folder), or None."""
    folder = os.path.realpath(os.path.dirname(path))
    if os.path.dirname(os.path.realpath(path)) != folder:
        return None  # tokenizer.json -> /elsewhere: pinned to the folder's own files
    try:
        with open_regular(path) as fh:
            raw = fh.read(limit + 1)
    except (OSError, CheckpointError):
        return None
    if len(raw) > limit:
        return None
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return None

"""In the run worker: a LightningModule built as Lightning's `load_from_checkpoint` builds it, then its weights.

The class is the one the file names (LightningCLI's `hyper_parameters._class_path`), imported only when the
user's consent lists it, or the user's own (`--model`). Its init arguments come from `hyper_parameters` as
`load_from_checkpoint` computes them (past keys merged, `hparams_name` wrapping, `--model-kwargs` on top,
filtered by the `__init__` signature unless it takes `**kwargs`); the values were read by ckptview's safe
reader and arrive as tagged JSON (`core.run.lightning.encode_value`). Lightning's instantiator is never called:
the class is called with those values, under the library build's guard (`build_guard`: it may open only the
installed Python and its own package's files). The weights go through ckptview's loader (the load gate).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import sys
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from ckptview.core.message import Fix, Hint, Message
from ckptview.core.run.lightning import ATTRIBUTE_DICTS
from ckptview.core.run.protocol import Job, WorkerError, one_line
from ckptview.core.run.result import USER_CODE, LoadReport
from ckptview.core.worker.build_guard import guarded_build
from ckptview.core.worker.loading import (
    consent_for,
    load_torch_state_dict,
    load_weights,
    place_module,
    torch_state_dict,
)
from ckptview.core.worker.model_code import call_user_model, import_user_object

LIGHTNING_PACKAGES = ("lightning.pytorch", "pytorch_lightning")


class Unrebuilt:
    """A hyper-parameter ckptview did not rebuild (a tensor, another class): refused if the class receives it."""

    def __init__(self, why: str) -> None:
        self.why = why


def load_lightning_model(job: Job, path: str, device: str) -> tuple[Any, LoadReport]:
    """The LightningModule on `device` with the checkpoint's weights, and the load report."""
    req = job.request
    spec = req.get("lightning") or {}
    user = req.get("model")
    job.enter("model code")
    if user:
        cls, shown, source = import_user_object(user, req.get("cwd")), _spec_name(user), USER_CODE
    else:
        shown, source = str(spec.get("class_path") or ""), str(spec.get("class_source") or "")
        consent = consent_for(job, "main")
        if not shown or consent is None or shown not in consent:
            raise WorkerError(f"refusing to import {shown or 'a class'} named by {spec.get('name')} without "
                              f"trust", kind="refused")
        cls = import_class_path(shown, str(spec.get("name")))
    base = lightning_base(cls)
    if base is None:
        if user:  # a factory or a plain nn.Module: the state dict's usual path
            model = place_module(call_user_model(user, cls, req.get("model_kwargs") or {}), device)
            job.enter("loading")
            return model, load_weights(model, path, device)
        raise WorkerError(f"lightning: {shown} named by {spec.get('name')} is not a LightningModule subclass",
                          kind="refused")
    job.report["architecture"] = {"library": "lightning", "class": shown, "source": source}
    kwargs = init_kwargs(cls, spec, req.get("model_kwargs") or {})
    import torch

    # The class was trusted by name, its arguments come from the file: a class named by the file builds
    # under the library build's guard (a hyper-parameter that makes __init__ open a file elsewhere, fetch
    # or start a process is refused); the user's own code (--model) builds as it is.
    guard_build = contextlib.nullcontext(None) if user else guarded_build()
    guard = None
    try:
        with torch.device("meta") if device == "meta" else contextlib.nullcontext(), guard_build as guard:
            model = cls(**kwargs)
            if type(model).configure_model is not base.configure_model:
                model.configure_model()  # as load_from_checkpoint does before loading
    except Exception:
        if guard is not None and (refused := guard.message(f"lightning {shown}")) is not None:
            raise WorkerError(refused, kind="refused") from None
        raise
    if guard is not None:
        guard.check(f"lightning {shown}")
    job.enter("loading")
    model = place_module(model, device)
    if type(model).on_load_checkpoint is not base.on_load_checkpoint and device != "meta":
        return model.eval(), _load_with_hook(model, path, shown)
    return model.eval(), load_weights(model, path, device)


def _spec_name(spec: str) -> str:
    target, _, attr = spec.rpartition(":")
    return spec if target.endswith(".py") else f"{target}.{attr}"


def import_class_path(class_path: str, name: str) -> Any:
    """The object `module.path.Name` names (its module imported: the user consented to exactly this)."""
    module_path, _, attr = class_path.rpartition(".")
    try:
        module = importlib.import_module(module_path)
    except ImportError as exc:
        raise WorkerError(f"lightning: cannot import {module_path} (named by {name}): {one_line(exc)}",
                          kind="input") from None
    if not hasattr(module, attr):
        raise WorkerError(f"lightning: {module_path} has no {attr} (named by {name})", kind="input")
    return getattr(module, attr)


def lightning_base(cls: Any) -> Any:
    """The LightningModule class `cls` derives from (lightning.pytorch's or pytorch_lightning's), or None."""
    if not isinstance(cls, type):
        return None
    for package in LIGHTNING_PACKAGES:
        module = sys.modules.get(package)
        base = getattr(module, "LightningModule", None)
        if isinstance(base, type) and issubclass(cls, base):
            return base
    return None


def init_kwargs(cls: Any, spec: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The init arguments `load_from_checkpoint(path, **overrides)` would pass (`saving._load_state`)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self
    names = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params)
    # load_from_checkpoint sets hyper_parameters to {} when absent and updates it with its own kwargs.
    loaded = decode_value(spec["hparams"]) if spec.get("hparams") is not None else {}
    loaded = dict(loaded) if isinstance(loaded, Mapping) else {}
    loaded.update(overrides)
    if spec.get("hparams_type"):  # a past checkpoint's type name: Lightning wraps them in AttributeDict
        loaded = _attribute_dict(ATTRIBUTE_DICTS[0])(loaded)
    name = spec.get("hparams_name")
    kwargs: dict[str, Any] = {name: loaded} if name and name in names else dict(loaded)
    kwargs.update(overrides)
    if not takes_any:
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    for key, value in kwargs.items():
        why = _unrebuilt(value)
        if why:
            raise WorkerError(Message(f"lightning: {spec.get('name')}'s {why}, which ckptview does not rebuild as "
                                      f"an init argument of {cls.__name__} ({key})", Hint(Fix.MODEL_KWARGS)),
                              kind="refused")
    return kwargs


def _unrebuilt(value: Any, depth: int = 0) -> str | None:
    if isinstance(value, Unrebuilt):
        return value.why
    if depth > 70:
        return None
    if isinstance(value, Mapping):
        children = [*value.keys(), *value.values()]
    elif isinstance(value, argparse.Namespace):
        children = list(vars(value).values())
    elif isinstance(value, (list, tuple, set)):
        children = list(value)
    else:
        return None
    return next((w for w in (_unrebuilt(c, depth + 1) for c in children) if w), None)


def decode_value(value: Any) -> Any:
    """The Python value of tagged JSON from `core.run.lightning.encode_value`."""
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    if not isinstance(value, dict):
        return value
    tag, items = value.get("$t"), value.get("items") or []
    if tag == "tuple":
        return tuple(decode_value(v) for v in items)
    if tag == "set":
        try:
            return {decode_value(v) for v in items}
        except TypeError:
            return Unrebuilt("a set of unhashable values")
    if tag in ("dict", "ordered", "attributedict", "namespace"):
        pairs = [(decode_value(k), decode_value(v)) for k, v in items]
        if tag == "namespace":
            return argparse.Namespace(**{str(k): v for k, v in pairs})
        if tag == "attributedict":
            return _attribute_dict(str(value.get("type")))(pairs)
        return OrderedDict(pairs) if tag == "ordered" else dict(pairs)
    if tag == "float":
        return float(str(value.get("repr")))
    if tag == "bytes":
        return bytes.fromhex(str(value.get("hex")))
    return Unrebuilt(str(value.get("why") or "a value of an unknown kind"))


def _attribute_dict(type_name: str) -> Any:
    """Lightning's AttributeDict, from the installed package the file names (one of a fixed few), else dict."""
    for candidate in (type_name, *ATTRIBUTE_DICTS):
        if candidate not in ATTRIBUTE_DICTS:
            continue
        module_path, _, attr = candidate.rpartition(".")
        try:
            return getattr(importlib.import_module(module_path), attr)
        except (ImportError, AttributeError):
            continue
    return dict


def _load_with_hook(model: Any, path: str, shown: str) -> LoadReport:
    """A class that overrides `on_load_checkpoint` gets the checkpoint torch loads (weights only, through the
    gate) before its state dict is loaded, as in load_from_checkpoint; refused when torch may not load it."""
    checkpoint = torch_state_dict(path, ())
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), Mapping):
        raise WorkerError(Message(f"lightning: {shown} overrides on_load_checkpoint, which needs the whole "
                                  f"checkpoint loaded by torch, and its pickles name more than tensors and plain "
                                  f"data: give a class without that hook", Hint(Fix.MODEL)), kind="refused")
    model.on_load_checkpoint(checkpoint)
    return load_torch_state_dict(model, checkpoint["state_dict"], "state_dict")

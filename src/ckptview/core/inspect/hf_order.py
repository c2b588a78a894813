"""The parameter order of a Hugging Face model, from its `config.json` and an installed transformers.

A safetensors file stores names sorted, so a Trainer folder's model file does not say the order in which
the optimizer got its parameters (`model.named_parameters()`). The library that defines the architecture
knows it: when transformers is installed, the model named by `config.json` (``architectures[0]``) is built
on the meta device (no weights, no memory) in an isolated child process, and its parameter names are read.

Learning it costs seconds and a few hundred MB (torch and transformers imported in the child), so it never
happens during a listing: `order_request` (cheap: the config read as data, checked, and the library's
version) says what would be asked; `ParamOrders.known`, of the orders a caller hands down (the SQLite cache
of `order_cache`, keyed by the config and the library's version), answers at once when it was learned
before; and `learn` (the child) runs only when a front end decides it should: the command line before it
prints, the window in the background with the tree shown first. This module keeps no state of its own.

Only the installed library's code runs, and only to build a model class: the class must be one of
transformers' own model classes (a value of its auto-model registries, `MODEL_*_MAPPING_NAMES`, read from
the library's source as data here, and a `PreTrainedModel` in the child; a tokenizer or a pipeline class the
config names is never called). The config is read here once, as data, and checked as a run's is
(`core/run/config_guard`: no `auto_map`, no field that loads a file, a URL or code); the child
(`core.worker.param_order`, where torch is imported) gets that checked copy on stdin and builds it with
the run worker's own builder (`worker/library.parameter_names`), whose guard lets the build open nothing but
the library. The child runs offline (`HF_HUB_OFFLINE`), isolated (`python -I`) in a private folder. Nothing
here imports torch or transformers in this process; without transformers the order stays unknown.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from typing import Any, Protocol

from ckptview.core.errors import CheckpointError
from ckptview.core.read.bytes.files import open_regular
from ckptview.core.run.child import OFFLINE_ENV, scratch_folder, start_child
from ckptview.core.run.config_guard import ConfigRefused, guarded_config
from ckptview.core.run.config_json import load_json
from ckptview.core.run.declared_sizes import Listing, check_declared

CHILD = "ckptview.core.worker.param_order"  # builds the model on the meta device, with torch

TIMEOUT_S = 300.0
MAX_CONFIG_BYTES = 1 << 20
KEY_VERSION = 1  # of what a key covers: a new version asks every order again
_ARCH = re.compile(r"^[A-Z][A-Za-z0-9_]{0,100}$")


@dataclass(frozen=True)
class OrderRequest:
    """What learning a folder's parameter order would ask of the library: a model class of it, the checked
    config, and the library's version (the order is theirs, so that is the key, never the folder)."""

    folder: str
    arch: str
    config: dict[str, Any] = field(hash=False, compare=False, repr=False)
    library: str = ""  # "transformers 4.57.1"
    key: str = ""
    listing: Listing | None = field(default=None, hash=False, compare=False, repr=False)
    """The model file's tensors, whose counts bound what the child may build (not part of the key: the order
    is the library's)."""

    def describe(self) -> str:
        """How the order is learned, for a note: 'the order of transformers' BertForMaskedLM, ...'."""
        return f"the order of transformers' {self.arch}, built from config.json on the meta device"


class ParamOrders(Protocol):
    """Parameter orders learned before (a cache the caller hands down), asked without waiting."""

    def known(self, request: OrderRequest) -> list[str] | None:
        """The names in `named_parameters()` order, when learned before for this key ([]: learned that the
        library cannot tell them); else None."""
        ...


def available() -> bool:
    """Whether transformers is installed (looked up, not imported)."""
    try:
        return importlib.util.find_spec("transformers") is not None
    except (ImportError, ValueError):
        return False


def model_classes() -> frozenset[str]:
    """transformers' model class names: every value of its auto-model registries (`MODEL_*_MAPPING_NAMES`
    in `models/auto/modeling_auto.py`), read from the installed source as data (parsed, never imported).
    Read again on each call: only `learn` asks, and its child costs far more."""
    import ast

    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return frozenset()
    if spec is None or not spec.origin:
        return frozenset()
    path = os.path.join(os.path.dirname(spec.origin), "models", "auto", "modeling_auto.py")
    names: set[str] = set()
    try:
        with open_regular(path) as fh:  # the byte layer, as every read of the core
            tree = ast.parse(fh.read().decode("utf-8"), filename=path)
    except (OSError, CheckpointError, SyntaxError, ValueError):
        return frozenset()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.startswith("MODEL")
                                                and t.id.endswith("_MAPPING_NAMES") for t in node.targets):
            for item in ast.walk(node.value):
                if isinstance(item, ast.Tuple) and len(item.elts) == 2:
                    for value in ast.walk(item.elts[1]):
                        if isinstance(value, ast.Constant) and isinstance(value.value, str):
                            names.add(value.value)
    return frozenset(names)


def _read_config(folder: str, listing: Listing | None = None) -> tuple[str, dict[str, Any]] | None:
    """(the model class, the config as the build gets it) of `folder`'s config.json, or None: no config, a
    name that is not a class name, or a config that asks for code or loads (config_guard)."""
    path = os.path.join(folder, "config.json")
    try:
        with open_regular(path) as fh:  # the byte layer: a FIFO named config.json is refused, never read
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            return None
        config = load_json(bytes(raw))  # its nesting bounded before it is parsed (config_json)
    except (OSError, ValueError, CheckpointError):  # ConfigRefused is a ValueError
        return None
    if not isinstance(config, dict) or "auto_map" in config:
        return None  # code of its own: never run
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    if not isinstance(arch, str) or not _ARCH.match(arch):
        return None
    try:
        guarded = guarded_config("transformers", arch, config)
        if listing is not None:  # a config declaring more layers or larger sizes than the file holds
            check_declared(guarded, listing)
    except ConfigRefused:
        return None
    return arch, guarded


def _checked_config(folder: str) -> tuple[str, dict[str, Any]] | None:
    """`_read_config`, and the class one of transformers' own model classes (its registries), never a
    tokenizer or a pipeline class."""
    found = _read_config(folder)
    if found is None or found[0] not in model_classes():
        return None
    return found


def architecture(folder: str) -> str | None:
    """The class `config.json` names, when it is one of transformers' own model classes and the config asks
    for nothing to be loaded (no auto_map, no path, URL or download: `core/run/config_guard`)."""
    checked = _checked_config(folder)
    return checked[0] if checked is not None else None


def order_request(folder: str, listing: Listing | None = None) -> OrderRequest | None:
    """What learning `folder`'s parameter order would ask (its config read as data and checked, the installed
    library's version), or None when it cannot be learned: a URL, no config, a config that loads or runs
    something, or no transformers. Cheap: nothing is built, the library's registry is not read."""
    if not folder or "://" in folder or not os.path.isdir(folder) or not available():
        return None
    found = _read_config(folder, listing)
    if found is None:
        return None
    arch, config = found
    try:
        library = f"transformers {importlib.metadata.version('transformers')}"
    except importlib.metadata.PackageNotFoundError:
        return None
    text = json.dumps([KEY_VERSION, library, arch, config], sort_keys=True, default=str)
    key = hashlib.blake2b(text.encode(), digest_size=20).hexdigest()
    return OrderRequest(os.path.realpath(folder), arch, config, library, key, listing)


def learn(request: OrderRequest) -> list[str] | None:
    """The ``named_parameters()`` names of the model `request` describes, built in the child (seconds), or
    None: a class that is not one of the library's models, or a build that failed."""
    if request.arch not in model_classes():
        return None  # a model class of the library (BertForMaskedLM), never a tokenizer or a pipeline class
    return _build(request.arch, request.config, request.listing)


def parameter_order(folder: str, listing: Listing | None = None) -> list[str] | None:
    """``named_parameters()`` names of the model `folder`'s config.json describes, learned now (the child:
    seconds), or None when unknown. A listing asks `ParamOrders.known` instead and never waits for this.
    `listing`: the model file's tensors; the config must agree with them (its declared sizes here, what the
    child builds on meta there: `core/run/declared_sizes.py`), or the order stays unknown."""
    request = order_request(folder, listing)
    return learn(request) if request is not None else None


def _build(arch: str, config: dict[str, Any], listing: Listing | None = None) -> list[str] | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(OFFLINE_ENV, TOKENIZERS_PARALLELISM="false")
    request = json.dumps({"class": arch, "config": config, "expect": listing.to_json() if listing else None})
    private = scratch_folder("hf")  # removed by the child as it leaves, and here in any case
    try:
        # Tied to this process: it dies with it, taking its folder along (core/run/child.py).
        child = start_child(CHILD, cwd=private, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=os.name == "posix")
    except OSError:
        shutil.rmtree(private, ignore_errors=True)
        return None
    try:
        out, _ = child.proc.communicate(request.encode(), timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        out = b""
    finally:
        if child.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(child.proc.pid, signal.SIGKILL) if os.name == "posix" else child.proc.kill()
            child.proc.communicate()
        child.close()
        shutil.rmtree(private, ignore_errors=True)
    if child.proc.returncode != 0:
        return None
    try:
        names = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return names if isinstance(names, list) and all(isinstance(n, str) for n in names) else None

"""The parameter order of a Hugging Face model, from its `config.json` and an installed transformers.

A safetensors file stores names sorted, so a Trainer folder's model file does not say the order in which
the optimizer got its parameters (`model.named_parameters()`). The library that defines the architecture
knows it: when transformers is installed, the model named by `config.json` (``architectures[0]``) is built
on the meta device (no weights, no memory) in an isolated child process, and its parameter names are read.

Only the installed library's code runs: a config that asks for code of its own (``auto_map``, remote code)
is never built, the child (`core.run.worker.param_order`, where torch is imported) runs offline
(`HF_HUB_OFFLINE`), isolated (`python -I`) in a private folder. Nothing here imports torch or transformers
in this process; without transformers the order stays unknown.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import tempfile

from ckptview.core.errors import CheckpointError
from ckptview.core.read.bytes.files import open_regular
from ckptview.core.run.child import child_command

CHILD = "ckptview.core.run.worker.param_order"  # builds the model on the meta device, with torch

TIMEOUT_S = 300.0
MAX_CONFIG_BYTES = 1 << 20
_ARCH = re.compile(r"^[A-Z][A-Za-z0-9_]{0,100}$")
_cache: dict[tuple[str, int, int], list[str] | None] = {}


def available() -> bool:
    """Whether transformers is installed (looked up, not imported)."""
    try:
        return importlib.util.find_spec("transformers") is not None
    except (ImportError, ValueError):
        return False


def architecture(folder: str) -> str | None:
    """The class `config.json` names, when transformers itself defines it (no auto_map, a plain name)."""
    path = os.path.join(folder, "config.json")
    try:
        with open_regular(path) as fh:  # the byte layer: a FIFO named config.json is refused, never read
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            return None
        config = json.loads(raw)
    except (OSError, ValueError, RecursionError, CheckpointError):
        return None
    if not isinstance(config, dict) or "auto_map" in config:
        return None  # code of its own: never run
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    if not isinstance(arch, str) or not _ARCH.match(arch) or not ("For" in arch or arch.endswith("Model")):
        return None  # a model class name (BertForMaskedLM, GPT2Model), nothing else transformers exports
    return arch


def parameter_order(folder: str) -> list[str] | None:
    """``named_parameters()`` names of the model `folder`'s config.json describes, or None when unknown."""
    if not folder or "://" in folder or not os.path.isdir(folder) or not available():
        return None
    arch = architecture(folder)
    if arch is None:
        return None
    try:
        st = os.stat(os.path.join(folder, "config.json"))
    except OSError:
        return None
    key = (os.path.realpath(folder), st.st_size, st.st_mtime_ns)
    if key not in _cache:
        _cache[key] = _build(folder, arch)
    return _cache[key]


def _build(folder: str, arch: str) -> list[str] | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    with tempfile.TemporaryDirectory(prefix="ckptview-hf-") as private:
        try:
            proc = subprocess.run(child_command(CHILD, os.path.abspath(folder), arch),
                                  capture_output=True, text=True, timeout=TIMEOUT_S, cwd=private, env=env,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            return None
    if proc.returncode != 0:
        return None
    try:
        names = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return names if isinstance(names, list) and all(isinstance(n, str) for n in names) else None

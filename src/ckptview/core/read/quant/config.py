"""The quantization config beside a checkpoint, read as data: `config.json`'s `quantization_config` (or MLX's
`quantization`), else AutoGPTQ's `quantize_config.json` or AutoAWQ's `quant_config.json`.

Only JSON is parsed (at most `MAX_CONFIG_BYTES`, through the byte layer: a FIFO named config.json is refused,
never read); nothing in it is run. A config that is absent, too large or not JSON is no config: the schemes
then recognise the tensors by their names and dtypes alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ckptview.core import dtypes
from ckptview.core.errors import CheckpointError
from ckptview.core.read.context import Source

MAX_CONFIG_BYTES = 4 << 20
CONFIG_FILES = ("config.json", "quantize_config.json", "quant_config.json")

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class QuantConfig:
    """A model's quantization config: its `quant_method` (lower case), the whole mapping, the model's dtype."""

    method: str | None = None
    """`quant_method` ("fp8", "gptq", "awq", "mxfp4", "compressed-tensors", "bitsandbytes", "mlx", ...)."""
    raw: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """The quantization config as written (a JSON object)."""
    model_dtype: str | None = None
    """The dtype of the model the library builds (`torch_dtype` / `dtype` of config.json), canonical."""
    origin: str = ""
    """The file it was read from, for messages."""

    def get(self, key: str, default: Any = None) -> Any:
        """`raw[key]`, or `default`."""
        return self.raw.get(key, default)

    def int_value(self, key: str) -> int | None:
        """`raw[key]` when it is a positive int (not a bool), else None."""
        value = self.raw.get(key)
        return value if type(value) is int and value > 0 else None

    def skipped(self, name: str) -> bool:
        """Whether the config leaves the module of `name` unquantized (`modules_to_not_convert`, `ignore`)."""
        unquantized = self._unquantized()
        if not unquantized:
            return False
        prefix = name
        while prefix:  # bounded: one look-up per level of the name
            if prefix in unquantized:
                return True
            prefix = prefix.rpartition(".")[0]
        return False

    def _unquantized(self) -> frozenset[str]:
        """The module names the config lists as left unquantized (`re:` patterns aside), built once."""
        cached = self.__dict__.get("_unquantized_names")
        if cached is None:
            cached = frozenset(entry for key in ("modules_to_not_convert", "ignore", "ignored_layers")
                               if isinstance(self.raw.get(key), list)
                               for entry in self.raw[key] if isinstance(entry, str) and entry
                               and not entry.startswith("re:"))
            object.__setattr__(self, "_unquantized_names", cached)
        return cached


NO_CONFIG = QuantConfig()


def read_config(source: Source) -> QuantConfig:
    """The quantization config beside `source` (a folder: inside it; a local file: in its folder), or
    NO_CONFIG. A remote file opened alone reads none (the schemes then go by names and dtypes)."""
    fs = source.fs
    if fs.remote and not source.is_dir:
        return NO_CONFIG  # a remote file alone: no request for what may not be there (its folder's open reads it)
    try:
        folder = source.path if source.is_dir else fs.dirname(fs.abspath(source.path))
        present = set(fs.list_files(folder)) if fs.remote else None  # a remote folder's listing, already known
    except (OSError, ValueError, CheckpointError):
        return NO_CONFIG
    model_dtype: str | None = None
    for name in CONFIG_FILES:
        if present is not None and name not in present:
            continue
        data = _read_json(source, fs.join(folder, name))
        if data is None:
            continue
        if name == "config.json":
            model_dtype = _dtype_of(data)
            found = data.get("quantization_config")
            if not isinstance(found, dict):
                found = data.get("quantization")  # MLX writes its settings here
                if isinstance(found, dict):
                    found = {"quant_method": "mlx", **found}
            if not isinstance(found, dict):
                continue
        else:
            found = data
        method = found.get("quant_method")
        if not isinstance(method, str):
            method = "awq" if name == "quant_config.json" else "gptq" if name == "quantize_config.json" else None
        return QuantConfig(method.lower() if method else None, MappingProxyType(found), model_dtype, name)
    return QuantConfig(model_dtype=model_dtype) if model_dtype else NO_CONFIG


def _read_json(source: Source, path: str) -> dict[str, Any] | None:
    fs = source.fs
    try:
        if not fs.isfile(path):
            return None
        with fs.open_regular(path) as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            return None
        data = json.loads(raw)
    except (OSError, ValueError, RecursionError, CheckpointError):
        return None
    return data if isinstance(data, dict) else None


def _dtype_of(config: Mapping[str, Any]) -> str | None:
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if isinstance(value, str) and (resolved := dtypes.resolve(value)) is not None:
            return resolved
    return None

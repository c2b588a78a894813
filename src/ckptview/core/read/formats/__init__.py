"""Format readers, chosen by sniffing bytes (or a folder's content), never by extension.

Each reader module provides `NAME`, `PRIORITY` (higher is tried first), `sniff(path, head) -> bool`
and `open(path) -> Checkpoint`. `head` is the file's first bytes (b"" for a folder). Adding a format is
adding a module and listing it in `READER_MODULES`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

READER_MODULES = (
    "ckptview.core.read.formats.torch_zip",
    "ckptview.core.read.formats.torch_legacy",
    "ckptview.core.read.formats.safetensors_file",
    "ckptview.core.read.formats.plain_pickle",
    # folder and multi-file formats (sharded, distributed, exported programs)
    "ckptview.core.read.formats.training_folder",
    "ckptview.core.read.formats.hf_sharded",
    "ckptview.core.read.formats.dcp",
    "ckptview.core.read.formats.torch_export",
)


def readers() -> list[ModuleType]:
    """Every available reader, highest priority first."""
    found = []
    for name in READER_MODULES:
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return sorted(found, key=lambda m: -getattr(m, "PRIORITY", 0))

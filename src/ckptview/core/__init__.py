"""The Qt-free core of ckptview: readers, tree, values, statistics, diff, export, runner."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.checkpoint import Checkpoint, Node, Storage, TensorEntry, TensorInfo
    from ckptview.core.errors import (
        Cancelled,
        CheckpointError,
        CheckpointFormatError,
        NotACheckpointError,
        TensorDataError,
)
    from ckptview.core.read.open import open_checkpoint

__all__ = [
    "Cancelled",
    "Checkpoint",
    "CheckpointError",
    "CheckpointFormatError",
    "Node",
    "NotACheckpointError",
    "Storage",
    "TensorDataError",
    "TensorEntry",
    "TensorInfo",
    "open_checkpoint",
]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "checkpoint": ["Checkpoint", "Node", "Storage", "TensorEntry", "TensorInfo"],
    "errors": ["Cancelled", "CheckpointError", "CheckpointFormatError", "NotACheckpointError", "TensorDataError"],
    "read.open": ["open_checkpoint"],
})

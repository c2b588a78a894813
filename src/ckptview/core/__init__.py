"""The Qt-free core of ckptview: readers, tree, values, statistics, diff, export, runner."""

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

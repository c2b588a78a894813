"""The bundled example checkpoint, recognised by its bytes: its forward pass needs no code of the user's.

`example.pth` (the window opens it when started without a file) is a training checkpoint of the README's MLP.
Its model code is ckptview's own (`core/worker/example_model.py`), never the file's: a file is taken for
the example only when its state dict has the example's keys and shapes and its bytes are the bundled file's,
whatever it is called and wherever it lies; a file merely named `example.pth` is not.
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

from ckptview.core.errors import CheckpointError
from ckptview.core.read.bytes.files import open_regular
from ckptview.resources import resource_path

EXAMPLE_CLASS = "MLP"
EXAMPLE_SOURCE = "the bundled example (ckptview's own code)"
# The example's model weights (`model_state_dict`): Linear 20 -> 256, ReLU, Linear 256 -> 10.
EXAMPLE_SHAPES = {"hidden.weight": (256, 20), "hidden.bias": (256,), "output.weight": (10, 256), "output.bias": (10,)}


def example_path() -> str:
    """The bundled example checkpoint."""
    return str(resource_path("example.pth"))  # ckptview.resources lies outside src/: mypy sees no types


@functools.lru_cache(maxsize=1)
def _bundled() -> tuple[int, str] | None:
    """(size, SHA-256) of the bundled example; None when it is not there (a trimmed install)."""
    try:
        return _digest(example_path())
    except (OSError, CheckpointError):
        return None


def _digest(path: str, limit: int | None = None) -> tuple[int, str]:
    with open_regular(path) as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    return len(data), hashlib.sha256(data).hexdigest()


def is_bundled_example(path: str, tensors: dict[str, Any]) -> bool:
    """True when `tensors` (the state dict ckptview found, {key: TensorInfo}) are the example MLP's and the file
    at `path` holds the bundled example's bytes (read through the byte layer, at most its size)."""
    if {k: tuple(v.shape) for k, v in tensors.items()} != EXAMPLE_SHAPES:
        return False
    bundled = _bundled()
    if bundled is None or not os.path.isfile(path):
        return False
    try:
        if os.path.getsize(path) != bundled[0]:
            return False
        return _digest(path, bundled[0]) == bundled
    except (OSError, CheckpointError):  # a file that changes or turns special under us is not the example
        return False

"""Reading checkpoints: format readers (a registry picks by magic bytes), the safe pickle VM, the byte layer every value read goes through, and lazy values."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.read.bytes.files import ReadAhead
    from ckptview.core.read.context import ReaderContext, Source
    from ckptview.core.read.open import open_checkpoint
    from ckptview.core.read.values.reading import iter_chunks, read_values

__all__ = ["ReadAhead", "ReaderContext", "Source", "iter_chunks", "open_checkpoint", "read_values"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "bytes.files": ["ReadAhead"],
    "context": ["ReaderContext", "Source"],
    "open": ["open_checkpoint"],
    "values.reading": ["iter_chunks", "read_values"],
})

"""Reading checkpoints: format readers (a registry picks by magic bytes), the safe pickle VM, the byte layer every value read goes through, and lazy values."""

from __future__ import annotations

from ckptview.core.read.bytes.files import ReadAhead
from ckptview.core.read.context import ReaderContext, Source
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_values

__all__ = ["ReadAhead", "ReaderContext", "Source", "iter_chunks", "open_checkpoint", "read_values"]

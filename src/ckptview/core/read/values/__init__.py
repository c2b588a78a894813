"""Lazy values: the bytes a tensor's view spans, read on demand; tensors assembled from shards; slices."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.read.values.assembled import AssembledSource
    from ckptview.core.read.values.capabilities import (
        SupportsFileSpan,
        SupportsInflate,
        SupportsLogicalChunks,
        SupportsRangeRead,
)
    from ckptview.core.read.values.reading import iter_chunks, read_region, read_values

__all__ = ["AssembledSource", "SupportsFileSpan", "SupportsInflate", "SupportsLogicalChunks", "SupportsRangeRead", "iter_chunks", "read_region", "read_values"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "assembled": ["AssembledSource"],
    "capabilities": ["SupportsFileSpan", "SupportsInflate", "SupportsLogicalChunks", "SupportsRangeRead"],
    "reading": ["iter_chunks", "read_region", "read_values"],
})

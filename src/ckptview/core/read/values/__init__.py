"""Lazy values: the bytes a tensor's view spans, read on demand; tensors assembled from shards; slices."""

from __future__ import annotations

from ckptview.core.read.values.assembled import AssembledSource
from ckptview.core.read.values.capabilities import (
    SupportsFileSpan,
    SupportsInflate,
    SupportsLogicalChunks,
    SupportsRangeRead,
)
from ckptview.core.read.values.reading import iter_chunks, read_region, read_values

__all__ = ["AssembledSource", "SupportsFileSpan", "SupportsInflate", "SupportsLogicalChunks", "SupportsRangeRead", "iter_chunks", "read_region", "read_values"]

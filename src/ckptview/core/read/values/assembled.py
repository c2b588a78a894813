"""Tensors whose values are spread over several stored chunks (DCP shards), assembled on demand.

An `AssembledSource` is the byte source of such a tensor's `Storage`. `ckptview.core.read.values.reading` hands
`read_values`/`iter_chunks` to it (`logical_values`, `iter_logical_chunks`). Each chunk is itself a
plain stored tensor (a `TensorInfo` over a zip member or a file range), resolved lazily the first
time its values are needed, so opening costs nothing beyond the metadata.

Memory bound of `iter_logical_chunks`: the global tensor is produced in C order one block of whole
rows (along dimension 0) at a time; a block holds at most `max(chunk_elems, one row)` elements and is
filled from the parts of the chunks that intersect it (read with plain file reads where the chunk is
stored contiguously). Row-sharded tensors therefore stream chunk by chunk; column-sharded ones cost
one row-block of output, never the whole tensor.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptview.core.units import plural

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import CheckpointError, FileChangedError, TensorDataError
from ckptview.core.read.values.reading import iter_chunks, read_values


@dataclass(eq=False)
class Chunk:
    """One stored piece of a global tensor: its place (offsets, sizes) and how to reach its data."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    resolve: Callable[[], TensorInfo]  # the chunk's own stored tensor, shaped `sizes`
    where: str = ""  # for messages: "__1_0.distcp @ 1641"
    _info: TensorInfo | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def numel(self) -> int:
        return math.prod(self.sizes)

    def info(self) -> TensorInfo:
        """The chunk's stored tensor, checked against the shape the metadata promised."""
        with self._lock:
            if self._info is None:
                try:
                    info = self.resolve()
                except FileChangedError:
                    raise  # the whole checkpoint is stale, not this chunk
                except CheckpointError as exc:
                    raise TensorDataError(f"chunk at {self.where}: {exc}") from None
                if tuple(info.shape) != tuple(self.sizes):
                    raise TensorDataError(f"chunk at {self.where} holds shape {list(info.shape)}, "
                                          f"metadata says {list(self.sizes)}")
                self._info = info
            return self._info


def coverage_problem(shape: tuple[int, ...], chunks: list[Chunk]) -> str | None:
    """Why the chunks cannot form the global tensor (out of bounds, gaps or overlaps), else None."""
    total = 0
    for chunk in chunks:
        if len(chunk.offsets) != len(shape) or len(chunk.sizes) != len(shape):
            return f"chunk at {chunk.where} has {len(chunk.sizes)} dimensions, tensor has {len(shape)}"
        for off, size, dim in zip(chunk.offsets, chunk.sizes, shape, strict=True):
            if off < 0 or size < 0 or off + size > dim:
                return (f"chunk at {chunk.where} (offsets {list(chunk.offsets)}, sizes {list(chunk.sizes)}) "
                        f"lies outside shape {list(shape)}")
        total += chunk.numel
    numel = math.prod(shape)
    if total != numel:
        # Chunks lie within bounds; a differing element count means gaps or overlaps.
        return f"chunks hold {plural(total, 'element')}, the tensor has {numel}"
    return None


class AssembledSource:
    """The byte source of a tensor assembled from `chunks`; values are read only when asked for."""

    def __init__(self, shape: tuple[int, ...], chunks: list[Chunk], files: list[str]) -> None:
        self.shape = tuple(shape)
        self.chunks = chunks
        self.files = files

    def describe(self) -> str:
        n = len(self.chunks)
        return f"{n} chunk{'s' if n != 1 else ''} in {', '.join(self.files)}"

    def open_buffer(self) -> memoryview:
        """The assembled values' bytes (the whole tensor in memory: prefer the chunked reads)."""
        import numpy as np

        return np.ascontiguousarray(self.logical_values()).reshape(-1).view(np.uint8).data

    def logical_values(self, ahead: ReadAhead | None = None) -> np.ndarray:
        """The whole global tensor (allocates it; chunks are copied into place)."""
        import numpy as np

        if not self.chunks:
            raise TensorDataError("cannot read values: the tensor has no stored chunks")
        out: np.ndarray | None = None
        for chunk in self.chunks:
            part = read_values(chunk.info(), ahead)
            if out is None:
                out = np.empty(self.shape, dtype=part.dtype)
            out[tuple(slice(o, o + s) for o, s in zip(chunk.offsets, chunk.sizes, strict=True))] = part
        assert out is not None  # there was at least one chunk
        out.flags.writeable = False
        return out

    def iter_logical_chunks(self, chunk_elems: int, ahead: ReadAhead | None = None) -> Iterator[np.ndarray]:
        """The values in C order as 1-D arrays, one row-block (see the module docstring) at a time."""
        import numpy as np

        numel = math.prod(self.shape)
        if numel == 0 or not self.chunks:
            if not self.chunks and numel:
                raise TensorDataError("cannot read values: the tensor has no stored chunks")
            return
        if len(self.shape) == 0:
            yield np.asarray(self.logical_values(ahead)).reshape(1).copy()
            return
        rows = self.shape[0]
        row_elems = math.prod(self.shape[1:])
        rows_per_block = max(1, chunk_elems // max(row_elems, 1))
        # Chunks ordered by their first row: a block only visits the chunks that intersect it.
        ordered = sorted(self.chunks, key=lambda c: c.offsets[0])
        for r0 in range(0, rows, rows_per_block):
            r1 = min(rows, r0 + rows_per_block)
            block: np.ndarray | None = None
            for chunk in ordered:
                c0 = chunk.offsets[0]
                if c0 >= r1:
                    break
                lo, hi = max(r0, c0), min(r1, c0 + chunk.sizes[0])
                if lo >= hi or chunk.numel == 0:
                    continue
                part = _chunk_rows(chunk.info(), lo - c0, hi - c0, ahead)
                if block is None:
                    block = np.empty((r1 - r0,) + self.shape[1:], dtype=part.dtype)
                index = (slice(lo - r0, hi - r0),) + tuple(
                    slice(o, o + s) for o, s in zip(chunk.offsets[1:], chunk.sizes[1:], strict=True))
                block[index] = part
            if block is None:
                raise TensorDataError(f"cannot read values: no chunk holds rows {r0}..{r1}")
            flat = block.reshape(-1)
            for start in range(0, flat.size, max(chunk_elems, row_elems)):
                yield flat[start : start + max(chunk_elems, row_elems)]


def _chunk_rows(info: TensorInfo, a: int, b: int, ahead: ReadAhead | None = None) -> np.ndarray:
    """Rows a..b (dimension 0) of a chunk's stored tensor, read without mapping the whole chunk."""
    import numpy as np

    sub = TensorInfo(dtype=info.dtype, shape=(b - a,) + tuple(info.shape[1:]), stride=info.stride,
                     offset=info.offset + a * (info.stride[0] if info.stride else 0), storage=info.storage)
    parts = list(iter_chunks(sub, chunk_elems=max(sub.numel, 1), ahead=ahead))
    flat = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return flat.reshape(sub.shape)

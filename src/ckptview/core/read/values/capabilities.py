"""What a storage's byte source may do beyond `ByteSource` (`describe`, `open_buffer`), declared.

Each optional ability is a small protocol (magicgui's `Supports*` style); a value read asks with the
`has_*` guards, which mypy narrows on. The byte layer's sources provide them: `FileSlice` (a plain range
of a file: `SupportsFileSpan`, `SupportsRangeRead`), `ZipMember` (the same, plus `SupportsInflate` for a
compressed member), `MemorySource` (`SupportsRangeRead`), `AssembledSource` of a tensor put together
from chunks (`SupportsLogicalChunks`), and `quant.QuantSource` of a quantized weight dequantized from its parts
(`SupportsLogicalChunks`, `SupportsLogicalRegion`). A source is asked once per class, not per read: a protocol's own
`isinstance` walks its members each time, a hundred times the cost of the read of a small tensor.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import FileMap, ReadAhead


@runtime_checkable
class SupportsFileSpan(Protocol):
    """Bytes stored plainly in a file: where they are, for positioned chunked reads."""

    def file_span(self, ahead: ReadAhead | None = None) -> tuple[FileMap, int, int] | None:
        """(file, offset, length) of the bytes, or None when they are not stored plainly (compressed)."""
        ...


@runtime_checkable
class SupportsRangeRead(Protocol):
    """Any range of the bytes read alone (not the whole storage)."""

    def read_range(self, start: int, length: int, ahead: ReadAhead | None = None) -> bytes | bytearray | memoryview:
        """`length` bytes from `start`."""
        ...


@runtime_checkable
class SupportsInflate(Protocol):
    """Compressed bytes inflated as they are read, a block at a time (never the whole record at once)."""

    def iter_inflated(self, start: int, length: int, block: int, ahead: ReadAhead | None = None) -> Iterator[bytes]:
        """`length` inflated bytes from `start`, in pieces of about `block` bytes."""
        ...


@runtime_checkable
class SupportsLogicalChunks(Protocol):
    """A tensor that reads itself (assembled from chunks in several files): its values, not raw bytes."""

    def logical_values(self, ahead: ReadAhead | None = None) -> np.ndarray:
        """The whole tensor."""
        ...

    def iter_logical_chunks(self, chunk_elems: int, ahead: ReadAhead | None = None) -> Iterator[np.ndarray]:
        """The values in C order, as 1-D arrays of at most `chunk_elems` elements."""
        ...


@runtime_checkable
class SupportsLogicalRegion(Protocol):
    """A tensor that reads itself and reads a region of itself alone (the rows it spans), not whole."""

    def logical_region(self, index: tuple[int | slice, ...], ahead: ReadAhead | None = None) -> np.ndarray:
        """`tensor[index]` (ints and slices, as NumPy reads them)."""
        ...


def _provides(kind: type, capability: object) -> bool:
    return _subclass(kind, capability)


@functools.cache  # a protocol's issubclass checks every member: once per (source class, protocol)
def _subclass(kind: Any, capability: Any) -> bool:
    return issubclass(kind, capability)


def has_file_span(source: object) -> TypeGuard[SupportsFileSpan]:
    """Whether `source` can say where its bytes lie in a file."""
    return _provides(type(source), SupportsFileSpan)


def has_range_read(source: object) -> TypeGuard[SupportsRangeRead]:
    """Whether `source` reads any range of its bytes alone."""
    return _provides(type(source), SupportsRangeRead)


def has_inflate(source: object) -> TypeGuard[SupportsInflate]:
    """Whether `source` inflates compressed bytes as it reads them."""
    return _provides(type(source), SupportsInflate)


def has_logical_chunks(source: object) -> TypeGuard[SupportsLogicalChunks]:
    """Whether `source` is a tensor that reads itself (its values, not bytes)."""
    return _provides(type(source), SupportsLogicalChunks)


def has_logical_region(source: object) -> TypeGuard[SupportsLogicalRegion]:
    """Whether `source` is a tensor that reads a region of itself alone."""
    return _provides(type(source), SupportsLogicalRegion)

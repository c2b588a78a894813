"""Read a tensor's values lazily: the bytes its view spans, or bounded chunks, with positioned reads.

`read_values` reads only the bytes the tensor's view spans in its storage, into memory (never a
memory map: a mapped file that shrinks kills the process with SIGBUS). `iter_chunks` streams the
logical values in C order with memory bounded by the chunk size. A file that changed on disk since it
was opened raises `FileChangedError` (see `ckptview.core.read.bytes.sources`).

A walk over many tensors passes its `ReadAhead` (`ahead=`) to every read it makes: their small reads
then come from windows of the file read at once (see `ckptview.core.read.bytes.files.ReadAhead`).

A view that repeats its storage (stride 0, overlapping strides: `ckptview.core.read.values.repeats`) declares
more elements than it stores. `iter_chunks` and `read_values` refuse such a view in one line unless the
caller asks for the expanded tensor (`expand=True`); figures read its stored part instead
(`repeats.stored_part`), so every reader's cost is bounded by the bytes the file stores.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ckptview.core import dtypes
from ckptview.core.checkpoint import ByteSource, Storage, TensorInfo
from ckptview.core.errors import CheckpointError, TensorDataError
from ckptview.core.read.values.capabilities import (
    has_file_span,
    has_inflate,
    has_logical_chunks,
    has_logical_region,
    has_range_read,
)
from ckptview.core.read.values.repeats import check_expanded

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import FileMap, ReadAhead

DEFAULT_CHUNK_ELEMS = 1 << 22

_COMPLEX32 = [("re", "<f2"), ("im", "<f2")]  # torch's complex32 as a NumPy structured dtype


def _pairs(name: str) -> np.dtype | None:
    """The (re, im) record dtype of complex32 / bcomplex32 (bfloat16 pairs, from ml_dtypes); None for others."""
    import numpy as np

    if name == "complex32":
        return np.dtype(_COMPLEX32)
    if name == "bcomplex32":
        bf16 = dtypes.numpy_dtype("bfloat16")
        return np.dtype([("re", bf16), ("im", bf16)])
    return None


def _base_dtype(info: TensorInfo) -> np.dtype:
    return _numpy_base(info.dtype, info.storage is not None and info.storage.byteorder == "big")


@functools.lru_cache(maxsize=256)
def _numpy_base(dtype: str, big_endian: bool) -> np.dtype:
    """The NumPy dtype of a storage's raw elements (a handful of dtypes, 100,000 tensors: cached)."""
    name = dtypes.canonical(dtype)
    pairs = _pairs(name)
    base = pairs if pairs is not None else dtypes.storage_numpy_dtype(name)
    if big_endian and base.itemsize > 1:
        base = base.newbyteorder(">")
    return base


def _readable(info: TensorInfo) -> tuple[Storage, ByteSource]:
    """The tensor's storage and where its bytes live, or TensorDataError saying why they cannot be read."""
    if info.broken:
        raise TensorDataError(f"cannot read values: {info.broken}")
    if info.layout != "strided" and info.storage is None:
        raise TensorDataError(f"cannot read values: a {info.layout} tensor ({info.extra.get('nnz', '?')} stored "
                              "values); its components are not densified")
    if info.storage is None:
        raise TensorDataError("cannot read values: the tensor was saved without data")
    if info.storage.broken:
        raise TensorDataError(f"cannot read values: {info.storage.broken}")
    if info.storage.source is None:
        raise TensorDataError(f"cannot read values: storage '{info.storage.key}' has no data")
    if not dtypes.is_known(info.dtype):
        raise TensorDataError(f"cannot read values: unknown dtype {info.dtype}")
    return info.storage, info.storage.source


def _finish(arr: np.ndarray, info: TensorInfo) -> np.ndarray:
    """Native byte order and complex32/bcomplex32 decoded; other arrays are returned as they are (views)."""
    import numpy as np

    if arr.dtype.names is None and arr.dtype.isnative:  # the common case: nothing to do
        return arr
    if arr.dtype.names == ("re", "im"):  # complex32, bcomplex32: exact in complex64
        out = arr["re"].astype(np.complex64)
        out.imag = arr["im"]
        return out
    if not arr.dtype.isnative:
        return arr.astype(arr.dtype.newbyteorder("="))
    return arr


def _span(info: TensorInfo) -> tuple[int, int]:
    """(first, last) storage element the view touches; (0, -1) for an empty tensor."""
    if info.numel == 0:
        return 0, -1
    lo = info.offset + sum((s - 1) * st for s, st in zip(info.shape, info.stride, strict=True) if st < 0)
    hi = info.offset + sum((s - 1) * st for s, st in zip(info.shape, info.stride, strict=True) if st > 0)
    return lo, hi


def _file_span(source: ByteSource, ahead: ReadAhead | None) -> tuple[FileMap, int, int] | None:
    """(file, offset, length) of a source stored plainly in a file, else None."""
    return source.file_span(ahead) if has_file_span(source) else None


def _read_bytes(storage: Storage, source: ByteSource, start: int, length: int,
                ahead: ReadAhead | None = None) -> bytes | bytearray | memoryview:
    """`length` bytes from `start` of the storage's data (only those bytes are read)."""
    try:
        if has_range_read(source):
            return source.read_range(start, length, ahead)
        return source.open_buffer()[start : start + length]
    except CheckpointError:
        raise
    except (OSError, ValueError) as exc:
        raise TensorDataError(f"cannot read storage '{storage.key}': {exc}") from None


# One element of these dtypes is decoded with `struct` (bfloat16: the high half of a float32).
_STRUCT_CODES = {"float32": "f", "float64": "d", "float16": "e", "int64": "q", "int32": "i", "int16": "h",
                 "int8": "b", "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q", "bool": "?"}


def read_scalar(info: TensorInfo) -> float | int | bool | None:
    """The value of a one-element tensor of a plain dtype, read as its few bytes without NumPy (an optimizer's
    `step` counters: a listing that shows them does not pay NumPy's import); None for any other tensor
    (several elements, another dtype, a source that assembles itself), which `read_values` reads."""
    import struct

    code = _STRUCT_CODES.get(info.dtype)
    if info.numel != 1 or (code is None and info.dtype != "bfloat16"):
        return None
    storage, source = _readable(info)
    if has_logical_chunks(source):
        return None
    itemsize = dtypes.itemsize(info.dtype)
    if info.offset < 0 or (info.offset + 1) * itemsize > storage.nbytes:
        raise TensorDataError(f"cannot read values: view needs element {info.offset}, storage holds "
                              f"{storage.nbytes // itemsize}")
    raw = bytes(_read_bytes(storage, source, info.offset * itemsize, itemsize))
    if len(raw) != itemsize:
        raise TensorDataError(f"cannot read values: storage '{storage.key}' is shorter than its view")
    order = ">" if storage.byteorder == "big" else "<"
    if info.dtype == "bfloat16":
        value: float | int | bool = struct.unpack(order + "f", raw + b"\0\0" if order == ">" else b"\0\0" + raw)[0]
    else:
        value = struct.unpack(order + (code or ""), raw)[0]
    return value


def read_values(info: TensorInfo, ahead: ReadAhead | None = None, expand: bool = False) -> np.ndarray:
    """The tensor's exact values as a read-only array (read into memory: only the bytes its view spans).

    A view that repeats its storage is refused (`repeats.RepeatedStorage`) unless `expand`: the array is
    then a strided view of the stored bytes, and whoever walks it pays for every element it declares."""
    import numpy as np

    storage, source = _readable(info)
    check_expanded(info, expand)
    if has_logical_chunks(source):  # a tensor assembled from chunks (DCP shards) reads itself
        return source.logical_values(ahead)
    base_dtype = _base_dtype(info)
    itemsize = base_dtype.itemsize
    if len(info.shape) != len(info.stride):
        raise TensorDataError(f"cannot read values: {len(info.shape)} sizes but {len(info.stride)} strides")
    if info.numel == 0:
        return _finish(np.empty(info.shape, dtype=base_dtype), info)
    count = storage.nbytes // itemsize  # the storage may be typed differently (untyped)
    lo, hi = _span(info)
    if lo < 0 or hi >= count:
        raise TensorDataError(f"cannot read values: view needs element {hi if lo >= 0 else lo}, storage holds {count}")
    raw_bytes = _read_bytes(storage, source, lo * itemsize, (hi - lo + 1) * itemsize, ahead)
    if len(raw_bytes) != (hi - lo + 1) * itemsize:
        raise TensorDataError(f"cannot read values: storage '{storage.key}' is shorter than its view")
    flat = np.frombuffer(raw_bytes, dtype=base_dtype)
    # as_strided goes through __array_interface__, which loses ml_dtypes and structured dtypes:
    # stride over same-width raw integers, then view them back as the real dtype.
    raw = flat[info.offset - lo :].view(np.dtype(f"u{itemsize}") if itemsize in (1, 2, 4, 8) else base_dtype)
    arr = np.lib.stride_tricks.as_strided(
        raw, shape=info.shape, strides=tuple(s * itemsize for s in info.stride), writeable=False)
    return _finish(arr.view(base_dtype), info)


def file_position(info: TensorInfo) -> tuple[FileMap, int] | None:
    """(file, byte offset of its first element) of a C-contiguous, little-endian tensor whose bytes lie plainly
    in one file (a safetensors file, an uncompressed zip record), else None: a caller may then read them
    into memory of its own choosing (`FileMap.readinto`), e.g. placed in a page as a memory map would be."""
    storage = info.storage
    if (info.broken or info.layout != "strided" or storage is None or storage.broken or storage.source is None
            or storage.byteorder != "little" or info.numel == 0 or not dtypes.is_known(info.dtype)):
        return None
    expected, step = [], 1
    for size in reversed(info.shape):
        expected.append(step)
        step *= size
    if tuple(reversed(expected)) != tuple(info.stride) and info.numel > 1:
        return None
    span = _file_span(storage.source, None)
    if span is None:
        return None
    fmap, offset, length = span
    itemsize = _base_dtype(info).itemsize
    start = info.offset * itemsize
    if info.offset < 0 or start + info.numel * itemsize > length:
        return None
    return fmap, offset + start


def region_info(info: TensorInfo, index: tuple[int | slice, ...]) -> TensorInfo:
    """The view `info[index]` (ints and slices, as NumPy reads them) as a TensorInfo over the same storage."""
    if len(index) > len(info.shape):
        raise IndexError(f"{len(index)} indices for {len(info.shape)} dimensions")
    offset = info.offset
    shape: list[int] = []
    stride: list[int] = []
    for dim, (size, st) in enumerate(zip(info.shape, info.stride, strict=True)):
        item = index[dim] if dim < len(index) else slice(None)
        if isinstance(item, slice):
            start, _stop, step = item.indices(size)
            length = len(range(*item.indices(size)))
            offset += (start if length else 0) * st
            shape.append(length)
            stride.append(st * step)
        else:
            i = int(item) + (size if int(item) < 0 else 0)
            if not 0 <= i < size:
                raise IndexError(f"index {item} is out of range for dimension {dim} of size {size}")
            offset += i * st
    return TensorInfo(dtype=info.dtype, shape=tuple(shape), stride=tuple(stride), offset=offset,
                      storage=info.storage, extra=info.extra, broken=info.broken)


def read_region(info: TensorInfo, index: tuple[int | slice, ...], ahead: ReadAhead | None = None) -> np.ndarray:
    """`info[index]` read alone: only the bytes the region spans (a tile of a huge matrix stays small).

    The region is read as it is even where the view repeats its storage: its caller sized it (a page of
    the values table), and its elements are what the caller shows."""
    source = info.storage.source if info.storage is not None else None
    if has_logical_region(source):  # a quantized weight: only the rows the region spans are dequantized
        _readable(info)
        return source.logical_region(index, ahead)
    if has_logical_chunks(source):
        return read_values(info, ahead)[index]  # assembled from chunks: the assembly reads itself
    return read_values(region_info(info, index), ahead, expand=True)


def read_flat(info: TensorInfo, flat: np.ndarray, ahead: ReadAhead | None = None) -> np.ndarray | None:
    """Values at sorted flat positions of a contiguous tensor, reading only the runs they form.

    None when the storage cannot be read by range (then read the values whole).
    """
    import numpy as np

    storage, source = _readable(info)
    if has_logical_region(source) and has_logical_chunks(source) and flat.size:
        return _pick_logical(source.iter_logical_chunks(DEFAULT_CHUNK_ELEMS, ahead), flat)
    # Only stored file ranges: a compressed member would inflate from its start again for every run.
    span = _file_span(source, ahead)
    if not info.is_contiguous or flat.size == 0 or span is None:
        return None
    fmap, base, length = span
    base_dtype = _base_dtype(info)
    itemsize = base_dtype.itemsize
    if info.offset < 0 or (info.offset + info.numel) * itemsize > min(length, storage.nbytes):
        raise TensorDataError("cannot read values: view runs past its storage")
    out = np.empty(flat.size, dtype=base_dtype)
    raw = out.view(np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(flat) != 1) + 1, [flat.size]))
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        first = int(flat[a])
        fmap.readinto(base + (info.offset + first) * itemsize, raw[a * itemsize : b * itemsize].data, check=False,
                      ahead=ahead)
    fmap.check()  # once for all the runs: none of them comes from a changed file
    return _finish(out, info)


def _pick_logical(chunks: Iterator[np.ndarray], flat: np.ndarray) -> np.ndarray:
    """The values at sorted flat positions `flat`, picked from a tensor's chunks as they stream by (a
    tensor that reads itself: memory holds one chunk, not the tensor)."""
    import numpy as np

    picked: list[np.ndarray] = []
    start = 0
    for chunk in chunks:
        end = start + chunk.size
        lo, hi = np.searchsorted(flat, [start, end])
        if hi > lo:
            picked.append(chunk[flat[lo:hi] - start])
        start = end
        if hi >= flat.size:
            break
    return np.concatenate(picked) if picked else np.empty(0, np.float32)


def iter_chunks(info: TensorInfo, chunk_elems: int = DEFAULT_CHUNK_ELEMS,
                ahead: ReadAhead | None = None, expand: bool = False,
                buffers: ReadBuffers | None = None) -> Iterator[np.ndarray]:
    """The logical values in C order, as 1-D arrays of at most `chunk_elems` elements.

    A view that repeats its storage is refused in one line (`repeats.RepeatedStorage`, its expanded size
    said) unless `expand`: the caller asked for every element the view declares.

    `buffers`: the caller holds at most the last two chunks it was given (it is done with a chunk once it
    asks for the one after next), so a tensor stored plainly in a file may be read into these two buffers in
    turn (no fresh memory, hence no page faults, per chunk): one to compare while the next is read."""
    import numpy as np

    storage, source = _readable(info)
    check_expanded(info, expand)
    chunk_elems = max(int(chunk_elems), 1)
    numel = info.numel
    if numel == 0:
        return
    if has_logical_chunks(source):  # assembled from chunks: streams row-blocks (ckptview.core.read.values.assembled)
        yield from source.iter_logical_chunks(chunk_elems, ahead)
        return
    span = _file_span(source, ahead) if info.is_contiguous else None
    if span is not None:
        yield from _read_contiguous(info, span, chunk_elems, ahead=ahead, buffers=buffers)
        return
    if info.is_contiguous and has_inflate(source):
        # A compressed zip member: inflate as we go, never the whole (possibly bomb-sized) record.
        yield from _inflate_contiguous(info, storage, source.iter_inflated, chunk_elems, ahead)
        return
    stored = _file_span(source, ahead) is not None  # not a compressed member
    if stored and info.shape and not info.is_contiguous and _blocks_stay_small(info, chunk_elems):
        # A strided view (a slice of a fused matrix): whole rows at a time, each block reading only the
        # bytes its rows span, so memory stays near the chunk size rather than the storage's.
        yield from _iter_row_blocks(info, chunk_elems, ahead)
        return
    arr = read_values(info, ahead, expand=True)
    if arr.ndim == 0:
        yield arr.reshape(1).copy()
        return
    flat_ok = arr.flags.c_contiguous
    if flat_ok:
        flat = arr.reshape(-1)
        for start in range(0, numel, chunk_elems):
            yield flat[start : start + chunk_elems]
        return
    # Non-contiguous view: a buffered iterator copies at most `chunk_elems` values at a time.
    it = np.nditer(arr, flags=["external_loop", "buffered", "zerosize_ok", "refs_ok"],
                   op_flags=["readonly"], order="C", buffersize=chunk_elems)
    for block in it:
        # numpy's stubs type every nditer item as a tuple of arrays; with one operand it is the array.
        yield block.copy()  # type: ignore[attr-defined]


def read_small(info: TensorInfo, max_elems: int, ahead: ReadAhead | None = None) -> np.ndarray | None:
    """The values of a contiguous tensor of 1 to `max_elems` elements stored plainly in a file, as one
    1-D array read at once (what `iter_chunks` would yield as its only chunk, with less work per tensor);
    None for any other tensor. Errors are the ones `iter_chunks` raises."""
    numel = info.numel
    if not 0 < numel <= max_elems or not info.is_contiguous:
        return None
    _storage, source = _readable(info)
    if not has_file_span(source) or has_logical_chunks(source):
        return None
    span = source.file_span(ahead)
    if span is None:  # a compressed member
        return None
    return next(_read_contiguous(info, span, numel, numel, ahead))


CACHE_LINE = 64
ALIGNED_FROM = 64 << 10  # bytes


def aligned_empty(n: int, dtype: np.dtype, file_offset: int) -> np.ndarray:
    """An uninitialised 1-D array of `n` elements whose address lies at `file_offset` modulo a cache line.

    The kernel copies a file's cached pages into a buffer several times faster when source and
    destination share their place in a cache line (1 GB from the page cache: 0.08 s against 0.5 s when
    the buffer sits 16 bytes off, as malloc places large blocks). Tensors are stored 64-byte aligned, so
    this is usually a cache-line-aligned array; an offset that is not a multiple of the itemsize gets one
    aligned to the itemsize instead (NumPy's own rule). Under `ALIGNED_FROM` bytes a plain array: placing
    one costs microseconds (100,000 small tensors: a second), and small reads come from a walk's window.
    """
    import numpy as np

    itemsize = dtype.itemsize
    nbytes = n * itemsize
    if nbytes < ALIGNED_FROM:
        return np.empty(n, dtype)
    raw = np.empty(nbytes + CACHE_LINE, np.uint8)
    want = file_offset if file_offset % max(itemsize, 1) == 0 else 0
    shift = (want - raw.ctypes.data) % CACHE_LINE
    return raw[shift : shift + nbytes].view(dtype)


class ReadBuffers:
    """Two read buffers a walk lends to its chunk reads of one side (`iter_chunks(buffers=...)`), kept from
    tensor to tensor: a chunk costs neither an allocation nor the page faults of fresh memory."""

    def __init__(self) -> None:
        self._raw: list[np.ndarray | None] = [None, None]

    def take(self, turn: int, n: int, dtype: np.dtype, file_offset: int) -> np.ndarray:
        """Buffer `turn` (0 or 1) as `n` elements of `dtype`, placed as `aligned_empty` places them."""
        import numpy as np

        nbytes = n * dtype.itemsize
        raw = self._raw[turn]
        if raw is None or raw.size < nbytes + CACHE_LINE:
            raw = self._raw[turn] = np.empty(nbytes + CACHE_LINE, np.uint8)
        want = file_offset if file_offset % max(dtype.itemsize, 1) == 0 else 0
        shift = (want - raw.ctypes.data) % CACHE_LINE
        return raw[shift : shift + nbytes].view(dtype)


SPAN_FACTOR = 8  # a block of rows may read at most this many times its own elements


def _rows_per_block(info: TensorInfo, chunk_elems: int) -> int:
    row_elems = math.prod(info.shape[1:])
    return max(1, chunk_elems // max(row_elems, 1))


def _blocks_stay_small(info: TensorInfo, chunk_elems: int) -> bool:
    """Whether reading `info` a block of rows at a time reads little more than the rows themselves."""
    rows = min(info.shape[0], _rows_per_block(info, chunk_elems))
    block = region_info(info, (slice(0, rows),))
    lo, hi = _span(block)
    return block.numel > 0 and hi - lo + 1 <= SPAN_FACTOR * block.numel and info.numel > block.numel


def _iter_row_blocks(info: TensorInfo, chunk_elems: int, ahead: ReadAhead | None) -> Iterator[np.ndarray]:
    import numpy as np

    step = _rows_per_block(info, chunk_elems)
    for r0 in range(0, info.shape[0], step):
        block = read_values(region_info(info, (slice(r0, min(r0 + step, info.shape[0])),)), ahead, expand=True)
        flat = np.ascontiguousarray(block).reshape(-1)
        for start in range(0, flat.size, chunk_elems):
            yield flat[start : start + chunk_elems]


def _read_contiguous(info: TensorInfo, span: tuple[FileMap, int, int], chunk_elems: int,
                     numel: int | None = None, ahead: ReadAhead | None = None,
                     buffers: ReadBuffers | None = None) -> Iterator[np.ndarray]:
    """A contiguous view of a stored file range, read chunk by chunk straight into arrays (`buffers`: into
    its two buffers in turn, each chunk overwriting the one before the last)."""
    import numpy as np

    fmap, offset, length = span
    base_dtype = _base_dtype(info)
    itemsize = base_dtype.itemsize
    numel = info.numel if numel is None else numel
    start = offset + info.offset * itemsize
    end = start + numel * itemsize
    if info.offset < 0 or end > offset + length:
        raise TensorDataError("cannot read values: view runs past its storage")
    pos, remaining = start, numel
    turn = 0
    while remaining:
        n = min(chunk_elems, remaining)
        if buffers is not None:
            out = buffers.take(turn, n, base_dtype, pos)
            turn ^= 1
        else:
            out = aligned_empty(n, base_dtype, pos)
        fmap.readinto(pos, out.view(np.uint8).data, ahead=ahead)
        yield _finish(out, info)
        pos += n * itemsize
        remaining -= n


def _inflate_contiguous(info: TensorInfo, storage: Storage,
                        inflate: Callable[[int, int, int, ReadAhead | None], Iterator[bytes]],
                        chunk_elems: int, ahead: ReadAhead | None) -> Iterator[np.ndarray]:
    """A contiguous view of a compressed member, `inflate(start, length, block, ahead)` giving its bytes."""
    import numpy as np

    base_dtype = _base_dtype(info)
    itemsize = base_dtype.itemsize
    if info.offset < 0 or (info.offset + info.numel) * itemsize > storage.nbytes:
        raise TensorDataError("cannot read values: view runs past its storage")
    blocks = inflate(info.offset * itemsize, info.numel * itemsize, chunk_elems * itemsize, ahead)
    for raw in blocks:
        yield _finish(np.frombuffer(raw, dtype=base_dtype), info)

"""Read a tensor's values lazily: a read-only NumPy view over the mapped file, or bounded chunks.

`read_values` maps only the tensor's own storage; nothing else is read. `iter_chunks` streams the
logical values in C order with memory bounded by the chunk size (plain reads, not the map, so the
process does not accumulate mapped pages of a 20 GB tensor).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ckptview.core import dtypes
from ckptview.core.errors import CheckpointError, TensorDataError
from ckptview.core.model import TensorInfo

DEFAULT_CHUNK_ELEMS = 1 << 22

_COMPLEX32 = np.dtype([("re", "<f2"), ("im", "<f2")])


def _base_dtype(info: TensorInfo) -> np.dtype:
    name = dtypes.canonical(info.dtype)
    base = _COMPLEX32 if name == "complex32" else dtypes.storage_numpy_dtype(name)
    if info.storage is not None and info.storage.byteorder == "big" and base.itemsize > 1:
        base = base.newbyteorder(">")
    return base


def _readable(info: TensorInfo) -> None:
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


def _finish(arr: np.ndarray, info: TensorInfo) -> np.ndarray:
    """Native byte order and complex32 decoded; other arrays are returned as they are (views)."""
    if arr.dtype == _COMPLEX32 or arr.dtype == _COMPLEX32.newbyteorder(">"):
        out = arr["re"].astype(np.complex64)
        out.imag = arr["im"]
        return out
    if not arr.dtype.isnative:
        return arr.astype(arr.dtype.newbyteorder("="))
    return arr


def read_values(info: TensorInfo) -> np.ndarray:
    """The tensor's exact values as a read-only array (a view over the map where possible)."""
    _readable(info)
    assembled = getattr(info.storage.source, "logical_values", None)
    if assembled is not None:  # a tensor assembled from chunks (DCP shards) reads itself
        return assembled()
    base_dtype = _base_dtype(info)
    try:
        buf = info.storage.source.open_buffer()
    except CheckpointError:
        raise
    except (OSError, ValueError) as exc:
        raise TensorDataError(f"cannot read storage '{info.storage.key}': {exc}") from None
    itemsize = base_dtype.itemsize
    count = min(len(buf), info.storage.nbytes) // itemsize  # the storage may be typed differently (untyped)
    flat = np.frombuffer(buf, dtype=base_dtype, count=count)
    if info.numel == 0:
        return _finish(np.empty(info.shape, dtype=base_dtype), info)
    last = info.offset + sum((s - 1) * st for s, st in zip(info.shape, info.stride, strict=True))
    if info.offset < 0 or last >= count:
        raise TensorDataError(f"cannot read values: view needs element {last}, storage holds {count}")
    # as_strided goes through __array_interface__, which loses ml_dtypes and structured dtypes:
    # stride over same-width raw integers, then view them back as the real dtype.
    raw = flat[info.offset :].view(np.dtype(f"u{itemsize}") if itemsize in (1, 2, 4, 8) else base_dtype)
    arr = np.lib.stride_tricks.as_strided(
        raw, shape=info.shape, strides=tuple(s * itemsize for s in info.stride), writeable=False)
    return _finish(arr.view(base_dtype), info)


def iter_chunks(info: TensorInfo, chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> Iterator[np.ndarray]:
    """The logical values in C order, as 1-D arrays of at most `chunk_elems` elements."""
    _readable(info)
    chunk_elems = max(int(chunk_elems), 1)
    numel = info.numel
    if numel == 0:
        return
    streamed = getattr(info.storage.source, "iter_logical_chunks", None)
    if streamed is not None:  # assembled from chunks: streams row-blocks (ckptview.core.assembled)
        yield from streamed(chunk_elems)
        return
    source_range = getattr(info.storage.source, "file_range", lambda: None)()
    if info.is_contiguous and source_range is not None:
        yield from _read_contiguous(info, source_range, chunk_elems)
        return
    if info.is_contiguous and hasattr(info.storage.source, "iter_inflated"):
        # A compressed zip member: inflate as we go, never the whole (possibly bomb-sized) record.
        yield from _inflate_contiguous(info, chunk_elems)
        return
    arr = read_values(info)
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
                   op_flags=[["readonly"]], order="C", buffersize=chunk_elems)
    for block in it:
        yield block.copy()


def _read_contiguous(info: TensorInfo, source_range: tuple[str, int, int],
                     chunk_elems: int) -> Iterator[np.ndarray]:
    path, offset, length = source_range
    base_dtype = _base_dtype(info)
    itemsize = base_dtype.itemsize
    start = offset + info.offset * itemsize
    end = start + info.numel * itemsize
    if info.offset < 0 or end > offset + length:
        raise TensorDataError("cannot read values: view runs past its storage")
    with open(path, "rb") as fh:
        fh.seek(start)
        remaining = info.numel
        while remaining:
            n = min(chunk_elems, remaining)
            raw = fh.read(n * itemsize)
            if len(raw) != n * itemsize:
                raise TensorDataError("cannot read values: file ended early (truncated)")
            yield _finish(np.frombuffer(raw, dtype=base_dtype), info)
            remaining -= n


def _inflate_contiguous(info: TensorInfo, chunk_elems: int) -> Iterator[np.ndarray]:
    base_dtype = _base_dtype(info)
    itemsize = base_dtype.itemsize
    if info.offset < 0 or (info.offset + info.numel) * itemsize > info.storage.nbytes:
        raise TensorDataError("cannot read values: view runs past its storage")
    blocks = info.storage.source.iter_inflated(info.offset * itemsize, info.numel * itemsize,
                                               chunk_elems * itemsize)
    for raw in blocks:
        yield _finish(np.frombuffer(raw, dtype=base_dtype), info)

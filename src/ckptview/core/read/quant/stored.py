"""The stored parts of a quantized weight, read in bounded pieces through the byte layer (never mapped).

A decoder reads the rows of a part that a block of logical rows needs (`rows`), or, where a scheme stores its
codes transposed (GPTQ's and AWQ's `qweight` are (in, out) where the weight is (out, in)), a band of columns of
every row (`columns`), read a few rows at a time so no piece spans more than `PIECE_BYTES` of the file. Small
parts (scales, zero points, group indices) are read whole once (`whole`): their size is a fraction of the codes'.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ckptview.core import dtypes
from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import TensorDataError
from ckptview.core.read.values.reading import read_region, read_values
from ckptview.core.units import plural

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

PIECE_BYTES = 8 << 20


def matrix(info: TensorInfo, columns: int | None = None) -> TensorInfo:
    """`info` seen as a C-contiguous matrix of `columns` (default: its last dimension) per row, same storage."""
    last = info.shape[-1] if info.shape else 1
    columns = last if columns is None else columns
    numel = info.numel
    if not info.is_contiguous:
        raise TensorDataError("cannot dequantize: a stored part is not contiguous")
    if columns <= 0 or numel % columns:
        raise TensorDataError(f"cannot dequantize: a part of {plural(numel, 'element')} is no matrix of {plural(columns, 'column')}")
    return TensorInfo(info.dtype, (numel // columns, columns), (columns, 1), info.offset, info.storage,
                      broken=info.broken)


def whole(info: TensorInfo, ahead: ReadAhead | None = None) -> np.ndarray:
    """A small part's values (scales, zero points, indices), as stored."""
    return read_values(info, ahead)


def rows(info: TensorInfo, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
    """Rows r0..r1 of a stored matrix (`matrix`), read alone."""
    return read_region(info, (slice(r0, r1),), ahead)


def columns(info: TensorInfo, c0: int, c1: int, ahead: ReadAhead | None = None, r0: int = 0,
            r1: int | None = None) -> np.ndarray:
    """Columns c0..c1 of rows r0..r1 (default: every row) of a stored matrix, read a few rows at a time (each
    piece spans at most `PIECE_BYTES`, or one row)."""
    import numpy as np

    n_rows, n_cols = info.shape
    r1 = n_rows if r1 is None else r1
    row_bytes = max(1, n_cols * dtypes.itemsize(info.dtype))
    step = max(1, PIECE_BYTES // row_bytes)
    out: np.ndarray | None = None
    for p0 in range(r0, r1, step):
        p1 = min(r1, p0 + step)
        piece = read_region(info, (slice(p0, p1), slice(c0, c1)), ahead)
        if out is None:
            out = np.empty((r1 - r0, c1 - c0), dtype=piece.dtype)
        out[p0 - r0 : p1 - r0] = piece
    if out is None:
        return np.empty((0, c1 - c0), dtype=dtypes.storage_numpy_dtype(info.dtype))
    return out


def as_float32(values: np.ndarray) -> np.ndarray:
    """Stored values (float8, bf16, fp16, float32, e8m0) as float32: exact for every one of them."""
    import numpy as np

    return values.astype(np.float32, copy=False)


def round_to(values: np.ndarray, dtype: str | None) -> np.ndarray:
    """float32 `values` rounded to `dtype` (bf16, fp16: as torch's `.to(dtype)` rounds, to nearest even) and
    held in float32 again (exact); float32 or None leaves them as they are."""
    import numpy as np

    if dtype is None or dtype == "float32":
        return values
    held = dtypes.numpy_dtype(dtype)
    if held is None:
        return values
    return values.astype(held).astype(np.float32)


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up."""
    return -(-a // b)


def stored_bytes(*parts: TensorInfo | None) -> int:
    """Bytes the given parts store (their logical bytes: numel x itemsize)."""
    return sum(p.numel * dtypes.itemsize(p.dtype) for p in parts if p is not None)


def numel(shape: tuple[int, ...]) -> int:
    """Elements of `shape`."""
    return math.prod(shape)

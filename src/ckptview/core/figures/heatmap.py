"""Any tensor as a 2-D picture, downsampled by block max-abs so outliers always survive (Qt-free).

A tensor is viewed as ``shape[axis] x (product of the other dimensions)``: a conv kernel
``(out, in, kh, kw)`` with ``axis=0`` is ``out x (in*kh*kw)``. When the matrix is larger than the
display, each block of ``br x bc`` elements becomes the element of largest magnitude in it, sign kept,
so a single exploded weight still shows. Non-finite values are never hidden: a block holding a NaN is
NaN, one holding an infinity is that infinity (max-abs keeps it, sign kept), and the heat-map counts the
NaN, +Inf and -Inf elements it read.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptview.core.jobs import CancelToken, Progress, drain
from ckptview.core.read.values.reading import read_region, read_values
from ckptview.core.read.values.repeats import repeats

if TYPE_CHECKING:
    import numpy as np

DEFAULT_MAX_SHAPE = (512, 512)


@dataclass(frozen=True)
class HeatMap:
    """The picture: ``image`` rows x cols, each pixel standing for a ``block`` of the 2-D matrix."""

    image: np.ndarray  # float64
    block: tuple[int, int]
    matrix_shape: tuple[int, int]
    axis: int
    nan: int = 0  # elements that are NaN (not pixels)
    posinf: int = 0  # elements that are +Inf
    neginf: int = 0  # elements that are -Inf
    stored_only: str = ""  # a view that repeats its storage: the picture is of its stored part, and why

    @property
    def downsampled(self) -> bool:
        """True when one pixel stands for more than one element."""
        return self.block != (1, 1)


def matrix_shape(shape: tuple[int, ...], axis: int = 0) -> tuple[int, int]:
    """The 2-D shape a tensor is viewed as: ``shape[axis] x prod(rest)`` (1-D and 0-D: one row)."""
    if len(shape) < 2:
        return (1, math.prod(shape))
    axis = _check_axis(shape, axis)
    return (shape[axis], math.prod(shape[:axis] + shape[axis + 1 :]))


def _check_axis(shape: tuple[int, ...], axis: int) -> int:
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"axis {axis} out of range for a {len(shape)}-D tensor")
    return axis % len(shape)


def _rows_view(values: np.ndarray, axis: int) -> np.ndarray:
    """A view whose first dimension is the matrix rows (no copy)."""
    import numpy as np

    if values.ndim < 2:
        return values.reshape(1, -1) if values.ndim == 1 else values.reshape(1, 1)
    return np.moveaxis(values, _check_axis(values.shape, axis), 0)


def _comparable(block: np.ndarray) -> np.ndarray:
    """The block in a dtype NumPy compares fast and exactly: bf16 widened to float32 by a bit shift,
    other ml_dtypes (float8) cast to float32, complex as magnitudes; native numbers stay as they are."""
    import numpy as np

    kind = block.dtype.kind
    if kind == "c":
        return np.abs(block.astype(np.complex128, copy=False))
    if kind == "b":
        return block.view(np.uint8)
    if kind in "fiu" and block.dtype.isnative:
        return block
    if block.dtype.name == "bfloat16":  # the high half of a float32: exact, and no slow ml_dtypes cast
        widened = block.view(np.uint16).astype(np.uint32)
        widened <<= 16
        return widened.view(np.float32)
    return block.astype(np.float32 if block.dtype.itemsize <= 2 else np.float64)


def _row_extrema(x: np.ndarray, br: int) -> tuple[np.ndarray, np.ndarray]:
    """(max, min) over each group of `br` rows, NaN ignored; the last group may be shorter."""
    import numpy as np

    if br == 1:
        return x, x
    rows, cols = x.shape
    full = rows - rows % br
    his, los = [], []
    if full:
        blocks = x[:full].reshape(full // br, br, cols)
        his.append(np.fmax.reduce(blocks, axis=1))
        los.append(np.fmin.reduce(blocks, axis=1))
    if full < rows:
        his.append(np.fmax.reduce(x[full:], axis=0, keepdims=True))
        los.append(np.fmin.reduce(x[full:], axis=0, keepdims=True))
    if len(his) == 1:
        return his[0], los[0]
    return np.concatenate(his), np.concatenate(los)


def _col_extrema(x: np.ndarray, bc: int, ufunc: np.ufunc) -> np.ndarray:
    """`ufunc` (fmax or fmin) over each run of `bc` columns; the last run may be shorter."""
    import numpy as np

    if bc == 1:
        return x
    rows, cols = x.shape
    full = cols - cols % bc
    parts = []
    if full:
        parts.append(ufunc.reduce(x[:, :full].reshape(rows, full // bc, bc), axis=2))
    if full < cols:
        parts.append(ufunc.reduce(x[:, full:], axis=1, keepdims=True))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)


def _reduce(x: np.ndarray, br: int, bc: int) -> np.ndarray:
    """Max-abs (sign kept) of each br x bc block, NaN ignored (a block of NaN only stays NaN).

    Rows first: an element-wise max/min of whole rows, vectorised over the contiguous axis; the
    columns then work on 1/br of the data. Exact in the block's own dtype; float64 only at the end.
    """
    import numpy as np

    hi, lo = _row_extrema(x, br)
    hi = _col_extrema(hi, bc, np.fmax).astype(np.float64)
    lo = _col_extrema(lo, bc, np.fmin).astype(np.float64)
    return np.where(-lo > hi, lo, hi)


def _block_any(mask: np.ndarray, br: int, bc: int) -> np.ndarray:
    """True for each br x bc block holding a True element."""
    import numpy as np

    hits = _row_extrema(mask.view(np.uint8), br)[0]
    return np.asarray(_col_extrema(hits, bc, np.fmax), dtype=bool)


def _reduce_counting(x: np.ndarray, br: int, bc: int, counts: list[int]) -> np.ndarray:
    """`_reduce`, with NaN made to win its block and the NaN, +Inf, -Inf elements added to `counts`."""
    import numpy as np

    image = _reduce(x, br, bc)
    if x.dtype.kind != "f" or np.isfinite(x).all():  # one cheap pass when everything is finite
        return image
    nan = np.isnan(x)
    counts[0] += int(np.count_nonzero(nan))
    counts[1] += int(np.count_nonzero(np.isposinf(x)))
    counts[2] += int(np.count_nonzero(np.isneginf(x)))
    if counts[0]:
        image[_block_any(nan, br, bc)] = np.nan  # a NaN is never hidden by the block's largest finite value
    return image


def iter_heatmap(
    values: np.ndarray, axis: int = 0, max_shape: tuple[int, int] = DEFAULT_MAX_SHAPE,
    token: CancelToken | None = None, chunk_elems: int = 1 << 21,
) -> Generator[Progress, None, HeatMap]:
    """Downsample an array (or anything sliced like one) to at most ``max_shape``, reading row groups."""
    return (yield from _iter_rows(_rows_view(values, axis), tuple(values.shape), axis, max_shape, token,
                                  chunk_elems))


def iter_tensor_heatmap(
    info: Any, axis: int = 0, max_shape: tuple[int, int] = DEFAULT_MAX_SHAPE,
    token: CancelToken | None = None, chunk_elems: int = 1 << 21,
) -> Generator[Progress, None, HeatMap]:
    """The heat-map of a tensor read group of rows by group of rows (`values.read_region`): memory holds one
    group, never the whole tensor, whatever its size. A view that repeats its storage is pictured by its
    stored part (`values.repeats`: a stride-0 view collapsed along its repeated dimensions, an overlapping
    one as the run of storage it spans), so the work is what the file stores; `stored_only` says so."""
    found = repeats(info)
    if found is not None:
        part = found.part
        picture = yield from _iter_plain_heatmap(part, axis if len(part.shape) >= 2 else 0, max_shape, token,
                                                 chunk_elems)
        note = (f"of the {found.stored:,} stored elements, shape {list(part.shape)}: the tensor "
                f"{found.describe(info.dtype)}")
        return dataclasses.replace(picture, stored_only=note)
    return (yield from _iter_plain_heatmap(info, axis, max_shape, token, chunk_elems))


def _iter_plain_heatmap(info: Any, axis: int, max_shape: tuple[int, int], token: CancelToken | None,
                        chunk_elems: int) -> Generator[Progress, None, HeatMap]:
    import numpy as np

    shape = tuple(info.shape)
    if len(shape) < 2:
        return (yield from iter_heatmap(read_values(info), axis, max_shape, token, chunk_elems))
    dim = _check_axis(shape, axis)

    class Rows:
        """Rows of the matrix view (dimension `dim` first), each slice read on its own."""

        def __getitem__(self, rows: slice) -> np.ndarray:
            index: list[Any] = [slice(None)] * len(shape)
            index[dim] = rows
            return np.moveaxis(np.asarray(read_region(info, tuple(index))), dim, 0)

    return (yield from _iter_rows(Rows(), shape, axis, max_shape, token, chunk_elems))


def _iter_rows(rows_view: Any, shape: tuple[int, ...], axis: int, max_shape: tuple[int, int],
               token: CancelToken | None, chunk_elems: int) -> Generator[Progress, None, HeatMap]:
    import numpy as np

    rows, cols = matrix_shape(shape, axis)
    br, bc = max(1, math.ceil(rows / max_shape[0])), max(1, math.ceil(cols / max_shape[1]))
    if rows == 0 or cols == 0:
        return HeatMap(np.zeros((0, 0)), (br, bc), (rows, cols), axis)
    # Whole blocks of rows per read, as many as fit the chunk budget.
    group = br * max(1, chunk_elems // max(1, br * cols))
    parts = []
    counts = [0, 0, 0]  # NaN, +Inf, -Inf elements
    for r0 in range(0, rows, group):
        if token is not None:
            token.check()
        block = np.asarray(rows_view[r0 : r0 + group]).reshape(-1, cols)
        parts.append(_reduce_counting(_comparable(block), br, bc, counts))
        yield Progress(min(rows, r0 + group), rows, "heat-map")
    return HeatMap(np.concatenate(parts, axis=0), (br, bc), (rows, cols), axis, counts[0], counts[1], counts[2])


def heatmap(values: np.ndarray, axis: int = 0, max_shape: tuple[int, int] = DEFAULT_MAX_SHAPE) -> HeatMap:
    """Plain-function form of :func:`iter_heatmap`."""
    return drain(iter_heatmap(values, axis, max_shape))

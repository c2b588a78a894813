"""Any tensor as a 2-D picture, downsampled by block max-abs so outliers always survive (Qt-free).

A tensor is viewed as ``shape[axis] x (product of the other dimensions)``: a conv kernel
``(out, in, kh, kw)`` with ``axis=0`` is ``out x (in*kh*kw)``. When the matrix is larger than the
display, each block of ``br x bc`` elements becomes the element of largest magnitude in it, sign kept,
so a single exploded weight still shows. NaN is ignored inside a block (its count is in the stats);
a block of NaN only stays NaN.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from ckptview.core.jobs import CancelToken, Progress

DEFAULT_MAX_SHAPE = (512, 512)


@dataclass(frozen=True)
class HeatMap:
    """The picture: ``image`` rows x cols, each pixel standing for a ``block`` of the 2-D matrix."""

    image: np.ndarray  # float64
    block: tuple[int, int]
    matrix_shape: tuple[int, int]
    axis: int

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
    if values.ndim < 2:
        return values.reshape(1, -1) if values.ndim == 1 else values.reshape(1, 1)
    return np.moveaxis(values, _check_axis(values.shape, axis), 0)


def _as_float(block: np.ndarray) -> np.ndarray:
    if block.dtype.kind == "c":
        return np.abs(block.astype(np.complex128, copy=False))
    return block.astype(np.float64)


def _reduce(x: np.ndarray, br: int, bc: int) -> np.ndarray:
    """Max-abs (sign kept) of each br x bc block of a float64 matrix, padding with NaN."""
    rows, cols = x.shape
    pr, pc = -rows % br, -cols % bc
    if pr or pc:
        x = np.pad(x, ((0, pr), (0, pc)), constant_values=np.nan)
    blocks = x.reshape(x.shape[0] // br, br, x.shape[1] // bc, bc)
    hi = np.fmax.reduce(np.fmax.reduce(blocks, axis=3), axis=1)
    lo = np.fmin.reduce(np.fmin.reduce(blocks, axis=3), axis=1)
    return np.where(-lo > hi, lo, hi)


def iter_heatmap(
    values: np.ndarray, axis: int = 0, max_shape: tuple[int, int] = DEFAULT_MAX_SHAPE,
    token: CancelToken | None = None, chunk_elems: int = 1 << 22,
) -> Generator[Progress, None, HeatMap]:
    """Downsample a (possibly memory-mapped) tensor to at most ``max_shape``, reading row groups."""
    rows_view = _rows_view(values, axis)
    rows, cols = matrix_shape(values.shape, axis)
    br, bc = max(1, math.ceil(rows / max_shape[0])), max(1, math.ceil(cols / max_shape[1]))
    if rows == 0 or cols == 0:
        return HeatMap(np.zeros((0, 0)), (br, bc), (rows, cols), axis)
    # Whole blocks of rows per read, as many as fit the chunk budget.
    group = br * max(1, chunk_elems // max(1, br * cols))
    parts = []
    for r0 in range(0, rows, group):
        if token is not None:
            token.check()
        block = np.asarray(rows_view[r0 : r0 + group]).reshape(-1, cols)
        parts.append(_reduce(_as_float(block), br, bc))
        yield Progress(min(rows, r0 + group), rows, "heat-map")
    return HeatMap(np.concatenate(parts, axis=0), (br, bc), (rows, cols), axis)


def heatmap(values: np.ndarray, axis: int = 0, max_shape: tuple[int, int] = DEFAULT_MAX_SHAPE) -> HeatMap:
    """Plain-function form of :func:`iter_heatmap`."""
    from ckptview.core.jobs import drain

    return drain(iter_heatmap(values, axis, max_shape))

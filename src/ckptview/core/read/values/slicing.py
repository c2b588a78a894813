"""Slice specs such as ``[0, :, :]`` or ``[..., 2:10, ::4]``: parse, check against a shape, apply (Qt-free)."""

from __future__ import annotations

from types import EllipsisType
from typing import TYPE_CHECKING, Any

from ckptview.core.read.values.reading import (
    read_region,  # values need numpy and the readers: only when read
)

if TYPE_CHECKING:
    import numpy as np

Index = int | slice | EllipsisType


class SliceError(ValueError):
    """A slice spec that cannot be parsed or does not fit the tensor; the message is for a person."""


def _int(text: str, spec: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SliceError(f"not an index: {text.strip()!r} in {spec!r}") from None


def parse_slice(spec: str) -> tuple[Index, ...]:
    """Parse ``[0, :, 1:5:2, ...]`` (brackets optional) into a NumPy index tuple."""
    body = spec.strip()
    if body.startswith("["):
        if not body.endswith("]"):
            raise SliceError(f"missing ']' in {spec!r}")
        body = body[1:-1]
    if not body.strip():
        return ()
    out: list[Index] = []
    for item in body.split(","):
        item = item.strip()
        if item in ("...", "…"):
            if any(x is Ellipsis for x in out):
                raise SliceError(f"only one '...' allowed in {spec!r}")
            out.append(Ellipsis)
        elif ":" in item:
            parts = item.split(":")
            if len(parts) > 3:
                raise SliceError(f"too many ':' in {item!r}")
            start, stop, step = ([_int(p, spec) if p.strip() else None for p in parts] + [None])[:3]
            if step == 0:
                raise SliceError(f"slice step cannot be zero in {item!r}")
            out.append(slice(start, stop, step))
        elif item:
            out.append(_int(item, spec))
        else:
            raise SliceError(f"empty index in {spec!r}")
    return tuple(out)


def resolve(shape: tuple[int, ...], spec: str | tuple[Index, ...]) -> tuple[tuple[int | slice, ...], tuple[int, ...]]:
    """Check a spec against ``shape``; returns (the full index tuple, no '...' left, the shape it selects)."""
    index = parse_slice(spec) if isinstance(spec, str) else spec
    n_ell = sum(1 for x in index if x is Ellipsis)
    fixed = len(index) - n_ell
    if fixed > len(shape):
        raise SliceError(f"{fixed} indices for a tensor with {len(shape)} dimensions {list(shape)}")
    if n_ell:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - fixed) + index[at + 1 :]
    index = index + (slice(None),) * (len(shape) - len(index))
    out_shape: list[int] = []
    full: list[int | slice] = []
    for axis, (item, size) in enumerate(zip(index, shape, strict=True)):
        if isinstance(item, int):
            if not -size <= item < size:
                raise SliceError(f"index {item} out of range for dimension {axis} of size {size}")
        else:
            assert isinstance(item, slice)
            out_shape.append(len(range(*item.indices(size))))
        full.append(item)
    return tuple(full), tuple(out_shape)


def default_spec(shape: tuple[int, ...]) -> str:
    """A spec selecting the first 2-D slice: ``[0, 0, :, :]`` for 4-D, ``[:, :]`` for 2-D."""
    if len(shape) <= 2:
        return "[" + ", ".join(":" for _ in shape) + "]"
    return "[" + ", ".join(["0"] * (len(shape) - 2) + [":", ":"]) + "]"


def view_2d(values: np.ndarray, spec: str | tuple[Index, ...]) -> np.ndarray:
    """The 2-D slice ``spec`` selects, as a view (no copy of a mapped array); 0-/1-D become one row."""
    import numpy as np

    index, out_shape = resolve(values.shape, spec)
    if len(out_shape) > 2:
        raise SliceError(
            f"the slice leaves {len(out_shape)} dimensions {list(out_shape)}; fix all but two with an index"
        )
    view = values[index] if index else values
    return np.asarray(view).reshape((1,) * (2 - view.ndim) + view.shape) if view.ndim < 2 else view


class LazySlice2D:
    """The 2-D slice a spec selects from a tensor, read region by region, never whole.

    ``lazy[r0:r1, c0:c1]`` reads only that tile's bytes (`values.read_region`), so a table over a 20 GB
    matrix holds what is on screen. 0-/1-D selections are one row, as in :func:`view_2d`.
    """

    def __init__(self, info: Any, spec: str | tuple[Index, ...]) -> None:
        index, out_shape = resolve(tuple(info.shape), spec)
        if len(out_shape) > 2:
            raise SliceError(
                f"the slice leaves {len(out_shape)} dimensions {list(out_shape)}; fix all but two with an index"
            )
        self.info = info
        # The dimensions the slice keeps: (dimension, start, step, length) after normalising.
        self._kept: list[tuple[int, int, int, int]] = []
        for dim, (item, size) in enumerate(zip(index, info.shape, strict=True)):
            if isinstance(item, slice):
                start, stop, step = item.indices(size)
                self._kept.append((dim, start, step, len(range(start, stop, step))))
        self._index = list(index)
        self.shape: tuple[int, int] = tuple((1,) * (2 - len(out_shape)) + tuple(out_shape))  # type: ignore[assignment]
        self.dtype = info.dtype

    def source_index(self, axis: int, i: int) -> tuple[int, int] | None:
        """(dimension, index in the tensor) of row (axis 0) or column (axis 1) ``i`` of the slice; None for
        the made-up row (and column) of a 0-/1-D selection, which is no index of the tensor."""
        kept = (None,) * (2 - len(self._kept)) + tuple(self._kept)
        found = kept[axis]
        if found is None:
            return None
        dim, start, step, _length = found
        return dim, start + i * step

    def __getitem__(self, key: tuple[slice, slice]) -> np.ndarray:
        import numpy as np

        rows, cols = key
        wanted = [rows, cols][2 - len(self._kept):]  # 0-/1-D: the row (and column) are synthetic
        index = list(self._index)
        for (dim, start, step, length), part in zip(self._kept, wanted, strict=True):
            lo, hi, _ = part.indices(length)
            hi = max(hi, lo)
            first, last = start + lo * step, start + hi * step  # positions in the tensor's dimension
            index[dim] = slice(first, last if last >= 0 else None, step)
        block = np.asarray(read_region(self.info, tuple(index)))
        r = len(range(*rows.indices(self.shape[0])))
        c = len(range(*cols.indices(self.shape[1])))
        return block.reshape(r, c)

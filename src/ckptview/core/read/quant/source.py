"""The value source of a quantized weight's logical tensor: its parts dequantized in bounded blocks of rows.

`QuantSource` is the byte source of the logical tensor's `Storage`. The value layer hands it every read
(`values.reading`: `read_values`, `iter_chunks`, `read_region`, `read_flat`), so statistics, histograms,
heat-maps, the values table, spectra, module figures, series, comparisons and graph overlays read the real
weight with no code of their own. A block holds at most `max(chunk_elems, one row)` float32 values of the
logical tensor plus the stored bytes of the parts those rows need; every block is paid for on one work
budget derived from the parts' stored bytes (so a file cannot declare more work than its bytes pay for).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Storage, TensorInfo
from ckptview.core.errors import TensorDataError
from ckptview.core.read.quant.protocol import Decoder

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

# Work units a stored byte pays for when dequantizing (a byte of 2-bit codes is 4 weights, each a few steps).
PER_STORED_BYTE = 64


class QuantSource:
    """The logical values of a quantized weight of `shape`, dequantized by `decoder` from its parts."""

    def __init__(self, shape: tuple[int, ...], decoder: Decoder, label: str, stored_bytes: int) -> None:
        self.shape = tuple(shape)
        self.decoder = decoder
        self.label = label
        self.stored_bytes = stored_bytes
        self.n_cols = self.shape[-1] if self.shape else 1
        self.n_rows = math.prod(self.shape[:-1]) if self.shape else 1
        self._codes: TensorInfo | None = None

    def codes_view(self) -> TensorInfo:
        """The weight's stored codes as a tensor of its shape (float32: an int4 weight's 0..15, an fp8 weight's
        fp8 values), read as the weight is, a block of rows at a time: every figure of it is a figure of the
        codes (a 4-bit weight's histogram has its 16 levels)."""
        if self._codes is None:
            source = QuantSource(self.shape, _Codes(self.decoder), f"{self.label} codes", self.stored_bytes)
            strides = tuple(math.prod(self.shape[i + 1:]) for i in range(len(self.shape)))
            self._codes = TensorInfo("float32", self.shape, strides, 0,
                                     Storage(f"codes of a {self.label} weight", "float32", math.prod(self.shape),
                                             source=source))
        return self._codes

    def describe(self) -> str:
        return f"{self.label}, dequantized from its parts"

    def open_buffer(self) -> memoryview:
        """The dequantized values' bytes (the whole tensor in memory: prefer the chunked reads)."""
        import numpy as np

        return np.ascontiguousarray(self.logical_values()).reshape(-1).view(np.uint8).data

    def _budget(self) -> Budget:
        return Budget.for_stored(self.stored_bytes, f"dequantizing a {self.label} weight",
                                 per_byte=PER_STORED_BYTE)

    def _blocks(self, r0: int, r1: int, chunk_elems: int, ahead: ReadAhead | None,
                codes: bool = False) -> Iterator[np.ndarray]:
        """Rows r0..r1 dequantized (or their codes), a block of at most `chunk_elems` values (or a row) at a time."""
        step = max(1, chunk_elems // max(self.n_cols, 1))
        budget = self._budget()
        for a in range(r0, r1, step):
            b = min(r1, a + step)
            budget.charge((b - a) * max(self.n_cols, 1), "weights dequantized")
            block = self.decoder.codes(a, b, ahead) if codes else self.decoder.rows(a, b, ahead)
            if block is None:
                raise TensorDataError(f"cannot show codes: a {self.label} weight has no code per weight")
            if block.shape != (b - a, self.n_cols):
                raise TensorDataError(f"cannot dequantize: rows {a}..{b} came out as {list(block.shape)}")
            yield block

    def logical_values(self, ahead: ReadAhead | None = None) -> np.ndarray:
        """The whole dequantized tensor (float32, read-only)."""
        import numpy as np

        out = np.empty((self.n_rows, self.n_cols), dtype=np.float32)
        r = 0
        for block in self._blocks(0, self.n_rows, 1 << 22, ahead):
            out[r : r + block.shape[0]] = block
            r += block.shape[0]
        shaped: np.ndarray = out.reshape(self.shape)
        shaped.flags.writeable = False
        return shaped

    def iter_logical_chunks(self, chunk_elems: int, ahead: ReadAhead | None = None) -> Iterator[np.ndarray]:
        """The dequantized values in C order, as 1-D float32 arrays of at most `max(chunk_elems, one row)`."""
        size = max(chunk_elems, self.n_cols, 1)
        for block in self._blocks(0, self.n_rows, chunk_elems, ahead):  # bounded: the values read, once each
            flat = block.reshape(-1)
            for start in range(0, flat.size, size):
                yield flat[start : start + size]

    def iter_codes(self, chunk_elems: int, ahead: ReadAhead | None = None) -> Iterator[np.ndarray]:
        """The stored codes in C order of the logical tensor, as 1-D arrays (TensorDataError when the scheme
        has none per weight)."""
        for block in self._blocks(0, self.n_rows, chunk_elems, ahead, codes=True):
            yield block.reshape(-1)

    def logical_region(self, index: tuple[int | slice, ...], ahead: ReadAhead | None = None) -> np.ndarray:
        """`tensor[index]`, dequantizing only the rows of the first dimension the region spans."""
        import numpy as np

        shape = self.shape
        if len(index) > len(shape):
            raise IndexError(f"{len(index)} indices for {len(shape)} dimensions")
        if len(shape) < 2:
            return self.logical_values(ahead)[index]
        first = index[0] if index else slice(None)
        if isinstance(first, slice):
            picked = range(*first.indices(shape[0]))
            if len(picked) == 0:
                return np.empty((0, *shape[1:]), np.float32)[(slice(None),) + tuple(index[1:])]
            lo, hi = min(picked[0], picked[-1]), max(picked[0], picked[-1]) + 1
            # From the first picked row by the step: within [lo, hi) it visits exactly the picked rows.
            local: int | slice = slice(picked[0] - lo, None, picked.step)
        else:
            i = int(first) + (shape[0] if int(first) < 0 else 0)
            if not 0 <= i < shape[0]:
                raise IndexError(f"index {first} is out of range for dimension 0 of size {shape[0]}")
            lo, hi, local = i, i + 1, 0
        inner = math.prod(shape[1:-1])
        parts = list(self._blocks(lo * inner, hi * inner, 1 << 22, ahead))
        block = (parts[0] if len(parts) == 1 else np.concatenate(parts)).reshape((hi - lo, *shape[1:]))
        return block[(local,) + tuple(index[1:])]


class _Codes:
    """A decoder's codes as the rows of a tensor (float32), for the figures of the codes."""

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        codes = self.decoder.codes(r0, r1, ahead)
        if codes is None:
            raise TensorDataError("cannot show codes: this weight has no code per weight")
        return np.asarray(codes).astype(np.float32)

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray | None:
        return self.decoder.codes(r0, r1, ahead)


def codes_view(info: TensorInfo) -> TensorInfo | None:
    """The codes of a quantized weight's logical tensor as a tensor (see `QuantSource.codes_view`); None for
    any other tensor or one whose values cannot be computed."""
    source = info.storage.source if info.storage is not None else None
    if info.quant is None or info.broken or not isinstance(source, QuantSource):
        return None
    return source.codes_view()

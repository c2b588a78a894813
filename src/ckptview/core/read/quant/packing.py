"""Integer codes packed into 32-bit words, unpacked with NumPy shifts (no per-element Python).

GPTQ packs `32 // bits` codes into each int32 along its input dimension, the first code in the lowest bits;
AWQ packs along the output dimension in the order 0, 2, 4, 6, 1, 3, 5, 7 (its GEMM kernel's); MLX packs along
the last dimension, lowest bits first, and lets 3- and 6-bit codes straddle two words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def unpack(words: np.ndarray, bits: int, axis: int, order: Sequence[int] | None = None) -> np.ndarray:
    """The codes of `words` (int32 or uint32), `32 // bits` per word, spread along `axis` (uint8 for bits <= 8).

    Code k of a word sits at bits [bits*k, bits*(k+1)); `order[k]` says where code k goes among the word's
    codes (AWQ), by default in place."""
    import numpy as np

    per = 32 // bits
    raw = np.ascontiguousarray(words).view(np.uint32)
    raw = np.moveaxis(raw, axis, -1)
    shifts = (np.arange(per, dtype=np.uint32) * bits)
    codes = ((raw[..., None] >> shifts) & np.uint32((1 << bits) - 1)).astype(np.uint8)  # (..., words, per)
    if order is not None:
        placed = np.empty_like(codes)
        placed[..., list(order)] = codes
        codes = placed
    codes = codes.reshape(*raw.shape[:-1], raw.shape[-1] * per)
    spread: np.ndarray = np.moveaxis(codes, -1, axis)
    return spread


def unpack_stream(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """`count` codes of `bits` bits laid end to end in the little-endian bit stream of each row of uint32
    `words` (MLX's layout, where a 3- or 6-bit code may straddle two words): uint8 (rows, count)."""
    import numpy as np

    raw = np.ascontiguousarray(words).view(np.uint32)
    rows = raw.reshape(-1, raw.shape[-1])
    as_bytes = rows.astype("<u4").view(np.uint8)  # the row's bit stream, byte by byte
    bit_index = np.arange(count, dtype=np.int64) * bits
    byte = bit_index // 8
    shift = (bit_index % 8).astype(np.uint32)
    padded = np.concatenate([as_bytes, np.zeros((rows.shape[0], 3), np.uint8)], axis=1).astype(np.uint32)
    window = padded[:, byte] | (padded[:, byte + 1] << 8) | (padded[:, byte + 2] << 16)
    codes: np.ndarray = ((window >> shift) & np.uint32((1 << bits) - 1)).astype(np.uint8)
    return codes

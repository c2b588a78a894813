"""FP4 (E2M1) codes, two per byte, and the E8M0 and FP8 scales that go with them (MXFP4, NVFP4).

The sixteen values of an E2M1 code, the low nibble first in each byte (OCP MX spec; gpt-oss, NVIDIA's
ModelOpt and compressed-tensors pack so), as transformers' `FP4_VALUES` lists them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def nibbles(packed: np.ndarray) -> np.ndarray:
    """The 4-bit codes of uint8 bytes, low nibble first: shape (..., 2 * last)."""
    import numpy as np

    raw = np.ascontiguousarray(packed).view(np.uint8)
    out = np.empty((*raw.shape[:-1], raw.shape[-1] * 2), dtype=np.uint8)
    out[..., 0::2] = raw & 0x0F
    out[..., 1::2] = raw >> 4
    return out


def values(codes: np.ndarray) -> np.ndarray:
    """The E2M1 values of 4-bit codes, as float32."""
    import numpy as np

    table = np.array(E2M1, dtype=np.float32)
    found: np.ndarray = table[codes]
    return found

"""GGML's tensor types, the ones a GGUF file stores: their sizes, and the dequantization of the block formats.

`TYPES` holds each type's name, block size (weights per block) and block bytes as the `gguf` package's
`GGML_QUANT_SIZES` and `GGMLQuantizationType` give them (a test holds the table equal to them). It is data
here, not imported, because opening a GGUF file must not import numpy or the `gguf` package (a listing of a
7B file takes milliseconds; importing them takes a third of a second): only reading values does.

The block formats (Q4_0 ... Q8_0, the K-quants, the IQ and TQ types, MXFP4, NVFP4) are dequantized by the
`gguf` package itself, the reference: its `dequantize_blocks` of each type's class (what
`gguf.quants.dequantize` runs, without its regrouping copy) over the blocks of a few rows read through the
byte layer. Equal to `gguf.quants.dequantize` of the same bytes bit for bit
(tests/core/read/quant/test_ggml.py). Q8_K (llama.cpp's intermediate for dot products, which the package
does not dequantize) is hand-written: one float32 scale and 256 int8 codes a block, `d * q` as llama.cpp's
`dequantize_row_q8_K`. A type the package cannot dequantize (Q8_1, Q1_0) or does not know is listed with
its raw blocks and says so in one line.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, NamedTuple

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import TensorDataError
from ckptview.core.read.quant import stored

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

__all__ = ["FILE_TYPES", "PLAIN", "TYPES", "GgmlDecoder", "GgmlType", "codes", "dequantize"]

SCHEME = "gguf"


class GgmlType(NamedTuple):
    """One ggml tensor type: its name, the weights a block holds and the bytes a block takes."""

    name: str
    block_size: int
    type_size: int

    @property
    def bits(self) -> float | None:
        """Bits of one code, where the name says (Q4_K: 4, IQ2_XS: 2, MXFP4: 4); None for the ternary TQ types."""
        found = re.match(r"I?Q(\d)_|[A-Z]+FP(\d)$", self.name)
        if found is None:
            return None
        return int(found.group(1) or found.group(2))


# ggml type id -> its facts (gguf's GGMLQuantizationType and GGML_QUANT_SIZES).
TYPES: dict[int, GgmlType] = {
    0: GgmlType("F32", 1, 4), 1: GgmlType("F16", 1, 2), 2: GgmlType("Q4_0", 32, 18), 3: GgmlType("Q4_1", 32, 20),
    6: GgmlType("Q5_0", 32, 22), 7: GgmlType("Q5_1", 32, 24), 8: GgmlType("Q8_0", 32, 34),
    9: GgmlType("Q8_1", 32, 40), 10: GgmlType("Q2_K", 256, 84), 11: GgmlType("Q3_K", 256, 110),
    12: GgmlType("Q4_K", 256, 144), 13: GgmlType("Q5_K", 256, 176), 14: GgmlType("Q6_K", 256, 210),
    15: GgmlType("Q8_K", 256, 292), 16: GgmlType("IQ2_XXS", 256, 66), 17: GgmlType("IQ2_XS", 256, 74),
    18: GgmlType("IQ3_XXS", 256, 98), 19: GgmlType("IQ1_S", 256, 50), 20: GgmlType("IQ4_NL", 32, 18),
    21: GgmlType("IQ3_S", 256, 110), 22: GgmlType("IQ2_S", 256, 82), 23: GgmlType("IQ4_XS", 256, 136),
    24: GgmlType("I8", 1, 1), 25: GgmlType("I16", 1, 2), 26: GgmlType("I32", 1, 4), 27: GgmlType("I64", 1, 8),
    28: GgmlType("F64", 1, 8), 29: GgmlType("IQ1_M", 256, 56), 30: GgmlType("BF16", 1, 2),
    34: GgmlType("TQ1_0", 256, 54), 35: GgmlType("TQ2_0", 256, 66), 39: GgmlType("MXFP4", 32, 17),
    40: GgmlType("NVFP4", 64, 36), 41: GgmlType("Q1_0", 128, 18),
}

# Types stored as plain arrays: the torch dtype that holds them (read as any tensor, no dequantization).
PLAIN: dict[str, str] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I8": "int8",
                         "I16": "int16", "I32": "int32", "I64": "int64"}

# Block types the pinned `gguf` package dequantizes (its quants module has a class of that name), plus Q8_K
# (hand-written, see the module docstring). A test holds this equal to the installed package.
DECODED = frozenset({"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
                     "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "IQ1_M",
                     "TQ1_0", "TQ2_0", "MXFP4", "NVFP4"})
HAND_WRITTEN = frozenset({"Q8_K"})

# `general.file_type` (llama.cpp's llama_ftype, gguf's LlamaFileType) -> what people call it.
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 1024: "GUESSED",
}


# The codes of a block type, as its own dequantization gives them: each block's scales set to 1 and its minimums
# to 0 (byte offset in the block -> bytes), the result offset by `shift` into 0 .. 2**bits - 1 (Q4_0 stores
# q - 8, Q6_K q - 32, Q8_0 a signed byte). The package unpacks the bits; only where the scales lie is said here.
_ONE, _ZERO = b"\x00\x3c", b"\x00\x00"  # float16 1.0 and 0.0, little-endian
_K_SCALES = bytes([1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1])  # Q4_K/Q5_K: eight 6-bit scales of 1, minimums of 0
UNIT_SCALES: dict[str, tuple[tuple[tuple[int, bytes], ...], int]] = {
    "Q4_0": (((0, _ONE),), 8), "Q4_1": (((0, _ONE), (2, _ZERO)), 0), "Q5_0": (((0, _ONE),), 16),
    "Q5_1": (((0, _ONE), (2, _ZERO)), 0), "Q8_0": (((0, _ONE),), 128),
    "Q2_K": (((0, bytes([1] * 16)), (80, _ONE), (82, _ZERO)), 0),
    "Q4_K": (((0, _ONE), (2, _ZERO), (4, _K_SCALES)), 0), "Q5_K": (((0, _ONE), (2, _ZERO), (4, _K_SCALES)), 0),
    "Q6_K": (((192, bytes([1] * 16)), (208, _ONE)), 32), "Q8_K": (((0, b"\x00\x00\x80\x3f"),), 128),
}


def codes(blocks: np.ndarray, kind: GgmlType) -> np.ndarray | None:
    """The stored codes of uint8 rows of blocks of `kind` (integers 0 .. 2**bits - 1, one per weight), or None
    for a type without one code per weight (the IQ types' lattice indices, TQ, MXFP4, NVFP4)."""
    import numpy as np

    unit = UNIT_SCALES.get(kind.name)
    if unit is None:
        return None
    patches, shift = unit
    flat = np.array(blocks, dtype=np.uint8).reshape(-1, kind.type_size)
    for offset, value in patches:
        flat[:, offset : offset + len(value)] = np.frombuffer(value, dtype=np.uint8)
    values = dequantize(flat.reshape(blocks.shape), kind)
    out: np.ndarray = (np.rint(values) + shift).astype(np.int32)
    return out


def dequantize(blocks: np.ndarray, kind: GgmlType) -> np.ndarray:
    """uint8 rows of whole blocks of `kind` as float32 rows of weights (the gguf package's own arithmetic)."""
    import numpy as np

    n_rows = blocks.shape[0]
    flat = np.ascontiguousarray(blocks).reshape(-1, kind.type_size)
    if kind.name == "Q8_K":
        d = flat[:, :4].copy().view(np.float32)
        q = flat[:, 4 : 4 + kind.block_size].view(np.int8).astype(np.float32)
        with np.errstate(all="ignore"):
            out = d * q
    else:
        try:
            import gguf.quants
        except ImportError:
            raise TensorDataError(f"dequantizing ggml {kind.name} blocks needs the gguf package, which is not "
                                  "installed") from None
        found = getattr(gguf.quants, kind.name, None)
        if found is None or not hasattr(found, "dequantize_blocks"):
            raise TensorDataError(f"the installed gguf package does not dequantize ggml {kind.name}")
        found.init_grid()  # the IQ types' lattice, built once
        with np.errstate(all="ignore"):  # a NaN or infinite scale is a value to show, not a warning
            out = found.dequantize_blocks(flat)
    return np.asarray(out, dtype=np.float32).reshape(n_rows, -1)


class GgmlDecoder:
    """Rows of a GGUF tensor of a block type, dequantized from its blocks (`blocks`: a uint8 matrix, one row of
    blocks per row of weights)."""

    def __init__(self, blocks: TensorInfo, kind: GgmlType) -> None:
        self.blocks = blocks
        self.kind = kind

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        return dequantize(stored.rows(self.blocks, r0, r1, ahead), self.kind)

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray | None:
        if self.kind.name not in UNIT_SCALES:
            return None
        return codes(stored.rows(self.blocks, r0, r1, ahead), self.kind)


def block_bytes(kind: GgmlType, shape: tuple[int, ...]) -> int:
    """Bytes a tensor of `shape` (torch's order: the last dimension the row) takes in blocks of `kind`."""
    return math.prod(shape) // kind.block_size * kind.type_size

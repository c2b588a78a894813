"""FP8 weights with their scales: per-tensor, per-channel (per output row) or per block (DeepSeek-V3's 128x128
`weight_scale_inv`), the scale stored as `<name>_scale_inv` or `<name>_scale`; e4m3 or e5m2 codes.

Reference: transformers' `Fp8Dequantize._dequantize_one` (integrations/finegrained_fp8.py): the codes and the
scales in float32, multiplied, the product rounded to the scale's dtype when it is a 16-bit float (bf16 when
the scales are E8M0 exponents), float32 kept when the scales are float32. The block shape is the config's
`weight_block_size`, else the one the scale grid divides the weight into, else 128x128 with the last block of
a row or column partial (DeepSeek's own `weight_dequant` reads it so); a scale grid that fits none of them is a
problem, said in one line. Equal to the reference bit for bit (tests/core/read/quant/test_fp8.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptview.core import dtypes
from ckptview.core.checkpoint import TensorInfo
from ckptview.core.read.quant import stored
from ckptview.core.read.quant.config import QuantConfig
from ckptview.core.read.quant.protocol import Anchor, Found, Recognised

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

NAME = "fp8"
METHODS: tuple[str, ...] = ("fp8", "fbgemm_fp8", "finegrained_fp8", "compressed-tensors")  # its float-quantized
SCALE_REQUIRED = ("fp8", "fbgemm_fp8", "finegrained_fp8")  # configs under which an fp8 weight without a scale is wrong
FP8 = frozenset({"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"})
ANCHORS: tuple[Anchor, ...] = (
    Anchor(suffix="", role="codes", parts={"scale_inv": "_scale_inv", "scale": "_scale"}, logical="", dtypes=FP8),
)
DEFAULT_BLOCK = 128
_FORMAT = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "float8_e4m3fnuz": "e4m3fnuz",
           "float8_e5m2fnuz": "e5m2fnuz"}


def recognise(found: Found, config: QuantConfig) -> Recognised | None:
    """FP8 codes and the scale beside them (see the module docstring)."""
    codes = found.info("codes")
    assert codes is not None  # the anchor
    role = "scale_inv" if found.info("scale_inv") is not None else "scale"  # DeepSeek's name first
    scale = found.info(role)
    shape = tuple(codes.shape)
    fmt = _FORMAT[codes.dtype]
    if scale is None:
        if config.method not in SCALE_REQUIRED or config.skipped(found.logical_name) or len(shape) < 2:
            return None  # an fp8 tensor of its own, not a quantized weight
        missing = f"fp8 weight '{found.logical_name}' has no scale ('{found.name('scale_inv')}' is missing)"
        return Recognised(shape, found.quantization(NAME, f"fp8 {fmt}", shape, problem=missing, bits=8), None)
    if not shape:
        return None
    dtype = config.model_dtype
    out_dtype = scale.dtype if dtypes.is_floating(scale.dtype) and dtypes.itemsize(scale.dtype) >= 2 else "bfloat16"
    kind, block, problem = _granularity(shape, tuple(scale.shape), config, found.name(role))
    if kind == "block" and block is not None:
        label = f"fp8 {fmt}, block {block[0]}x{block[1]}"
    else:
        label = f"fp8 {fmt}, per-{kind}"
    quant = found.quantization(NAME, label, shape, problem=problem, bits=8, dtype=dtype, format=fmt,
                               granularity=kind, block=list(block) if block else None,
                               scale=found.name(role).rsplit(".", 1)[-1])
    if problem is not None:
        return Recognised(shape, quant, None)
    return Recognised(shape, quant, Fp8Decoder(codes, scale, kind, block, out_dtype))


def _granularity(shape: tuple[int, ...], scale_shape: tuple[int, ...], config: QuantConfig,
                 scale_name: str) -> tuple[str, tuple[int, int] | None, str | None]:
    """("tensor" | "channel" | "block", the block, a problem or None) of a scale of `scale_shape`."""
    n_scale = 1
    for size in scale_shape:
        n_scale *= size
    if n_scale == 1:
        return "tensor", None, None
    if len(shape) >= 2 and scale_shape in (shape[:-1] + (1,), shape[:-1]):
        return "channel", None, None
    shown = "x".join(map(str, scale_shape)) or "a scalar"
    wshown = "x".join(map(str, shape))
    if len(shape) < 2 or len(scale_shape) != len(shape) or scale_shape[:-2] != shape[:-2]:
        return "block", None, f"scale '{scale_name}' is {shown}, which fits no tensor, row or block scale of {wshown}"
    rows, cols = shape[-2:]
    s_rows, s_cols = scale_shape[-2:]
    wanted = config.get("weight_block_size")
    if isinstance(wanted, list) and len(wanted) == 2 and all(type(v) is int and v > 0 for v in wanted):
        block = (wanted[0], wanted[1])
    elif s_rows and s_cols and rows % s_rows == 0 and cols % s_cols == 0:
        block = (rows // s_rows, cols // s_cols)
    else:
        block = (DEFAULT_BLOCK, DEFAULT_BLOCK)
    need = (stored.ceil_div(rows, block[0]), stored.ceil_div(cols, block[1]))
    if (s_rows, s_cols) != need:
        return "block", block, (f"scale '{scale_name}' is {shown}; blocks of {block[0]}x{block[1]} over {wshown} "
                                f"need {need[0]}x{need[1]}")
    return "block", block, None


class Fp8Decoder:
    """Rows of an FP8 weight times their scales (float32), rounded as the reference rounds."""

    def __init__(self, codes: TensorInfo, scale: TensorInfo, kind: str, block: tuple[int, int] | None,
                 out_dtype: str) -> None:
        self.stored_codes = stored.matrix(codes)
        self.scale = scale
        self.kind = kind
        self.block = block
        self.out_dtype = out_dtype
        self.rows_per_matrix = codes.shape[-2] if len(codes.shape) >= 2 else 1
        self._scales: np.ndarray | None = None

    def _scale_values(self, ahead: ReadAhead | None) -> np.ndarray:
        if self._scales is None:
            values = stored.as_float32(stored.whole(self.scale, ahead))
            if self.kind == "block":
                values = values.reshape(-1, values.shape[-1])  # (matrices x block rows, block columns)
            self._scales = values
        return self._scales

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        return stored.as_float32(stored.rows(self.stored_codes, r0, r1, ahead))

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        q = self.codes(r0, r1, ahead)
        scales = self._scale_values(ahead)
        if self.kind == "tensor":
            out = q * scales.reshape(())
        elif self.kind == "channel":
            out = q * scales.reshape(-1)[r0:r1, None]
        else:
            assert self.block is not None
            block_rows, block_cols = self.block
            r = np.arange(r0, r1)
            per = stored.ceil_div(self.rows_per_matrix, block_rows)
            s_row = (r // self.rows_per_matrix) * per + (r % self.rows_per_matrix) // block_rows
            out = q * np.repeat(scales[s_row], block_cols, axis=1)[:, : q.shape[1]]
        return stored.round_to(out.astype(np.float32, copy=False), self.out_dtype)

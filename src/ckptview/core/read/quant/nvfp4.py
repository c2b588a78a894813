"""NVFP4 as NVIDIA's ModelOpt exports it (`quant_method: "modelopt"`, `quant_algo: "NVFP4"`, what vLLM and
TensorRT-LLM load): `W.weight` two E2M1 codes a byte (uint8, or safetensors' `F4` packed pairs), the low nibble
first; `W.weight_scale` FP8 e4m3 per block of 16 inputs; `W.weight_scale_2` the float32 global scale.

Reference: ModelOpt's published `NVFP4QTensor.dequantize`: `fp4 * (weight_scale.float() * weight_scale_2)` in
float32, rounded to the model's dtype (bf16 by default). ModelOpt and its kernels need CUDA and do not install
here: the tests hold ckptview to that formula in float32 on codes packed as ModelOpt packs them, bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptview.core import dtypes
from ckptview.core.checkpoint import TensorInfo
from ckptview.core.read.quant import fp4, stored
from ckptview.core.read.quant.config import QuantConfig
from ckptview.core.read.quant.protocol import Anchor, Found, Recognised

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

NAME = "nvfp4"
METHODS: tuple[str, ...] = ("modelopt", "nvfp4")
ANCHORS: tuple[Anchor, ...] = (
    Anchor(suffix=".weight", role="codes", logical=".weight", dtypes=frozenset({"uint8", "float4_e2m1fn_x2"}),
           parts={"scale": ".weight_scale", "scale_2": ".weight_scale_2"}),
)
GROUP = 16
FP8 = frozenset({"float8_e4m3fn", "float8_e4m3fnuz"})


def recognise(found: Found, config: QuantConfig) -> Recognised | None:
    """ModelOpt's NVFP4 parts (see the module docstring)."""
    codes, scale, scale_2 = found.info("codes"), found.info("scale"), found.info("scale_2")
    assert codes is not None
    if config.method not in (None, *METHODS) or scale is None or scale.dtype not in FP8 or len(codes.shape) != 2:
        return None
    rows, half = codes.shape
    shape = (rows, half * 2)
    model = config.model_dtype
    out_dtype = model if model is not None and dtypes.is_floating(model) else "bfloat16"
    need = (rows, stored.ceil_div(shape[1], GROUP))
    problem = None
    if tuple(scale.shape) != need:
        problem = (f"scale '{found.name('scale')}' is {'x'.join(map(str, scale.shape))}; {rows}x{shape[1]} in "
                   f"blocks of {GROUP} needs {need[0]}x{need[1]}")
    elif scale_2 is None or scale_2.numel != 1:
        problem = f"global scale '{found.name('scale_2')}' is missing or not one value"
    quant = found.quantization(NAME, "nvfp4 (e2m1, fp8 scale per 16, global scale)", shape, problem=problem, bits=4,
                               group_size=GROUP, dtype=model, format="modelopt")
    if problem is not None or scale_2 is None:
        return Recognised(shape, quant, None)
    return Recognised(shape, quant, ModeloptDecoder(codes, scale, scale_2, out_dtype))


class ModeloptDecoder:
    """Rows of a ModelOpt NVFP4 weight: E2M1 codes times their block's FP8 scale times the global scale."""

    def __init__(self, codes: TensorInfo, scale: TensorInfo, scale_2: TensorInfo, out_dtype: str) -> None:
        self.packed = stored.matrix(TensorInfo("uint8", tuple(codes.shape), tuple(codes.stride), codes.offset,
                                               codes.storage))
        self.scale, self.scale_2 = stored.matrix(scale), scale_2
        self.cols = codes.shape[1] * 2
        self.out_dtype = out_dtype
        self._global: np.ndarray | None = None

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        return fp4.nibbles(stored.rows(self.packed, r0, r1, ahead))

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        if self._global is None:
            self._global = stored.as_float32(stored.whole(self.scale_2, ahead)).reshape(())
        block = (stored.as_float32(stored.rows(self.scale, r0, r1, ahead)) * self._global).astype(np.float32)
        values = fp4.values(self.codes(r0, r1, ahead))
        out = values * np.repeat(block, GROUP, axis=1)[:, : self.cols]
        return stored.round_to(out.astype(np.float32, copy=False), self.out_dtype)

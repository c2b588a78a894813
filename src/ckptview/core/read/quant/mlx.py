"""MLX affine quantization (mlx-lm's `quantize`): `W.weight` uint32 (rows, cols * bits / 32), each row's codes
laid end to end in its little-endian bit stream (a 3- or 6-bit code may straddle two words), `W.scales` and
`W.biases` (rows, cols / group_size); bits 2, 3, 4, 6, 8 and groups of 32, 64 or 128, from config.json's
`quantization` (per-module overrides too).

Reference: MLX's documented dequantization `w = scale * q + bias` per group (mlx.core.dequantize). MLX does
not run on Linux x86, so the tests hold ckptview to that formula in float64 on codes packed as MLX documents:
ckptview computes it in float32 and rounds once to the scales' dtype, within one unit in the last place of
that dtype of the float64 value (equal for all but rare ties).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.read.quant import packing, stored
from ckptview.core.read.quant.config import QuantConfig
from ckptview.core.read.quant.protocol import Anchor, Found, Recognised
from ckptview.core.units import plural

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

NAME = "mlx"
METHODS: tuple[str, ...] = ("mlx",)
ANCHORS: tuple[Anchor, ...] = (
    Anchor(suffix=".weight", role="weight", logical=".weight", dtypes=frozenset({"uint32"}),
           parts={"scales": ".scales", "biases": ".biases"}),
)
BITS = (2, 3, 4, 5, 6, 8)
# Without a config: the first (bits, group size) the parts' shapes fit, mlx-lm's default first.
GUESSES = ((4, 64), (8, 64), (4, 32), (8, 32), (4, 128), (8, 128), (2, 64), (3, 64), (6, 64), (2, 32), (3, 32),
           (6, 32), (5, 64), (5, 32))


def _settings(config: QuantConfig, stem: str) -> tuple[int | None, int | None]:
    """(bits, group size) the config gives the module `stem` (its own entry, else the model's)."""
    own: Any = config.get(stem)
    source = own if isinstance(own, dict) else config.raw
    bits, group = source.get("bits"), source.get("group_size")
    return (bits if type(bits) is int else None), (group if type(group) is int else None)


def recognise(found: Found, config: QuantConfig) -> Recognised | None:
    """MLX's packed weight and its scales and biases (see the module docstring)."""
    weight, scales, biases = found.info("weight"), found.info("scales"), found.info("biases")
    assert weight is not None
    if config.method not in (None, *METHODS) or scales is None or len(weight.shape) != 2:
        return None
    rows, words = weight.shape
    bits, group = _settings(config, found.stem)
    s_shape = tuple(scales.shape)
    groups = s_shape[1] if len(s_shape) == 2 else 0
    if bits is None or group is None:
        fits = [(b, g) for b, g in GUESSES if words * 32 % b == 0 and words * 32 // b == groups * g]
        if not fits:
            if config.method != NAME:
                return None
            fits = [(4, 64)]
        bits, group = fits[0]
    cols = words * 32 // bits if bits in BITS else 0
    shape = (rows, cols)
    label = f"int{bits} MLX affine, group {group}"
    problem = None
    if bits not in BITS or words * 32 % bits:
        problem = f"{bits}-bit MLX codes do not fill the {words} words of a row of '{found.name('weight')}'"
    elif group <= 0 or cols % group:
        problem = f"group size {group} does not divide the {plural(cols, 'column')} of '{found.logical_name}'"
    elif s_shape != (rows, cols // group):
        problem = (f"scales '{found.name('scales')}' are {'x'.join(map(str, s_shape))}; {rows}x{cols} in groups of "
                   f"{group} need {rows}x{cols // group}")
    elif biases is None or tuple(biases.shape) != s_shape:
        problem = f"biases '{found.name('biases')}' are missing or not shaped as the scales"
    quant = found.quantization(NAME, label, shape, problem=problem, bits=bits, group_size=group,
                               dtype=config.model_dtype, mode="affine")
    if problem is not None or biases is None:
        return Recognised(shape, quant, None)
    return Recognised(shape, quant, MlxDecoder(weight, scales, biases, bits, group, cols))


class MlxDecoder:
    """Rows of an MLX weight: each row's bit stream unpacked, `scale * q + bias` per group."""

    def __init__(self, weight: TensorInfo, scales: TensorInfo, biases: TensorInfo, bits: int, group: int,
                 cols: int) -> None:
        self.weight = stored.matrix(weight)
        self.scales, self.biases = stored.matrix(scales), stored.matrix(biases)
        self.bits, self.group, self.cols = bits, group, cols
        self.out_dtype = scales.dtype

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        return packing.unpack_stream(stored.rows(self.weight, r0, r1, ahead), self.bits, self.cols)

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        q = self.codes(r0, r1, ahead).astype(np.float32)
        scales = stored.as_float32(stored.rows(self.scales, r0, r1, ahead))
        biases = stored.as_float32(stored.rows(self.biases, r0, r1, ahead))
        g = np.arange(self.cols) // self.group
        out = scales[:, g] * q + biases[:, g]
        return stored.round_to(out.astype(np.float32, copy=False), self.out_dtype)

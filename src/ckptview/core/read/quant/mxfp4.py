"""MXFP4 (gpt-oss's experts): `<name>_blocks` uint8 (experts, rows, groups, 16), two E2M1 codes per byte (32 per
group), and `<name>_scales` uint8 (experts, rows, groups), one E8M0 exponent per group of 32 (2 ** (s - 127)).

Reference: transformers' `convert_moe_packed_tensors` (integrations/mxfp4.py), what it runs to load gpt-oss
dequantized: codes looked up, `ldexp` by the exponent (computed in float32, rounded to the model's dtype,
bf16 by default), and the result transposed to (experts, groups * 32, rows): the experts' `gate_up_proj`
(experts, hidden, 2 * intermediate) and `down_proj` (experts, intermediate, hidden) as the model holds them.
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

NAME = "mxfp4"
METHODS: tuple[str, ...] = ("mxfp4",)
ANCHORS: tuple[Anchor, ...] = (
    Anchor(suffix="_blocks", role="blocks", logical="", dtypes=frozenset({"uint8"}), parts={"scales": "_scales"}),
)
GROUP = 32


def recognise(found: Found, config: QuantConfig) -> Recognised | None:
    """MXFP4 blocks and their scales (see the module docstring)."""
    blocks = found.info("blocks")
    scales = found.info("scales")
    assert blocks is not None
    if config.method not in (None, *METHODS):
        return None
    if scales is None:
        if config.method != NAME:
            return None
        shape = tuple(blocks.shape)
        missing = f"MXFP4 weight '{found.logical_name}' has no scales ('{found.name('scales')}' is missing)"
        return Recognised(shape, found.quantization(NAME, "mxfp4", shape, problem=missing, bits=4), None)
    b_shape = tuple(blocks.shape)
    if len(b_shape) != 4 or b_shape[-1] != GROUP // 2:
        if config.method != NAME:
            return None
        return _refused(found, b_shape, f"MXFP4 blocks '{found.name('blocks')}' are "
                                        f"{'x'.join(map(str, b_shape))}; experts x rows x groups x 16 are decoded")
    experts, rows, groups, _ = b_shape
    shape = (experts, groups * GROUP, rows)
    model = config.model_dtype
    out_dtype = model if model is not None and dtypes.is_floating(model) else "bfloat16"
    problem: str | None = None
    if tuple(scales.shape) != b_shape[:3] or scales.dtype not in ("uint8", "float8_e8m0fnu"):
        problem = (f"scales '{found.name('scales')}' are {'x'.join(map(str, scales.shape))} {scales.dtype}; "
                   f"blocks of {'x'.join(map(str, b_shape))} need {'x'.join(map(str, b_shape[:3]))} uint8")
    quant = found.quantization(NAME, "mxfp4 (e2m1, E8M0 scale per 32)", shape, problem=problem, bits=4,
                               group_size=GROUP, dtype=model, format="e2m1", scale_format="e8m0", transposed=True)
    return Recognised(shape, quant, None if problem else Mxfp4Decoder(blocks, scales, out_dtype))


def _refused(found: Found, shape: tuple[int, ...], problem: str) -> Recognised:
    return Recognised(shape, found.quantization(NAME, "mxfp4", shape, problem=problem, bits=4, group_size=GROUP), None)


class Mxfp4Decoder:
    """Rows (expert, input) of the transposed weight: a band of the blocks' bytes, looked up and scaled."""

    def __init__(self, blocks: TensorInfo, scales: TensorInfo, out_dtype: str) -> None:
        self.experts, self.out_rows, self.groups, _ = blocks.shape
        self.inputs = self.groups * GROUP
        self.bytes = stored.matrix(blocks, self.groups * GROUP // 2)  # (experts x rows, inputs / 2)
        self.scales_info = scales
        self.out_dtype = out_dtype
        self._scales: np.ndarray | None = None

    def _exponents(self, ahead: ReadAhead | None) -> np.ndarray:
        import numpy as np

        if self._scales is None:  # (experts x rows, groups): a 32nd of the codes' bytes
            raw = np.ascontiguousarray(stored.whole(self.scales_info, ahead)).view(np.uint8)
            self._scales = raw.reshape(-1, self.groups).astype(np.int32) - 127
        return self._scales

    def _expert_band(self, e: int, i0: int, i1: int, ahead: ReadAhead | None,
                     scaled: bool) -> np.ndarray:
        """Inputs i0..i1 of expert e, every output row: (i1 - i0, rows) values (or codes)."""
        import numpy as np

        c0, c1 = i0 // 2, stored.ceil_div(i1, 2)
        band = stored.columns(self.bytes, c0, c1, ahead, e * self.out_rows, (e + 1) * self.out_rows)
        codes = fp4.nibbles(band)[:, i0 - 2 * c0 : i1 - 2 * c0]  # (rows, inputs)
        if not scaled:
            transposed: np.ndarray = codes.T
            return transposed
        exps = self._exponents(ahead)[e * self.out_rows : (e + 1) * self.out_rows]  # (rows, groups)
        groups = np.arange(i0, i1) // GROUP
        values: np.ndarray = np.ldexp(fp4.values(codes), exps[:, groups]).astype(np.float32).T
        return values

    def _band(self, r0: int, r1: int, ahead: ReadAhead | None, scaled: bool) -> np.ndarray:
        import numpy as np

        pieces = []
        r = r0
        while r < r1:  # bounded: one step per expert the rows asked for span
            e, i0 = divmod(r, self.inputs)
            i1 = min(self.inputs, i0 + (r1 - r))
            pieces.append(self._expert_band(e, i0, i1, ahead, scaled))
            r += i1 - i0
        band: np.ndarray = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        return band

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        return self._band(r0, r1, ahead, scaled=False)

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        return stored.round_to(self._band(r0, r1, ahead, scaled=True), self.out_dtype)

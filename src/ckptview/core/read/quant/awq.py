"""AWQ (AutoAWQ's GEMM format, what the Hub holds): `qweight` int32 (in, out / 8) with eight 4-bit codes per
word along the output dimension in the order 0, 2, 4, 6, 1, 3, 5, 7, `qzeros` int32 (groups, out / 8) packed the
same way, `scales` (groups, out); group g covers inputs g * group_size ..

Reference: AutoAWQ's `dequantize_gemm` (awq/utils/packing_utils.py): codes and zero points unpacked and put
back in order, `(q - z) * s` per group, computed in the scales' dtype (fp16): exact in float32, rounded to it.
The logical weight is its transpose, (out, in), as `nn.Linear` holds it. The GEMV layout (`version: "gemv"`)
is recognised and said to be not decoded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.read.quant import packing, stored
from ckptview.core.read.quant.config import QuantConfig
from ckptview.core.read.quant.protocol import Anchor, Found, Recognised
from ckptview.core.units import plural

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

NAME = "awq"
METHODS: tuple[str, ...] = ("awq",)
ANCHORS: tuple[Anchor, ...] = (
    Anchor(suffix=".qweight", role="qweight", logical=".weight", dtypes=frozenset({"int32"}),
           parts={"qzeros": ".qzeros", "scales": ".scales"}),
)


def recognise(found: Found, config: QuantConfig) -> Recognised | None:
    """AWQ's parts (see the module docstring)."""
    qweight = found.info("qweight")
    scales = found.info("scales")
    zeros = found.info("qzeros")
    assert qweight is not None
    if config.method not in (None, *METHODS) or scales is None or len(qweight.shape) != 2:
        return None
    bits = config.int_value("bits") or config.int_value("w_bit") or 4
    per = 32 // bits if bits in (4,) else 0
    if config.method is None and not (len(scales.shape) == 2 and per and scales.shape[1] == qweight.shape[1] * per):
        return None
    in_features, packed = qweight.shape
    out_features = packed * (per or 8)
    shape = (out_features, in_features)
    group_size = _group_size(config, in_features, scales)
    version = str(config.get("version", "gemm")).lower()
    label = f"int{bits} AWQ, group {group_size}"
    problem = _problem(found, bits, version, shape, group_size, scales, zeros)
    quant = found.quantization(NAME, label, shape, problem=problem, bits=bits, group_size=group_size,
                               dtype=config.model_dtype, version=version, zero_point=config.get("zero_point"))
    decoder = None if problem else AwqDecoder(qweight, zeros, scales, bits, group_size)
    return Recognised(shape, quant, decoder)


def _problem(found: Found, bits: int, version: str, shape: tuple[int, int], group_size: int,
             scales: TensorInfo, zeros: TensorInfo | None) -> str | None:
    out_features, in_features = shape
    name = found.logical_name
    if bits != 4 or version != "gemm":
        return f"AWQ {version} {bits}-bit packing is recognised but not decoded ('{name}')"
    if in_features % group_size:
        return f"group size {group_size} does not divide the {in_features} input features of '{name}'"
    groups = in_features // group_size
    if tuple(scales.shape) != (groups, out_features):
        return (f"scales '{found.name('scales')}' are {'x'.join(map(str, scales.shape))}; {plural(groups, 'group')} of "
                f"{out_features} outputs need {groups}x{out_features}")
    if zeros is None:
        return f"zero points '{found.name('qzeros')}' are missing"
    if zeros.dtype != "int32" or tuple(zeros.shape) != (groups, out_features // 8):
        return (f"zero points '{found.name('qzeros')}' are {'x'.join(map(str, zeros.shape))} {zeros.dtype}; "
                f"need {groups}x{out_features // 8} int32")
    return None


def _group_size(config: QuantConfig, in_features: int, scales: TensorInfo) -> int:
    """The config's group size (-1: one group), else the one the scales' rows divide the inputs into."""
    group = config.get("group_size", config.get("q_group_size"))
    if type(group) is int:
        return group if group > 0 else in_features
    groups = scales.shape[0] if len(scales.shape) == 2 else 0
    return in_features // groups if groups and in_features % groups == 0 else 128


class AwqDecoder:
    """Rows (output channels) of an AWQ weight: the words holding them, unpacked and reordered, per group."""

    def __init__(self, qweight: TensorInfo, qzeros: TensorInfo | None, scales: TensorInfo, bits: int,
                 group_size: int) -> None:
        self.qweight = stored.matrix(qweight)
        self.qzeros, self.scales = qzeros, scales
        self.bits, self.group_size = bits, group_size
        self.per = 32 // bits
        self.out_dtype = scales.dtype
        self._small: tuple[np.ndarray, np.ndarray] | None = None

    def _tables(self, ahead: ReadAhead | None) -> tuple[np.ndarray, np.ndarray]:
        """(zero points, scales), each (groups, out) float32, read once."""
        import numpy as np

        if self._small is None:
            assert self.qzeros is not None
            zeros = packing.unpack(stored.whole(self.qzeros, ahead), self.bits, 1, packing.AWQ_ORDER)
            self._small = (zeros.astype(np.float32), stored.as_float32(stored.whole(self.scales, ahead)))
        return self._small

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        w0, w1 = r0 // self.per, stored.ceil_div(r1, self.per)
        words = stored.columns(self.qweight, w0, w1, ahead)  # (in, words)
        unpacked = packing.unpack(words, self.bits, 1, packing.AWQ_ORDER)  # (in, outputs of those words)
        codes: np.ndarray = unpacked[:, r0 - w0 * self.per : r1 - w0 * self.per].T
        return codes

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        """Rows r0..r1: each code looked up in its (group, output)'s table of 16 values, rounded once per
        entry as the reference rounds (as GPTQ's decoder does)."""
        import numpy as np

        zeros, scales = self._tables(ahead)
        n = r1 - r0
        levels = 1 << self.bits
        codes = np.arange(levels, dtype=np.float32)
        table = (codes[None, None, :] - zeros[:, r0:r1, None]) * scales[:, r0:r1, None]  # (groups, rows, levels)
        flat = stored.round_to(np.ascontiguousarray(table, dtype=np.float32), self.out_dtype).reshape(-1)
        q = self.codes(r0, r1, ahead)  # (rows, in)
        index = q.astype(np.int64)
        index += (np.arange(n, dtype=np.int64) * levels)[:, None]
        index += ((np.arange(q.shape[1], dtype=np.int64) // self.group_size) * (n * levels))[None, :]
        out: np.ndarray = np.take(flat, index)
        return out

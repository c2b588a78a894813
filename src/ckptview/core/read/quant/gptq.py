"""GPTQ: `qweight` int32 (in / pack, out) with `32 // bits` codes per word along the input dimension, `qzeros`
int32 (groups, out / pack) packed along the output dimension, `scales` (groups, out), `g_idx` (in,) the group
of each input channel (permuted under act-order, `desc_act`).

Reference: AutoGPTQ's and gptqmodel's torch dequantization (`dequantize_weight`): codes and zero points
unpacked lowest bits first, the zero point + 1 in the v1 checkpoint format (what the Hub holds;
`checkpoint_format: "gptq_v2"` stores it as it is), `scales[g_idx] * (q - z[g_idx])` computed in the scales'
dtype (fp16): exact in float32, rounded to it. 2, 4 and 8 bits are packed `32 // bits` a word; 3 bits are
packed 32 codes in 3 words, a code straddling two words (AutoGPTQ's `pack`): the little-endian bit stream
of each column's words, as of each zero-point row's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import TensorDataError
from ckptview.core.read.quant import packing, stored
from ckptview.core.read.quant.config import QuantConfig
from ckptview.core.read.quant.protocol import Anchor, Found, Recognised
from ckptview.core.units import plural

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

NAME = "gptq"
METHODS: tuple[str, ...] = ("gptq",)
ANCHORS: tuple[Anchor, ...] = (
    Anchor(suffix=".qweight", role="qweight", logical=".weight", dtypes=frozenset({"int32"}),
           parts={"qzeros": ".qzeros", "scales": ".scales", "g_idx": ".g_idx"}),
)
DECODED_BITS = (2, 3, 4, 8)


def recognise(found: Found, config: QuantConfig) -> Recognised | None:
    """GPTQ's parts (see the module docstring); AWQ's (no g_idx, packed along the output) are left to it."""
    qweight = found.info("qweight")
    scales = found.info("scales")
    zeros = found.info("qzeros")
    assert qweight is not None
    if config.method not in (None, *METHODS) or scales is None or len(qweight.shape) != 2:
        return None
    if config.method is None and found.info("g_idx") is None and not _packed_along_input(qweight, scales):
        return None  # AWQ's layout, or another scheme's
    bits = config.int_value("bits") or 4
    packed_rows, out_features = qweight.shape
    in_features = packed_rows * 32 // bits if bits in DECODED_BITS else packed_rows * 8
    shape = (out_features, in_features)
    group_size = _group_size(config, in_features, scales)
    act_order = bool(config.get("desc_act")) or bool(config.get("act_order"))
    v2 = config.get("checkpoint_format") == "gptq_v2"
    label = f"int{bits} GPTQ, group {group_size if group_size != in_features else 'none'}" + \
        (", act-order" if act_order else "")
    problem = _problem(found, bits, shape, group_size, scales, zeros)

    def facts(problem: str | None) -> Recognised:
        quant = found.quantization(NAME, label, shape, problem=problem, bits=bits, group_size=group_size,
                                   dtype=config.model_dtype, act_order=act_order, sym=config.get("sym"),
                                   checkpoint_format="gptq_v2" if v2 else "gptq")
        decoder = None if problem else GptqDecoder(qweight, zeros, scales, found.info("g_idx"), bits, group_size, v2)
        return Recognised(shape, quant, decoder)

    return facts(problem)


def _packed_along_input(qweight: TensorInfo, scales: TensorInfo) -> bool:
    """GPTQ's qweight has the scales' output columns; AWQ's has a pack of them per word."""
    return len(scales.shape) == 2 and scales.shape[1] == qweight.shape[1]


def _problem(found: Found, bits: int, shape: tuple[int, int], group_size: int, scales: TensorInfo,
             zeros: TensorInfo | None) -> str | None:
    out_features, in_features = shape
    name = found.logical_name
    if bits not in DECODED_BITS:
        return f"{bits}-bit GPTQ packing is recognised but not decoded ('{name}')"
    qweight = found.info("qweight")
    if bits == 3 and qweight is not None and (qweight.shape[0] * 32) % 3:
        return f"3-bit qweight '{found.name('qweight')}' is no whole number of 3-word packs"
    if in_features % group_size:
        return f"group size {group_size} does not divide the {in_features} input features of '{name}'"
    groups = in_features // group_size
    if tuple(scales.shape) != (groups, out_features):
        return (f"scales '{found.name('scales')}' are {'x'.join(map(str, scales.shape))}; {plural(groups, 'group')} of "
                f"{out_features} outputs need {groups}x{out_features}")
    words = stored.ceil_div(out_features * bits, 32)
    if zeros is None:
        return f"zero points '{found.name('qzeros')}' are missing"
    if zeros.dtype != "int32" or tuple(zeros.shape) != (groups, words):
        return (f"zero points '{found.name('qzeros')}' are {'x'.join(map(str, zeros.shape))} {zeros.dtype}; "
                f"{plural(groups, 'group')} of {out_features} {bits}-bit zero points need {groups}x{words} int32")
    g_idx = found.info("g_idx")
    if g_idx is not None and tuple(g_idx.shape) != (in_features,):
        return f"g_idx '{found.name('g_idx')}' has {plural(g_idx.numel, 'entry', 'entries')} for {in_features} input features"
    return None


def _group_size(config: QuantConfig, in_features: int, scales: TensorInfo) -> int:
    """The config's group size (-1: one group), else the one the scales' rows divide the inputs into."""
    group = config.get("group_size", config.get("q_group_size"))
    if type(group) is int:
        return group if group > 0 else in_features
    groups = scales.shape[0] if len(scales.shape) == 2 else 0
    return in_features // groups if groups and in_features % groups == 0 else 128


class GptqDecoder:
    """Rows (output channels) of a GPTQ weight: a band of qweight's columns unpacked, scaled per group."""

    def __init__(self, qweight: TensorInfo, qzeros: TensorInfo | None, scales: TensorInfo,
                 g_idx: TensorInfo | None, bits: int, group_size: int, v2: bool) -> None:
        self.qweight = stored.matrix(qweight)
        self.qzeros, self.scales, self.g_idx = qzeros, scales, g_idx
        self.bits, self.group_size, self.v2 = bits, group_size, v2
        self.out_dtype = scales.dtype
        self._small: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def _tables(self, ahead: ReadAhead | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(group of each input, zero points (groups, out), scales (groups, out) float32), read once."""
        import numpy as np

        if self._small is None:
            in_features = self.qweight.shape[0] * 32 // self.bits
            out_features = self.qweight.shape[1]
            scales = stored.as_float32(stored.whole(self.scales, ahead))
            groups = scales.shape[0]
            if self.g_idx is not None:
                g = stored.whole(self.g_idx, ahead).astype(np.int64)
                if g.size and (g.min() < 0 or g.max() >= groups):
                    raise TensorDataError(f"cannot dequantize: g_idx names group {int(g.max() if g.max() >= groups else g.min())} "
                                          f"of {groups}")
            else:
                g = np.arange(in_features, dtype=np.int64) // self.group_size
            assert self.qzeros is not None
            packed_zeros = stored.whole(self.qzeros, ahead)
            zeros = (packing.unpack_stream(packed_zeros, 3, out_features) if self.bits == 3
                     else packing.unpack(packed_zeros, self.bits, axis=1)[:, :out_features])
            zeros = zeros.astype(np.float32) + (0 if self.v2 else 1)
            self._small = (g, zeros, scales)
        return self._small

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        words = stored.columns(self.qweight, r0, r1, ahead)  # (in / pack, rows)
        if self.bits == 3:  # each column's words are one bit stream
            in_features = self.qweight.shape[0] * 32 // 3
            return packing.unpack_stream(np.ascontiguousarray(words.T), 3, in_features)
        codes: np.ndarray = packing.unpack(words, self.bits, axis=0).T  # (rows, in)
        return codes

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        """Rows r0..r1: each code looked up in a table of its (group, output)'s `2 ** bits` values, rounded to
        the scales' dtype once per table entry (the table is an eighth of the block or less), so a weight
        costs a shift, a mask, an index and a gather (see the module docstring for the formula)."""
        import numpy as np

        g, zeros, scales = self._tables(ahead)
        n = r1 - r0
        levels = 1 << self.bits
        per = 32 // self.bits
        # table[g, o, c] = round((c - z[g, o]) * s[g, o]): exact in float32, then rounded as the reference
        codes = np.arange(levels, dtype=np.float32)
        table = (codes[None, None, :] - zeros[:, r0:r1, None]) * scales[:, r0:r1, None]
        flat = stored.round_to(np.ascontiguousarray(table, dtype=np.float32), self.out_dtype).reshape(-1)
        if self.bits == 3:  # codes straddle words: unpacked first, then looked up
            index = self.codes(r0, r1, ahead).astype(np.int64)
            index += (np.arange(n, dtype=np.int64) * levels)[:, None]
            index += (g.astype(np.int64) * (n * levels))[None, :]
            looked_up: np.ndarray = np.take(flat, index)
            return looked_up
        words = stored.columns(self.qweight, r0, r1, ahead)  # (in / per, rows)
        w = np.ascontiguousarray(words.T).view(np.uint32).astype(np.int64)  # (rows, in / per)
        packed = w.shape[1]
        # index[o, p, k] of the code of input p * per + k: one array, one gather (no strided stores)
        index = np.right_shift(w[:, :, None], np.arange(0, 32, self.bits, dtype=np.int64)[None, None, :per])
        np.bitwise_and(index, levels - 1, out=index)
        index += (np.arange(n, dtype=np.int64) * levels)[:, None, None]
        index += (g.astype(np.int64) * (n * levels)).reshape(1, packed, per)  # the group of each input
        out: np.ndarray = np.take(flat, index).reshape(n, packed * per)
        return out

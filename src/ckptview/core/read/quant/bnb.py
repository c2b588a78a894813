"""bitsandbytes: 4-bit NF4 / FP4 (`Linear4bit`, with nested "double" quantization of its absmax) and LLM.int8
(`Linear8bitLt`, its `SCB` row statistics), as transformers saves them.

4-bit parts: `W` uint8, two codes a byte (the high nibble first) over the flattened weight; `W.absmax` one
scale per block of `blocksize` codes (float32, or uint8 codes of a second blockwise quantization: then
`W.nested_absmax`, `W.nested_quant_map` and an offset); `W.quant_map` the 16 values of the codes;
`W.quant_state.bitsandbytes__nf4` (or `__fp4`) a JSON object in bytes (shape, dtype, blocksize, the nested
settings). int8 parts: `W` int8 (out, in) and `W.SCB` float32 (out,).

Reference: bitsandbytes' own `functional.dequantize_4bit` and `int8_vectorwise_dequant` on CPU: codes looked
up in the quant map times their block's absmax in float32, rounded to the quant state's dtype (the nested
absmax first dequantized the same way, plus its offset); int8 as `(A * SCB) * 0.007874015718698502` in float32.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ckptview.core import dtypes
from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import CheckpointError
from ckptview.core.read.quant import stored
from ckptview.core.read.quant.config import QuantConfig
from ckptview.core.read.quant.protocol import Anchor, Found, Recognised
from ckptview.core.units import plural

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

NAME = "bitsandbytes"
METHODS: tuple[str, ...] = ("bitsandbytes",)
_PARTS4 = {"codes": ".weight", "absmax": ".weight.absmax", "quant_map": ".weight.quant_map",
           "nested_absmax": ".weight.nested_absmax", "nested_quant_map": ".weight.nested_quant_map"}
ANCHORS: tuple[Anchor, ...] = (
    Anchor(suffix=".weight.quant_state.bitsandbytes__nf4", role="quant_state", logical=".weight",
           dtypes=frozenset({"uint8"}), parts=_PARTS4),
    Anchor(suffix=".weight.quant_state.bitsandbytes__fp4", role="quant_state", logical=".weight",
           dtypes=frozenset({"uint8"}), parts=_PARTS4),
    Anchor(suffix=".weight", role="codes", logical=".weight", dtypes=frozenset({"int8"}), parts={"SCB": ".SCB"}),
)
MAX_STATE_BYTES = 1 << 16
INT8_RECIPROCAL = 7.874015718698502e-3  # bitsandbytes' 1 / 127, as its dequantization multiplies


def recognise(found: Found, config: QuantConfig) -> Recognised | None:
    """bitsandbytes' parts (see the module docstring)."""
    if config.method not in (None, *METHODS):
        return None
    if found.anchor.role == "codes":
        return _int8(found, config)
    return _four_bit(found, config)


def _int8(found: Found, config: QuantConfig) -> Recognised | None:
    codes, scb = found.info("codes"), found.info("SCB")
    assert codes is not None
    if scb is None or len(codes.shape) != 2:
        return None
    shape = tuple(codes.shape)
    problem = None
    if tuple(scb.shape) != shape[:1]:
        problem = f"row statistics '{found.name('SCB')}' have {plural(scb.numel, 'value')} for {plural(shape[0], 'row')}"
    quant = found.quantization(NAME, "int8 LLM.int8 (bitsandbytes), per row", shape, problem=problem, bits=8,
                               dtype=config.model_dtype, format="llm.int8")
    return Recognised(shape, quant, None if problem else Int8Decoder(codes, scb))


def _state(info: TensorInfo) -> dict[str, Any]:
    """The quant state's JSON object (at most `MAX_STATE_BYTES`), read now; {} when it is not one."""
    if info.numel > MAX_STATE_BYTES:
        return {}
    try:
        data = json.loads(bytes(stored.whole(info).reshape(-1).tolist()).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError, CheckpointError):
        return {}
    return data if isinstance(data, dict) else {}


def _four_bit(found: Found, config: QuantConfig) -> Recognised | None:
    state_info, codes = found.info("quant_state"), found.info("codes")
    assert state_info is not None
    state = _state(state_info)
    kind = "nf4" if found.anchor.suffix.endswith("nf4") else "fp4"
    raw_shape = state.get("shape")
    shape: tuple[int, ...] = tuple(raw_shape) if isinstance(raw_shape, list) and all(
        type(v) is int and v > 0 for v in raw_shape) else ()
    blocksize = state.get("blocksize")
    nested = "nested_blocksize" in state
    label = f"{kind} (bitsandbytes), block {blocksize}" + (", double-quantized" if nested else "")
    problem = _problem4(found, state, shape, codes)
    dtype = state.get("dtype")
    out_dtype = dtypes.resolve(dtype) if isinstance(dtype, str) else None
    quant = found.quantization(NAME, label, shape or (0,), problem=problem, bits=4,
                               group_size=blocksize if type(blocksize) is int else None,
                               dtype=out_dtype or config.model_dtype, format=kind, nested=nested)
    if problem is not None or codes is None:
        return Recognised(shape or (0,), quant, None)
    return Recognised(shape, quant, Bnb4Decoder(found, state, shape, out_dtype or "float32"))


def _problem4(found: Found, state: dict[str, Any], shape: tuple[int, ...], codes: TensorInfo | None) -> str | None:
    name = found.logical_name
    if not shape:
        return f"quant state '{found.name('quant_state')}' holds no shape (its JSON could not be read)"
    blocksize = state.get("blocksize")
    if type(blocksize) is not int or blocksize <= 0:
        return f"quant state of '{name}' has no block size"
    numel = stored.numel(shape)
    if codes is None or not codes.is_contiguous:
        return f"codes '{found.name('codes')}' are missing or not contiguous"
    if codes.numel * dtypes.itemsize(codes.dtype) != stored.ceil_div(numel, 2):
        return (f"codes '{found.name('codes')}' hold {codes.numel * dtypes.itemsize(codes.dtype)} bytes; "
                f"{'x'.join(map(str, shape))} in 4-bit codes needs {stored.ceil_div(numel, 2)}")
    absmax, quant_map = found.info("absmax"), found.info("quant_map")
    blocks = stored.ceil_div(numel, blocksize)
    if absmax is None or absmax.numel != blocks:
        have = "missing" if absmax is None else f"{plural(absmax.numel, 'value')}"
        return f"absmax '{found.name('absmax')}' is {have}; {numel} codes in blocks of {blocksize} need {blocks}"
    if quant_map is None or quant_map.numel != 16:
        return f"quant map '{found.name('quant_map')}' is missing or not 16 values"
    if "nested_blocksize" in state:
        nested_size = state.get("nested_blocksize")
        nested_absmax, nested_map = found.info("nested_absmax"), found.info("nested_quant_map")
        if type(nested_size) is not int or nested_size <= 0 or nested_absmax is None or nested_map is None:
            return f"the nested quantization of '{name}' is incomplete"
        if nested_absmax.numel != stored.ceil_div(blocks, nested_size) or nested_map.numel != 256 \
                or absmax.dtype != "uint8":
            return (f"nested absmax '{found.name('nested_absmax')}' has {plural(nested_absmax.numel, 'value')}; {blocks} "
                    f"blocks in blocks of {nested_size} need {stored.ceil_div(blocks, nested_size)}")
        if not isinstance(state.get("nested_offset"), (int, float)):
            return f"the nested quantization of '{name}' has no offset"
    elif absmax.dtype == "uint8":
        return f"absmax '{found.name('absmax')}' is uint8 codes, but the quant state names no nested quantization"
    return None


class Bnb4Decoder:
    """Rows of a 4-bit bitsandbytes weight: the flat codes they cover, each times its block's absmax."""

    def __init__(self, found: Found, state: dict[str, Any], shape: tuple[int, ...], out_dtype: str) -> None:
        self.flat = _as_bytes(_need(found, "codes"))
        self.found, self.state = found, state
        self.cols = shape[-1]
        self.blocksize = int(state["blocksize"])
        self.out_dtype = out_dtype
        self._tables: tuple[np.ndarray, np.ndarray] | None = None

    def _small(self, ahead: ReadAhead | None) -> tuple[np.ndarray, np.ndarray]:
        """(quant map float32, absmax per block float32)."""
        import numpy as np

        if self._tables is None:
            found = self.found
            quant_map = stored.as_float32(stored.whole(_need(found, "quant_map"), ahead)).reshape(-1)
            absmax_info = _need(found, "absmax")
            if "nested_blocksize" in self.state:
                codes = np.ascontiguousarray(stored.whole(absmax_info, ahead)).view(np.uint8).reshape(-1)
                nested_map = stored.as_float32(stored.whole(_need(found, "nested_quant_map"), ahead)).reshape(-1)
                nested_absmax = stored.as_float32(stored.whole(_need(found, "nested_absmax"), ahead)).reshape(-1)
                size = int(self.state["nested_blocksize"])
                block = np.arange(codes.size) // size
                absmax = (nested_map[codes] * nested_absmax[block]).astype(np.float32)
                absmax = (absmax + np.float32(self.state["nested_offset"])).astype(np.float32)
            else:
                absmax = stored.as_float32(stored.whole(absmax_info, ahead)).reshape(-1)
            self._tables = (quant_map, absmax)
        return self._tables

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        start, end = r0 * self.cols, r1 * self.cols
        b0, b1 = start // 2, stored.ceil_div(end, 2)
        raw = np.asarray(stored.rows(self.flat, b0, b1, ahead)).view(np.uint8)
        both = np.empty(raw.size * 2, dtype=np.uint8)
        both[0::2] = raw >> 4
        both[1::2] = raw & 0x0F
        picked: np.ndarray = both[start - 2 * b0 : end - 2 * b0].reshape(r1 - r0, self.cols)
        return picked

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        quant_map, absmax = self._small(ahead)
        codes = self.codes(r0, r1, ahead)
        position = np.arange(r0 * self.cols, r1 * self.cols).reshape(r1 - r0, self.cols)
        out = quant_map[codes] * absmax[position // self.blocksize]
        return stored.round_to(out.astype(np.float32, copy=False), self.out_dtype)


def _need(found: Found, role: str) -> TensorInfo:
    """A part the recognition checked is there."""
    info = found.info(role)
    assert info is not None, role
    return info


def _as_bytes(info: TensorInfo) -> TensorInfo:
    """A part stored in another dtype (bitsandbytes' quant_storage) seen as its bytes."""
    size = dtypes.itemsize(info.dtype)
    return TensorInfo("uint8", (info.numel * size,), (1,), info.offset * size, info.storage)


class Int8Decoder:
    """Rows of an LLM.int8 weight: int8 codes times their row's statistic over 127."""

    def __init__(self, codes: TensorInfo, scb: TensorInfo) -> None:
        self.stored_codes = stored.matrix(codes)
        self.scb = scb
        self._scb: np.ndarray | None = None

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        return stored.rows(self.stored_codes, r0, r1, ahead)

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        if self._scb is None:
            self._scb = stored.as_float32(stored.whole(self.scb, ahead)).reshape(-1)
        product = self.codes(r0, r1, ahead).astype(np.float32) * self._scb[r0:r1, None]
        out: np.ndarray = (product * np.float32(INT8_RECIPROCAL)).astype(np.float32)
        return out

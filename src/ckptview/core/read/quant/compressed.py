"""compressed-tensors (vLLM's llm-compressor): `pack-quantized` int weights and `nvfp4-pack-quantized` FP4
weights (`float-quantized` FP8 weights are the `fp8` scheme's: codes and `weight_scale`).

pack-quantized: `weight_packed` int32 (rows, ceil(cols * bits / 32)), the codes + 2 ** (bits - 1) laid end
to end in each row's bit stream (a code may straddle two words), `weight_shape` the logical shape,
`weight_scale` per tensor, channel or group, `weight_zero_point` (asymmetric) packed the same way along the
rows, `weight_g_idx` the group of each column (act-order). nvfp4-pack-quantized: `weight_packed` uint8 (rows,
cols / 2), two E2M1 codes a byte, `weight_scale` FP8 per 16 columns, `weight_global_scale` float32.

Reference: compressed-tensors' own compressors (`PackedQuantizationCompressor.decompress`,
`NVFP4PackedCompressor.decompress`): `(q - z) * s` in the scale's dtype (exact in float32, rounded to it);
FP4 codes times `scale / global_scale` in float32, rounded to bf16, the dtype its unpacking gives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import CheckpointError, TensorDataError
from ckptview.core.read.quant import fp4, packing, stored
from ckptview.core.read.quant.config import QuantConfig
from ckptview.core.read.quant.protocol import Anchor, Found, Recognised
from ckptview.core.units import plural

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

NAME = "compressed-tensors"
METHODS: tuple[str, ...] = ("compressed-tensors", "compressed_tensors")
ANCHORS: tuple[Anchor, ...] = (
    Anchor(suffix=".weight_packed", role="packed", logical=".weight", dtypes=frozenset({"int32", "uint8"}),
           parts={"scale": ".weight_scale", "zero_point": ".weight_zero_point", "shape": ".weight_shape",
                  "g_idx": ".weight_g_idx", "global_scale": ".weight_global_scale"}),
)


def weight_args(config: QuantConfig) -> dict[str, Any]:
    """The first config group's `weights` arguments (num_bits, type, symmetric, strategy, group_size)."""
    groups = config.get("config_groups")
    if isinstance(groups, dict):
        for group in groups.values():
            if isinstance(group, dict) and isinstance(group.get("weights"), dict):
                return dict(group["weights"])
    return {}


def recognise(found: Found, config: QuantConfig) -> Recognised | None:
    """compressed-tensors' packed parts (see the module docstring)."""
    packed = found.info("packed")
    scale = found.info("scale")
    assert packed is not None
    if config.method not in (None, *METHODS) or len(packed.shape) != 2:
        return None
    if packed.dtype == "uint8":
        return _nvfp4(found, packed, scale, config)
    return _int(found, packed, scale, config)


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "a scalar"


def _nvfp4(found: Found, packed: TensorInfo, scale: TensorInfo | None, config: QuantConfig) -> Recognised | None:
    rows, half = packed.shape
    shape = (rows, half * 2)
    glob = found.info("global_scale")
    group = 16
    label = "nvfp4 (e2m1, fp8 scale per 16, global scale)"
    problem = None
    if scale is None or glob is None:
        if scale is None and glob is None and config.method is None:
            return None
        missing = found.name("scale") if scale is None else found.name("global_scale")
        problem = f"NVFP4 weight '{found.logical_name}' is missing '{missing}'"
    elif scale.dtype not in dtypes_fp8() or tuple(scale.shape) != (rows, stored.ceil_div(shape[1], group)):
        problem = (f"scale '{found.name('scale')}' is {_dims(scale.shape)} {scale.dtype}; {_dims(shape)} in groups "
                   f"of {group} needs {rows}x{stored.ceil_div(shape[1], group)} float8")
    elif glob.numel != 1:
        problem = f"global scale '{found.name('global_scale')}' holds {plural(glob.numel, 'value')}, not one"
    quant = found.quantization(NAME, label, shape, problem=problem, bits=4, group_size=group, dtype=config.model_dtype,
                               format="nvfp4-pack-quantized")
    if problem is not None or scale is None or glob is None:
        return Recognised(shape, quant, None)
    return Recognised(shape, quant, Nvfp4Decoder(packed, scale, glob))


def dtypes_fp8() -> frozenset[str]:
    """The float8 dtypes a scale may have."""
    return frozenset({"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"})


def _int(found: Found, packed: TensorInfo, scale: TensorInfo | None, config: QuantConfig) -> Recognised | None:
    args = weight_args(config)
    shape_part = found.info("shape")
    rows, words = packed.shape
    logical: tuple[int, ...] = (rows, words * 32 // max(int(args.get("num_bits") or 4), 1))
    try:
        declared = _declared_shape(shape_part)
    except CheckpointError as exc:
        return _refused(found, logical, config, f"weight shape '{found.name('shape')}' cannot be read: {exc}")
    if declared is None:
        if config.method is None and scale is None:
            return None
        return _refused(found, logical, config, f"weight shape '{found.name('shape')}' is missing or not two sizes")
    logical = declared
    bits = args.get("num_bits")
    fits = [b for b in range(1, 9) if stored.ceil_div(logical[1] * b, 32) == words]
    if type(bits) is not int or bits not in fits:
        bits = fits[0] if len(fits) == 1 else bits
    if logical[0] != rows or type(bits) is not int or bits not in fits:
        return _refused(found, logical, config, f"packed '{found.name('packed')}' is {_dims(packed.shape)} int32; "
                                                f"{_dims(logical)} in {bits}-bit codes needs "
                                                f"{rows}x{stored.ceil_div(logical[1] * int(bits or 4), 32)}")
    if scale is None:
        return _refused(found, logical, config, f"scale '{found.name('scale')}' is missing")
    symmetric = args.get("symmetric", found.info("zero_point") is None)
    kind, groups, group_size, problem = _scale_layout(found, logical, scale, args)
    zero = found.info("zero_point")
    if problem is None and not symmetric:
        need = (stored.ceil_div(rows * bits, 32), groups)
        if zero is None:
            problem = f"zero points '{found.name('zero_point')}' are missing (asymmetric)"
        elif zero.dtype != "int32" or tuple(zero.shape) != need:
            problem = f"zero points '{found.name('zero_point')}' are {_dims(zero.shape)} {zero.dtype}; need {_dims(need)} int32"
    g_idx = found.info("g_idx")
    if problem is None and g_idx is not None and tuple(g_idx.shape) != (logical[1],):
        problem = f"g_idx '{found.name('g_idx')}' has {plural(g_idx.numel, 'entry', 'entries')} for {plural(logical[1], 'column')}"
    label = f"int{bits} compressed-tensors, " + (f"group {group_size}" if kind == "group" else f"per-{kind}") + \
        ("" if symmetric else ", asymmetric") + (", act-order" if g_idx is not None else "")
    quant = found.quantization(NAME, label, logical, problem=problem, bits=bits,
                               group_size=group_size if kind == "group" else None, dtype=config.model_dtype,
                               format="pack-quantized", strategy=kind, symmetric=bool(symmetric))
    if problem is not None:
        return Recognised(logical, quant, None)
    return Recognised(logical, quant, PackedDecoder(packed, scale, None if symmetric else zero, g_idx, bits, kind,
                                                   group_size, logical))


def _refused(found: Found, shape: tuple[int, ...], config: QuantConfig, problem: str) -> Recognised:
    quant = found.quantization(NAME, "compressed-tensors pack-quantized", shape, problem=problem,
                               dtype=config.model_dtype, format="pack-quantized")
    return Recognised(shape, quant, None)


def _declared_shape(info: TensorInfo | None) -> tuple[int, ...] | None:
    """The two sizes `weight_shape` holds (read now: two integers), or None."""
    if info is None or info.numel != 2 or not info.dtype.startswith(("int", "uint")):
        return None
    values = [int(v) for v in stored.whole(info).reshape(-1).tolist()]
    if any(v <= 0 for v in values):
        return None
    return tuple(values)


def _scale_layout(found: Found, shape: tuple[int, ...], scale: TensorInfo,
                  args: dict[str, Any]) -> tuple[str, int, int, str | None]:
    """(strategy, groups, group size, problem) of a scale of its shape for a weight of `shape`."""
    rows, cols = shape
    s_shape = tuple(scale.shape)
    if scale.numel == 1:
        return "tensor", 1, cols, None
    if s_shape in ((rows, 1), (rows,)):
        return "channel", 1, cols, None
    if len(s_shape) == 2 and s_shape[0] == rows:
        groups = s_shape[1]
        size = args.get("group_size")
        group_size = size if type(size) is int and size > 0 else stored.ceil_div(cols, groups)
        if stored.ceil_div(cols, group_size) != groups:
            return "group", groups, group_size, (f"scale '{found.name('scale')}' is {_dims(s_shape)}; {plural(cols, 'column')} in "
                                                 f"groups of {group_size} need {rows}x{stored.ceil_div(cols, group_size)}")
        return "group", groups, group_size, None
    return "group", 0, 0, f"scale '{found.name('scale')}' is {_dims(s_shape)}, which fits no layout of {_dims(shape)}"


class PackedDecoder:
    """Rows of a pack-quantized weight: each row's bit stream unpacked, its scale (and zero point) applied."""

    def __init__(self, packed: TensorInfo, scale: TensorInfo, zero: TensorInfo | None, g_idx: TensorInfo | None,
                 bits: int, kind: str, group_size: int, shape: tuple[int, ...]) -> None:
        self.packed = stored.matrix(packed)
        self.scale_info, self.zero_info, self.g_idx_info = scale, zero, g_idx
        self.bits, self.kind, self.group_size = bits, kind, group_size
        self.rows_n, self.cols = shape
        self.out_dtype = scale.dtype
        self._tables: tuple[np.ndarray, np.ndarray | None, np.ndarray] | None = None

    def _small(self, ahead: ReadAhead | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(scales (rows, groups) float32, zero points or None, the group of each column)."""
        import numpy as np

        if self._tables is None:
            scales: np.ndarray = stored.as_float32(stored.whole(self.scale_info, ahead)).reshape(
                (1, 1) if self.kind == "tensor" else (self.rows_n, -1))
            n_groups = int(scales.shape[1])
            zeros = None
            if self.zero_info is not None:
                words = stored.whole(self.zero_info, ahead)  # (ceil(rows * bits / 32), groups), packed by rows
                zeros = packing.unpack_stream(np.ascontiguousarray(words.T), self.bits, self.rows_n).T.astype(
                    np.float32) - (1 << (self.bits - 1))
            if self.g_idx_info is not None:
                g = stored.whole(self.g_idx_info, ahead).astype(np.int64)
                if g.size and (g.min() < 0 or g.max() >= n_groups):
                    raise TensorDataError(f"cannot dequantize: g_idx names a group outside 0..{n_groups - 1}")
            elif self.kind == "group":
                g = np.arange(self.cols) // self.group_size
            else:
                g = np.zeros(self.cols, dtype=np.int64)
            self._tables = (scales, zeros, g)
        return self._tables

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        words = stored.rows(self.packed, r0, r1, ahead)
        codes: np.ndarray = packing.unpack_stream(words, self.bits, self.cols).astype(np.int16) - (1 << (self.bits - 1))
        return codes

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        scales, zeros, g = self._small(ahead)
        q = self.codes(r0, r1, ahead).astype(np.float32)
        s = scales[0:1] if self.kind == "tensor" else scales[r0:r1]
        if zeros is not None:
            q = q - zeros[r0:r1][:, g]
        out = q * s[:, g]
        return stored.round_to(out.astype(np.float32, copy=False), self.out_dtype)


class Nvfp4Decoder:
    """Rows of an NVFP4 weight: E2M1 codes times their FP8 group scale over the global scale."""

    def __init__(self, packed: TensorInfo, scale: TensorInfo, glob: TensorInfo) -> None:
        self.packed = stored.matrix(packed)
        self.scale_info, self.global_info = scale, glob
        self.cols = packed.shape[1] * 2
        self._scales: np.ndarray | None = None

    def _scale_values(self, ahead: ReadAhead | None) -> np.ndarray:
        import numpy as np

        if self._scales is None:
            scales = stored.as_float32(stored.whole(self.scale_info, ahead))
            glob = stored.as_float32(stored.whole(self.global_info, ahead)).reshape(())
            local = (scales / glob).astype(np.float32)
            if len(self.global_info.shape) == 0:  # a 0-d global scale keeps the quotient in bf16 (torch's promotion)
                local = stored.round_to(local, "bfloat16")
            self._scales = local
        return self._scales

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        return fp4.nibbles(stored.rows(self.packed, r0, r1, ahead))

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        scales = self._scale_values(ahead)[r0:r1]
        values = fp4.values(self.codes(r0, r1, ahead))
        out = values * np.repeat(scales, 16, axis=1)[:, : self.cols]
        return stored.round_to(out.astype(np.float32, copy=False), "bfloat16")


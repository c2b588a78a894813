"""Torch dtype names, their sizes and the NumPy types that hold their values (no torch import)."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# name -> (itemsize in bytes, numpy type name or None when numpy cannot hold the values exactly)
_DTYPES: dict[str, tuple[int, str | None]] = {
    "float64": (8, "float64"),
    "float32": (4, "float32"),
    "float16": (2, "float16"),
    "bfloat16": (2, "bfloat16"),
    "complex128": (16, "complex128"),
    "complex64": (8, "complex64"),
    "complex32": (4, None),  # pairs of float16, decoded specially
    "bcomplex32": (4, None),  # pairs of bfloat16 (torch 2.14), decoded specially
    "int64": (8, "int64"),
    "int32": (4, "int32"),
    "int16": (2, "int16"),
    "int8": (1, "int8"),
    "uint64": (8, "uint64"),
    "uint32": (4, "uint32"),
    "uint16": (2, "uint16"),
    "uint8": (1, "uint8"),
    "bool": (1, "bool"),
    "float8_e4m3fn": (1, "float8_e4m3fn"),
    "float8_e5m2": (1, "float8_e5m2"),
    "float8_e4m3fnuz": (1, "float8_e4m3fnuz"),
    "float8_e5m2fnuz": (1, "float8_e5m2fnuz"),
    "float8_e8m0fnu": (1, "float8_e8m0fnu"),
    "float4_e2m1fn_x2": (1, "uint8"),  # two fp4 values packed per byte: shown as raw bytes
    # quantized tensors: the stored integers (scale/zero point live in the tensor's metadata)
    "qint8": (1, "int8"),
    "quint8": (1, "uint8"),
    "qint32": (4, "int32"),
    "quint4x2": (1, "uint8"),
    "quint2x4": (1, "uint8"),
    "bits8": (1, "uint8"),
    "bits16": (2, "uint16"),
    "bits1x8": (1, "uint8"),
    "bits2x4": (1, "uint8"),
    "bits4x2": (1, "uint8"),
}
for _n in range(1, 8):
    _DTYPES[f"int{_n}"] = (1, "int8")
    _DTYPES[f"uint{_n}"] = (1, "uint8")

# Aliases torch accepts as attribute names (torch.float is torch.float32, ...).
ALIASES = {
    "float": "float32", "double": "float64", "half": "float16", "cfloat": "complex64",
    "cdouble": "complex128", "chalf": "complex32", "long": "int64", "int": "int32",
    "short": "int16", "bit": "bits8", "byte": "uint8",
}
# Short names people type (filters, CLI options); not torch attributes, so kept apart from ALIASES.
SHORT_NAMES = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

# Legacy typed-storage class names (torch.FloatStorage ...) -> dtype name.
STORAGE_CLASSES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool", "BFloat16Storage": "bfloat16",
    "ComplexDoubleStorage": "complex128", "ComplexFloatStorage": "complex64",
    "QInt8Storage": "qint8", "QInt32Storage": "qint32", "QUInt8Storage": "quint8",
    "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
    "UntypedStorage": "uint8",
}

# safetensors dtype codes -> torch dtype names
SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "C64": "complex64", "C128": "complex128", "F4": "float4_e2m1fn_x2",
}
SAFETENSORS_CODES = {v: k for k, v in SAFETENSORS_DTYPES.items()}


def canonical(name: str) -> str:
    """Canonical torch dtype name for `name` ('torch.float' -> 'float32')."""
    name = name.removeprefix("torch.")
    return ALIASES.get(name, name)


def resolve(name: str) -> str | None:
    """The dtype a person means by `name` (`torch.float`, `bf16`, `half`, `int64`), or None if it is none."""
    key = name.lower().removeprefix("torch.")
    key = SHORT_NAMES.get(key, ALIASES.get(key, key))
    return key if key in _DTYPES else None


def is_known(name: str) -> bool:
    """True when `name` is a torch dtype ckptview knows."""
    return canonical(name) in _DTYPES


def itemsize(name: str) -> int:
    """Bytes per element of a torch dtype name."""
    entry = _DTYPES.get(name)  # fast path: names are canonical almost always
    return entry[0] if entry is not None else _DTYPES[canonical(name)][0]


def is_floating(name: str) -> bool:
    """True for the floating-point dtypes (float8 ... float64, bfloat16)."""
    name = canonical(name)
    return name.startswith(("float", "bfloat")) and name != "float4_e2m1fn_x2"


def is_complex(name: str) -> bool:
    """True for complex32/64/128 and bcomplex32."""
    return canonical(name).startswith(("complex", "bcomplex"))


def is_quantized(name: str) -> bool:
    """True for the quantized dtypes (qint8, quint8, qint32, quint4x2, quint2x4)."""
    return canonical(name).startswith(("qint", "quint"))


@cache
def numpy_dtype(name: str) -> np.dtype | None:
    """NumPy dtype that holds the exact values of torch dtype `name` (ml_dtypes for bf16/fp8), or None."""
    import numpy as np  # lazily: listing a checkpoint needs no numpy

    np_name = _DTYPES[canonical(name)][1]
    if np_name is None:
        return None
    if hasattr(np, np_name) and np_name not in ("float8_e4m3fn",):
        return np.dtype(np_name)
    import ml_dtypes

    found: np.dtype[Any] = np.dtype(getattr(ml_dtypes, np_name))
    return found


def storage_numpy_dtype(name: str) -> np.dtype:
    """NumPy dtype used to view raw storage bytes of `name` (falls back to same-width integers)."""
    import numpy as np

    dt = numpy_dtype(name)
    if dt is not None:
        return dt
    return np.dtype({1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64", 16: "complex128"}[itemsize(name)])

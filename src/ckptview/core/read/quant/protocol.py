"""What a quantization scheme is (`Scheme`, a module) and what it answers (`Recognised`, a `Decoder`).

Schemes are listed in `registry.schemes()`. A scheme declares as data how its parts are named (`ANCHORS`: the suffix and dtypes of the part that names
a quantized weight, the suffixes of the other parts, the logical tensor's suffix) and which config names it
(`METHODS`, the `quant_method` values). The recogniser (`recognise.py`) finds every stored tensor an anchor
matches, gathers the parts beside it and asks the scheme, which checks what only it knows (shapes, bits,
group sizes) and answers with the logical tensor: its shape, its `Quantization` facts and a `Decoder` that
dequantizes rows of it from the stored bytes, or a one-line problem when the values cannot be computed.

A `Decoder` works on the logical tensor seen as a matrix: `prod(shape[:-1])` rows of `shape[-1]` values.
It returns float32 values equal to the scheme's reference dequantization (see docs/guide/quantized.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from ckptview.core import dtypes
from ckptview.core.checkpoint import Quantization, TensorInfo
from ckptview.core.read.quant.config import QuantConfig

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

__all__ = ["Anchor", "Decoder", "Found", "Recognised", "Scheme"]


@dataclass(frozen=True)
class Anchor:
    """How one layout of a scheme names its parts, relative to a stem (the anchor's name less `suffix`)."""

    suffix: str
    """The anchor part's name ends with it ("" for any name: then `dtypes` must say which)."""
    role: str
    """The anchor part's role (its codes: "qweight", "codes", "blocks")."""
    parts: Mapping[str, str]
    """role -> suffix of every other part the scheme may have (stem + suffix names it)."""
    logical: str
    """The logical tensor's name is stem + this ("" : the stem itself)."""
    dtypes: frozenset[str] | None = None
    """The dtypes the anchor part may have (None: any)."""


@dataclass(frozen=True)
class Found:
    """What an anchor matched: the stem, the parts present (role -> (name, info)), the logical name."""

    stem: str
    logical_name: str
    parts: Mapping[str, tuple[str, TensorInfo]]
    anchor: Anchor

    def info(self, role: str) -> TensorInfo | None:
        """The part of `role`, if present."""
        found = self.parts.get(role)
        return found[1] if found is not None else None

    def name(self, role: str) -> str:
        """The name the part of `role` has (or would have: stem + its suffix)."""
        found = self.parts.get(role)
        if found is not None:
            return found[0]
        return self.stem + (self.anchor.suffix if role == self.anchor.role else self.anchor.parts.get(role, ""))

    def quantization(self, scheme: str, label: str, shape: tuple[int, ...], *, problem: str | None = None,
                     bits: float | None = None, group_size: int | None = None, dtype: str | None = None,
                     **facts: Any) -> Quantization:
        """The `Quantization` of these parts (the anchor first, then in the anchor's order) for a logical
        tensor of `shape`: stored bytes summed, bits per weight from them."""
        order = [self.anchor.role, *self.anchor.parts]
        parts = tuple((role, self.parts[role][0]) for role in order if role in self.parts)
        stored = sum(info.numel * dtypes.itemsize(info.dtype) for _name, info in self.parts.values())
        numel = math.prod(shape)
        return Quantization(scheme, label, parts, stored, bits, group_size,
                            round(8 * stored / numel, 4) if numel else 0.0, dtype,
                            MappingProxyType({k: v for k, v in facts.items() if v is not None}), problem)


class Decoder(Protocol):
    """Dequantizes rows of a logical tensor (seen as `prod(shape[:-1])` rows of `shape[-1]` values)."""

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        """Rows r0..r1 (end excluded) as a float32 array of shape (r1 - r0, shape[-1])."""
        ...

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray | None:
        """The stored codes of rows r0..r1 (an int4 weight: integers 0..15; fp8: its fp8 values), shaped as
        `rows`, or None when the scheme has no code per weight."""
        ...


@dataclass(frozen=True)
class Recognised:
    """A scheme's answer for one match: the logical tensor and how to read it (`decoder` None: `problem`)."""

    shape: tuple[int, ...]
    quant: Quantization
    decoder: Decoder | None


class Scheme(Protocol):
    """A quantization scheme (a module: its constants and one function)."""

    NAME: str
    METHODS: tuple[str, ...]
    """`quant_method` values of a config that name this scheme (tried first when the config names one)."""
    ANCHORS: tuple[Anchor, ...]

    def recognise(self, found: Found, config: QuantConfig) -> Recognised | None:
        """The logical tensor of `found`, a problem in one line, or None when the parts are not this scheme's."""
        ...

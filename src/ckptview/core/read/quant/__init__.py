"""Quantized checkpoints: the schemes (one module each, listed in `registry`), recognised from the model's
quantization config and the parts' names and dtypes, and the logical tensor of each quantized weight, whose
values are its parts dequantized in bounded blocks (`source.QuantSource`). See `recognise` for how a weight is
found and placed, docs/guide/quantized.md for what each scheme computes and its reference."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.read.quant.config import NO_CONFIG, QuantConfig, read_config
    from ckptview.core.read.quant.recognise import add_logical_tensors, logical_tensor
    from ckptview.core.read.quant.registry import schemes
    from ckptview.core.read.quant.source import QuantSource, codes_view

__all__ = ["NO_CONFIG", "QuantConfig", "QuantSource", "add_logical_tensors", "codes_view", "logical_tensor",
           "read_config", "schemes"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "config": ["NO_CONFIG", "QuantConfig", "read_config"],
    "recognise": ["add_logical_tensors", "logical_tensor"],
    "registry": ["schemes"],
    "source": ["QuantSource", "codes_view"],
})

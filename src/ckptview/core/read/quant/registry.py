"""The registry of quantization schemes, beside the format readers': one module per scheme (`protocol.Scheme`),
listed in `schemes()`. Adding a scheme is adding a module and listing it here, where mypy checks it.
"""

from __future__ import annotations

from ckptview.core.read.quant import awq, bnb, compressed, fp8, gptq, mlx, mxfp4, nvfp4
from ckptview.core.read.quant.config import QuantConfig
from ckptview.core.read.quant.protocol import Scheme

__all__ = ["ordered", "schemes"]


def schemes() -> tuple[Scheme, ...]:
    """Every scheme, in the order they are tried when the config names none."""
    registered: tuple[Scheme, ...] = (fp8, gptq, awq, mxfp4, compressed, nvfp4, bnb, mlx)
    return registered


def ordered(config: QuantConfig) -> tuple[Scheme, ...]:
    """The schemes in the order to try them for `config`: those its `quant_method` names first."""
    every = schemes()
    if config.method is None:
        return every
    named = tuple(s for s in every if config.method in s.METHODS)
    return named + tuple(s for s in every if s not in named)

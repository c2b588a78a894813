"""How numbers, sizes and shapes read in the window (Qt-free)."""

from __future__ import annotations

import re
from typing import Any

from ckptview.core.units import human_bytes

__all__ = ["human_bytes", "human_count", "natural_key", "shape_text", "short_repr"]


def human_count(n: int) -> str:
    """`5130` -> `"5,130"`; `12345678` -> `"12.3 M"` for counts too wide for a column."""
    if n >= 10_000_000_000:
        return f"{n / 1e9:.1f} B"
    if n >= 10_000_000:
        return f"{n / 1e6:.1f} M"
    return f"{n:,}"


def shape_text(shape: tuple[int, ...]) -> str:
    """`(768, 3072)` -> `"768 × 3072"`; a 0-d tensor reads `"scalar"`."""
    return " × ".join(str(d) for d in shape) if shape else "scalar"


def short_repr(value: Any, limit: int = 80) -> str:
    """A one-line repr cut to `limit` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts `layers.2` before `layers.10`."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower())
                 for part in _DIGITS.split(text) if part)

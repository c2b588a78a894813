"""How numbers, sizes and shapes read in the window (Qt-free)."""

from __future__ import annotations

import re
from typing import Any

from ckptview.core.text import elide, printable
from ckptview.core.units import human_bytes

__all__ = ["SHOWN_CHARS", "human_bytes", "human_count", "natural_key", "shape_text", "short_repr", "shown"]

# The longest text from a file the window hands to Qt in one piece. Qt lays out a string whole (column
# widths, label sizes, tooltips): a 90 MB tensor name stopped the event loop for 95 s. Names of real
# tensors are under 300 characters.
SHOWN_CHARS = 1000


def shown(text: object, limit: int = SHOWN_CHARS) -> str:
    """Text from a file as the window shows it: elided to `limit` characters, then escaped by `printable`."""
    return printable(elide(text if isinstance(text, str) else str(text), limit))


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
    if isinstance(value, str | bytes) and len(value) > 4 * limit:  # a 90 MB value: cut before repr and split
        value = value[: 4 * limit]
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts `layers.2` before `layers.10`."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower())
                 for part in _DIGITS.split(text) if part)

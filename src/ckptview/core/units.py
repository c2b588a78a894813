"""Human-readable numbers, shapes and orderings shared by the CLI and the window: a figure a person reads
alone (a cell, a value, a size) is formatted here, with one marker for a figure there is none of (`MISSING`);
a figure inside a sentence is written in place with its format spec (tests/test_architecture.py)."""

from __future__ import annotations

import re

_IEC_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
MISSING = "-"
"""What a table, a summary or a status line shows for a figure there is none of (the CLI and the window)."""


def figure(value: float | int | None, spec: str = ".4g") -> str:
    """A figure for a person: `value` in the format `spec` (four significant digits), `MISSING` for none."""
    return MISSING if value is None else format(value, spec)


def figure_or_text(value: object, spec: str = ".4g") -> str:
    """As `figure` for a float; anything else (an int, a word) as it is written: `MISSING` for None."""
    if value is None:
        return MISSING
    return format(value, spec) if isinstance(value, float) else str(value)


def number(value: object, spec: str = ".4g") -> str:
    """A figure in a window's table cell or line: an int with thousands separators, a float in the format
    `spec`, anything else as it is written; `MISSING` for none."""
    if value is None:
        return MISSING
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return format(value, spec) if isinstance(value, float) else str(value)


def percent(fraction: float | None, spec: str = ".1f") -> str:
    """0.125 -> '12.5%' (`spec` for 100 times the fraction); `MISSING` for none."""
    return MISSING if fraction is None else f"{100 * fraction:{spec}}%"


def gib(nbytes: int) -> str:
    """A device's memory: 85899345920 -> '80.0 GiB' (always GiB, so devices compare at a glance)."""
    return f"{nbytes / 2**30:.1f} GiB"


def human_bytes(n: int | float | None) -> str:
    """1536 -> '1.5 KiB': powers of 1024 with IEC names, the one byte format of the CLI and the window
    (`MISSING` for none)."""
    if n is None:
        return MISSING
    value = float(n)
    for unit in _IEC_UNITS:
        if abs(value) < 1024 or unit == _IEC_UNITS[-1]:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_IEC_UNITS[-1]}"  # unreachable


def human_count(n: int) -> str:
    """7946 -> '7.9K', 124_000_000 -> '124.0M'."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def shape_str(shape: tuple[int, ...] | list[int]) -> str:
    """(768, 3072) -> '768x3072'; a scalar -> '()'."""
    return "x".join(str(s) for s in shape) if len(shape) else "()"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """1 -> '1 tensor', 2 -> '2 tensors', 1234 -> '1,234 tensors' (``nouns`` for an irregular plural)."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def count_text(n: int) -> str:
    """`5130` -> `"5,130"` (exact), `12345678` -> `"12.3 M"`: a count in a table cell, exact while it fits."""
    if n >= 10_000_000_000:
        return f"{n / 1e9:.1f} B"
    if n >= 10_000_000:
        return f"{n / 1e6:.1f} M"
    return f"{n:,}"


def shape_text(shape: tuple[int, ...]) -> str:
    """`(768, 3072)` -> `"768 × 3072"`; a 0-d tensor reads `"scalar"`."""
    return " × ".join(str(d) for d in shape) if shape else "scalar"


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts `layers.2` before `layers.10`."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower())
                 for part in _DIGITS.split(text) if part)

"""Human-readable numbers shared by the CLI and the window."""

from __future__ import annotations


def human_bytes(n: int | float) -> str:
    """1536 -> '1.5 KB' (powers of 1024, as file managers show sizes)."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1024 or unit == "TB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"


def human_count(n: int) -> str:
    """7946 -> '7.9K', 124_000_000 -> '124.0M'."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def shape_str(shape: tuple[int, ...] | list[int]) -> str:
    """(768, 3072) -> '768x3072'; a scalar -> '()'."""
    return "x".join(str(s) for s in shape) if len(shape) else "()"

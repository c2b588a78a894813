"""Files the app ships: the icon, the desktop entry, the MIME types and the bundled example checkpoint
(made by `tools/make_example.py`)."""

from __future__ import annotations

import os

__all__ = ["resource_path"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def resource_path(name: str) -> str:
    """Absolute path of the shipped resource `name` (works from a checkout and from an installed wheel)."""
    return os.path.join(_HERE, name)

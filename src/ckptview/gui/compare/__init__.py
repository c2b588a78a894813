"""The comparison tab: two checkpoints side by side, their differences as a table and overlays."""

from __future__ import annotations

from ckptview.gui.compare.tab import CompareTab, open_diff

__all__ = ["CompareTab", "open_diff"]

"""Widgets and helpers every feature's view uses: jobs off the GUI thread, settings, plots, tables, eliding."""

from __future__ import annotations

from ckptview.gui.base.settings import Settings
from ckptview.gui.base.tab import Tab
from ckptview.gui.base.workers import JobSlot

__all__ = ["JobSlot", "Settings", "Tab"]

"""A checkpoint's tab: its opening, pages, tree, filter, summary, detail and side panels."""

from __future__ import annotations

from ckptview.gui.checkpoint.host import CheckpointContext, PanelSpec, TabHost
from ckptview.gui.checkpoint.tab import CheckpointTab

__all__ = ["CheckpointContext", "CheckpointTab", "PanelSpec", "TabHost"]

"""The export dialog."""

from __future__ import annotations

from ckptview.gui.export.dialog import ExportDialog, export_nodes

__all__ = ["ExportDialog", "export_nodes"]

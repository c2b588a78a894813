"""Export tensors to .npy, .npz or safetensors: planned from metadata, written in bounded blocks, atomically."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.export.plan import FORMATS, ExportPlan, ExportResult, plan_export, run_export

__all__ = ["ExportPlan", "ExportResult", "FORMATS", "plan_export", "run_export"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "plan": ["FORMATS", "ExportPlan", "ExportResult", "plan_export", "run_export"],
})

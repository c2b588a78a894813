"""Export tensors to .npy, .npz or safetensors: planned from metadata, written in bounded blocks, atomically."""

from __future__ import annotations

from ckptview.core.export.plan import FORMATS, ExportPlan, ExportResult, plan_export, run_export

__all__ = ["ExportPlan", "ExportResult", "FORMATS", "plan_export", "run_export"]

"""Comparing two checkpoints: tensors aligned by name, figures of their differences, sections."""

from __future__ import annotations

from ckptview.core.compare.align import parse_mapping
from ckptview.core.compare.diff import DiffResult, TensorDiff, diff_checkpoints, iter_compare, plan_diff

__all__ = ["DiffResult", "TensorDiff", "diff_checkpoints", "iter_compare", "parse_mapping", "plan_diff"]

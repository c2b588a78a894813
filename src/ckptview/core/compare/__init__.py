"""Comparing two checkpoints: tensors aligned by name, figures of their differences, sections."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.compare.align import parse_mapping
    from ckptview.core.compare.diff import DiffResult, TensorDiff, diff_checkpoints, iter_compare, plan_diff

__all__ = ["DiffResult", "TensorDiff", "diff_checkpoints", "iter_compare", "parse_mapping", "plan_diff"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "align": ["parse_mapping"],
    "diff": ["DiffResult", "TensorDiff", "diff_checkpoints", "iter_compare", "plan_diff"],
})

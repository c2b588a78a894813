"""What a checkpoint means: module grouping, the filter language, size facts, training state,
optimizer state mapped to parameter names (a library model's parameter order kept in `order_cache`),
tensor roles."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.inspect.figure_terms import compute_figures
    from ckptview.core.inspect.grouping import ModuleGroup, Row, group_tree
    from ckptview.core.inspect.modules import module_figures
    from ckptview.core.inspect.optimizer import find_optimizers, optimizers_json, pending_orders
    from ckptview.core.inspect.order_cache import ParamOrderCache
    from ckptview.core.inspect.query import QueryError, matching_names, parse_query
    from ckptview.core.inspect.summary import size_facts
    from ckptview.core.inspect.training import training_summary

__all__ = ["ModuleGroup", "ParamOrderCache", "QueryError", "Row", "compute_figures", "find_optimizers", "group_tree",
           "matching_names", "module_figures", "optimizers_json", "parse_query", "pending_orders", "size_facts",
           "training_summary"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "figure_terms": ["compute_figures"],
    "grouping": ["ModuleGroup", "Row", "group_tree"],
    "modules": ["module_figures"],
    "optimizer": ["find_optimizers", "optimizers_json", "pending_orders"],
    "order_cache": ["ParamOrderCache"],
    "query": ["QueryError", "matching_names", "parse_query"],
    "summary": ["size_facts"],
    "training": ["training_summary"],
})

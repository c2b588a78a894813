"""The architecture view of a graph: its blocks in order, repeated modules folded, bookkeeping ops folded
into the nodes they serve (`bookkeeping`), found structurally (`folding`: same subgraph, same shapes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.graph.blocks.bookkeeping import hidden_nodes
    from ckptview.core.graph.blocks.folding import architecture, blocks_json, first_view

__all__ = ["architecture", "blocks_json", "first_view", "hidden_nodes"]

# Each name is imported on first use (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "bookkeeping": ["hidden_nodes"],
    "folding": ["architecture", "blocks_json", "first_view"],
})

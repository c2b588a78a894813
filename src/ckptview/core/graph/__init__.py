"""A model's graph, read as data: a `.pt2`'s program, TorchScript code, a library's traced architecture, or
the module tree of a state dict. Nothing here runs the file (see `docs/guide/graph.md`).

`graph_job(checkpoint, token)` is the work as a generator (progress, cancel); `read_graph` runs it to its end;
`graph_source` says cheaply where a checkpoint's graph will come from; `to_dot` writes Graphviz DOT.
A traced graph is kept in the `GraphCache` its caller hands down (the window keeps one; without, the user's
cache file is opened for that call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.graph.build import graph_job, graph_source, read_graph
    from ckptview.core.graph.cache import GraphCache
    from ckptview.core.graph.dot import to_dot
    from ckptview.core.graph.limits import GraphRefused
    from ckptview.core.graph.model import (
        INPUT_OP,
        MODULE_OP,
        OUTPUT_OP,
        GraphDataError,
        GraphNode,
        ModelGraph,
    )

__all__ = ["INPUT_OP", "MODULE_OP", "OUTPUT_OP", "GraphCache", "GraphDataError", "GraphNode", "GraphRefused",
           "ModelGraph", "graph_job", "graph_source", "read_graph", "to_dot"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "build": ["graph_job", "graph_source", "read_graph"],
    "cache": ["GraphCache"],
    "dot": ["to_dot"],
    "limits": ["GraphRefused"],
    "model": ["INPUT_OP", "MODULE_OP", "OUTPUT_OP", "GraphDataError", "GraphNode", "ModelGraph"],
})

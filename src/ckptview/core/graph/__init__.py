"""A model's graph, read as data: a `.pt2`'s program, TorchScript code, a library's traced architecture, or
the module tree of a state dict. Nothing here runs the file (see `docs/guide/graph.md`)."""

from ckptview.core.graph.build import graph_job, read_graph
from ckptview.core.graph.limits import GraphRefused
from ckptview.core.graph.model import INPUT_OP, MODULE_OP, OUTPUT_OP, GraphDataError, GraphNode, ModelGraph

__all__ = ["INPUT_OP", "MODULE_OP", "OUTPUT_OP", "GraphDataError", "GraphNode", "GraphRefused", "ModelGraph",
           "graph_job", "read_graph"]

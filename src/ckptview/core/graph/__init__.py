"""A model's graph, read as data: a `.pt2`'s program, TorchScript code, a library's traced architecture, or
the module tree of a state dict. Nothing here runs the file (see `docs/guide/graph.md`)."""

from ckptview.core.graph.model import GraphNode, ModelGraph

__all__ = ["GraphNode", "ModelGraph"]

"""The Graph view of a checkpoint tab: the model's graph nested by module, laid out, searched and coloured."""

from ckptview.gui.graph.page import GraphPage

__all__ = ["GraphPage"]

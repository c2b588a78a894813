"""The Graph view: a checkpoint's model graph nested by module, laid out, searched and coloured by its
weights (`GraphPage`), and its hosts in a comparison tab (`CompareGraph`) and a run tab (`RunGraph`)."""

from ckptview.gui.graph.hosts import CompareGraph, RunGraph
from ckptview.gui.graph.page import GraphPage

__all__ = ["CompareGraph", "GraphPage", "RunGraph"]

"""What a graph reader refuses, and the sizes a graph keeps: everything else a file can make a reader do is
charged to the one work budget (`ckptview.core.budget`), paid for by the file's bytes.

A hostile `.pt2` program or TorchScript code record can ask for more than its size pays for (a node list of
millions, an expression nested thousands deep, a call tree that doubles at every level, a record that
inflates a thousandfold): the budget refuses each in one `BudgetExceeded` line. What is left here are sizes
of one structure (a graph's node list, its notes) and `GraphRefused`, a file that cannot be read as a graph;
`docs/limits.md` lists them all.
"""

from __future__ import annotations

from ckptview.core.errors import CheckpointFormatError
from ckptview.core.graph.model import MAX_NODES

# Nodes of one graph: the size of the one list the window draws and `ModelGraph.from_json` reads back (a
# Llama-70B-sized program is ~20,000).
MAX_GRAPH_NODES = MAX_NODES
# Notes kept on one graph (the rest are counted).
MAX_NOTES = 20


class GraphRefused(CheckpointFormatError):
    """The file's graph asks for more than its readers do for one file, or cannot be read as a graph."""

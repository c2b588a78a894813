"""What a graph reader will do for one file, at most: the caps that keep its work bounded by the file's bytes.

A hostile `.pt2` program or TorchScript code record can ask for more than its size pays for (a node list of
millions, an expression nested thousands deep, a method that calls itself, a call tree that doubles at
every level). Each reader counts against these caps and refuses beyond them with one `GraphRefused` line;
`docs/limits.md` lists them.
"""

from __future__ import annotations

from ckptview.core.errors import CheckpointFormatError
from ckptview.core.graph.model import MAX_NODES

# Nodes of one graph (a Llama-70B-sized program is ~20,000; the window draws a few hundred thousand at most).
MAX_GRAPH_NODES = MAX_NODES
# Bytes of one TorchScript code record read, and of all records of one archive together.
MAX_CODE_RECORD = 16 << 20
MAX_CODE_TOTAL = 256 << 20
# Nesting of one expression or statement of TorchScript code walked (its parser has a bound of its own).
MAX_SYNTAX_DEPTH = 200
# Methods and functions inlined into one another (TorchScript forbids recursion: a cycle is refused).
MAX_INLINE_DEPTH = 64
# Statements and expressions evaluated over the whole inlining: a call tree that doubles at every level
# of a short file would otherwise cost 2**depth.
MAX_STEPS = 2_000_000
# Nesting of one argument of a serialized program node (lists of optional tensors are three deep).
MAX_ARG_DEPTH = 32
# Notes kept on one graph (the rest are counted).
MAX_NOTES = 20


class GraphRefused(CheckpointFormatError):
    """The file's graph asks for more than its readers do for one file, or cannot be read as a graph."""

"""Where the window's Graph view gets its graph, and how the view names what it shows.

`graph_job_for` is the one function the view calls for a graph: the core's `graph_job` (a `.pt2`'s program,
TorchScript code, a library's architecture traced in the worker, else the module tree), so a test or a
tool can put another source in its place.
"""

from __future__ import annotations

from collections.abc import Generator

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.graph.build import graph_job
from ckptview.core.graph.model import ModelGraph
from ckptview.core.graph.module_tree import SOURCE as MODULE_TREE
from ckptview.core.jobs import CancelToken, Progress


def graph_job_for(checkpoint: Checkpoint, token: CancelToken | None = None
                  ) -> Generator[Progress, None, ModelGraph]:
    """The graph of an opened checkpoint, as a job (yields progress, checks `token`)."""
    return (yield from graph_job(checkpoint, token))


def describe_source(graph: ModelGraph) -> str:
    """What the view says it shows: "exported program", "TorchScript code", "transformers
    LlamaForCausalLM on meta", or "module tree: <why there is no data flow>"."""
    source = graph.source
    if source == "exported-program":
        return "exported program"
    if source == "torchscript":
        return "TorchScript code"
    if source == MODULE_TREE:
        return f"module tree: {graph.notes[0]}" if graph.notes else "module tree"
    library, sep, cls = source.partition(":")
    if sep:
        return f"{library} {cls} on meta"
    return source

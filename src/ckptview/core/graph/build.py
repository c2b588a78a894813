"""The one way to a checkpoint's graph: the source its format has, else the library's, else the module tree."""

from __future__ import annotations

from collections.abc import Callable, Generator

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.graph.exported import exported_graph
from ckptview.core.graph.model import ModelGraph
from ckptview.core.graph.torchscript import torchscript_graph
from ckptview.core.jobs import CancelToken, Progress, drain


def graph_job(checkpoint: Checkpoint, token: CancelToken | None = None) -> Generator[Progress, None, ModelGraph]:
    """The graph of an opened checkpoint, as a job: yields progress, checks `token`, returns the graph."""
    if checkpoint.format == "torch-export":
        return (yield from exported_graph(checkpoint, token))
    if checkpoint.format == "torchscript":
        return (yield from torchscript_graph(checkpoint, token))
    raise NotImplementedError(checkpoint.format)


def read_graph(checkpoint: Checkpoint, token: CancelToken | None = None,
               on_progress: Callable[[Progress], None] | None = None) -> ModelGraph:
    """`graph_job` run to its end."""
    return drain(graph_job(checkpoint, token), on_progress)

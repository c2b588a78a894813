"""Where the window's Graph view gets its graph: one adapter, `graph_job_for`, for the core's entry point.

The sources (a `.pt2`'s program, TorchScript code, a library's architecture traced in the worker) are the
core's (`ckptview.core.graph`, issue 37). Until its `graph_job(checkpoint, token)` is on main this adapter
draws the module tree of the checkpoint's tensors (no edges: none are invented), which every checkpoint
has; pointing it at the core is a one-line change here.
"""

from __future__ import annotations

from collections.abc import Generator

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.graph import GraphNode, ModelGraph
from ckptview.core.graph.model import MODULE_OP
from ckptview.core.jobs import CancelToken, Progress

MODULE_TREE = "module-tree"
NO_FLOW = "no program in the file and no library architecture read for it"


def graph_job_for(checkpoint: Checkpoint, token: CancelToken | None = None
                  ) -> Generator[Progress, None, ModelGraph]:
    """The graph of an opened checkpoint, as a job (yields progress, checks `token`)."""
    return (yield from module_tree(checkpoint, token))


def module_tree(checkpoint: Checkpoint, token: CancelToken | None = None) -> Generator[Progress, None, ModelGraph]:
    """Every module that holds tensors as a node reading them, placed in its parent module; no edges."""
    modules: dict[str, list[str]] = {}
    entries = checkpoint.tensors()
    for i, entry in enumerate(entries):
        if token is not None and i % 4096 == 0:
            token.check()
            yield Progress(i, len(entries), "reading the module tree")
        module, _, _ = entry.name.rpartition(".")
        modules.setdefault(module, []).append(entry.name)
    nodes = [GraphNode(module or "(top)", MODULE_OP, module.rpartition(".")[0] if module else "", (),
                       tuple(keys)) for module, keys in modules.items()]
    return ModelGraph(MODULE_TREE, nodes, notes=[f"module tree: {NO_FLOW}"])


def describe_source(graph: ModelGraph) -> str:
    """What the view says it shows: "exported program", "TorchScript code", "transformers
    LlamaForCausalLM on meta", or "module tree: <why there is no data flow>"."""
    source = graph.source
    if source == "exported-program":
        return "exported program"
    if source == "torchscript":
        return "TorchScript code"
    if source == MODULE_TREE:
        why = next((n for n in graph.notes if n.startswith("module tree:")), None)
        return why or f"module tree: {NO_FLOW}"
    library, sep, cls = source.partition(":")
    if sep:
        return f"{library} {cls} on meta"
    return source

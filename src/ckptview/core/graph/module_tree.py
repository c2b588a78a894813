"""The module tree of a checkpoint drawn as a graph: one node per module that holds tensors, no edges.

Where the file holds no program and no installed library names its architecture, the only structure known
is the module paths of its keys (`encoder.layers.0.attn.q.weight` lives in `encoder.layers.0.attn.q`). Each
such module is a node of op `module`, placed in its own path and reading its own keys; no data flow is
invented, and a note says why there is none.
"""

from __future__ import annotations

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint
from ckptview.core.graph.limits import MAX_GRAPH_NODES, GraphRefused
from ckptview.core.graph.model import MODULE_OP, GraphNode, ModelGraph
from ckptview.core.run.state_dict import state_dict_entries

SOURCE = "module-tree"
TOP = "(top)"  # the id of the node holding keys that sit at the top of the state dict


def module_tree_graph(checkpoint: Checkpoint, why: str, budget: Budget | None = None) -> ModelGraph:
    """The module tree of an opened checkpoint's model weights, with `why` (one line) as its first note."""
    budget = budget or Budget.for_stored(checkpoint.file_size, "the module tree")
    _, entries = state_dict_entries(checkpoint)
    modules: dict[str, list[str]] = {}
    for key, entry in entries.items():
        budget.charge(1 + len(key) // 64, "keys read")
        modules.setdefault(key.rpartition(".")[0], []).append(entry.name)
    if len(modules) > MAX_GRAPH_NODES:
        raise GraphRefused(f"the checkpoint's keys name {len(modules):,} modules, more than the "
                           f"{MAX_GRAPH_NODES:,} a graph is drawn with")
    taken: set[str] = set()
    nodes = []
    for path, names in modules.items():
        node_id = path or TOP
        if node_id in taken:  # a module path spelled as another's id (a hostile key): still one node each
            node_id = f"{node_id}#{len(taken)}"
        taken.add(node_id)
        nodes.append(GraphNode(node_id, MODULE_OP, path, params=tuple(names)))
    notes = [why] if why else []
    if not nodes:
        notes.append("the checkpoint holds no model weights to draw")
    return ModelGraph(SOURCE, nodes, notes=notes)

"""The module tree of a checkpoint drawn as a graph: one node per module that holds tensors, no edges.

Where the file holds no program and no installed library names its architecture, the only structure known
is the module paths of its keys (`encoder.layers.0.attn.q.weight` lives in `encoder.layers.0.attn.q`). Each
such module is a node of op `module`, placed in its own path and reading its own keys; no data flow is
invented, and a note says why there is none.

A full-model pickle (`torch.save(model)`) says more: its modules, parameter-free ones too (a `ReLU`), and
their classes. Each of its modules that holds tensors of its own or no submodule is a node whose op is the
class's dotted name, as a graph traced by torch.fx names a module (`torch.nn.modules.linear.Linear`).
"""

from __future__ import annotations

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Node
from ckptview.core.graph.limits import MAX_GRAPH_NODES, GraphRefused
from ckptview.core.graph.model import MODULE_OP, GraphNode, ModelGraph
from ckptview.core.run.state_dict import state_dict_entries, state_dict_node

SOURCE = "module-tree"
TOP = "(top)"  # the id of the node holding keys that sit at the top of the state dict


def module_tree_graph(checkpoint: Checkpoint, why: str, budget: Budget | None = None) -> ModelGraph:
    """The module tree of an opened checkpoint's model weights, with `why` (one line) as its first note."""
    budget = budget or Budget.for_stored(checkpoint.file_size, "the module tree")
    pickled = _pickled_modules(checkpoint, budget)
    if pickled is not None:
        return _graph(pickled, why)
    _, entries = state_dict_entries(checkpoint)
    modules: dict[str, tuple[str, list[str]]] = {}
    for key, entry in entries.items():
        budget.charge(1 + len(key) // 64, "keys read")
        modules.setdefault(key.rpartition(".")[0], (MODULE_OP, []))[1].append(entry.name)
    return _graph(modules, why)


def _graph(modules: dict[str, tuple[str, list[str]]], why: str) -> ModelGraph:
    """module path -> (op, keys it reads) as a graph of one node per module."""
    if len(modules) > MAX_GRAPH_NODES:
        raise GraphRefused(f"the checkpoint's keys name {len(modules):,} modules, more than the "
                           f"{MAX_GRAPH_NODES:,} a graph is drawn with")
    taken: set[str] = set()
    nodes = []
    for path, (op, names) in modules.items():
        node_id = path or TOP
        if node_id in taken:  # a module path spelled as another's id (a hostile key): still one node each
            node_id = f"{node_id}#{len(taken)}"
        taken.add(node_id)
        nodes.append(GraphNode(node_id, op, path, params=tuple(names)))
    notes = [why] if why else []
    if not nodes:
        notes.append("the checkpoint holds no model weights to draw")
    return ModelGraph(SOURCE, nodes, notes=notes)


def _is_module(node: Node) -> bool:
    """A pickled torch.nn.Module: an object keeping the `training` flag every module has."""
    return node.kind == "object" and any(c.key == "training" and c.kind == "value" and isinstance(c.value, bool)
                                         for c in node.children)


def is_pickled_model(checkpoint: Checkpoint) -> bool:
    """True when the checkpoint's model weights are a pickled module (`torch.save(model)`), not a state dict."""
    return _is_module(state_dict_node(checkpoint))


def _pickled_modules(checkpoint: Checkpoint, budget: Budget) -> dict[str, tuple[str, list[str]]] | None:
    """module path -> (its class, its own tensors' names) for the modules of a pickled model that hold
    tensors of their own or no submodule, in the model's order; None when the weights are no pickled module."""
    base = state_dict_node(checkpoint)
    if not _is_module(base):
        return None
    names = {id(e.node): e.name for e in checkpoint.tensors()}
    found: dict[str, tuple[str, list[str]]] = {}
    stack: list[tuple[Node, str]] = [(base, "")]
    while stack:  # depth first, in the order the module lists its members
        node, path = stack.pop()
        budget.charge(1 + len(node.children) + sum(len(c.children) for c in node.children if c.kind == "object"),
                      "pickled modules walked")  # each member, and what telling a module from an object reads
        own = [names[id(c)] for c in node.children if c.kind == "tensor" and id(c) in names]
        subs = [c for c in node.children if _is_module(c)]
        if own or not subs:
            if len(found) >= MAX_GRAPH_NODES:
                raise GraphRefused(f"the pickled model holds more than the {MAX_GRAPH_NODES:,} modules a graph is "
                                   "drawn with")
            found[path] = (node.type_name or MODULE_OP, own)
        stack.extend((c, f"{path}.{c.key}" if path else str(c.key)) for c in reversed(subs))
    return found

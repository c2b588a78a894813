"""A graph as Graphviz DOT text, for scripts: nodes clustered by module path, edges from inputs.

Every text from the file (ids, ops, module paths) is escaped twice: control characters as `printable`
writes them (no byte can move a terminal's cursor), then quotes and backslashes as DOT's quoted strings
need them, so a hostile name can neither forge DOT syntax nor a terminal's output.
"""

from __future__ import annotations

from ckptview.core.graph.model import INPUT_OP, MODULE_OP, OUTPUT_OP, GraphNode, ModelGraph
from ckptview.core.text import elide, printable

_LABEL_CHARS = 120  # characters of one label drawn (a hostile module path may be megabytes)


def quoted(text: str) -> str:
    """`text` as a DOT quoted string, printable and with quotes and backslashes escaped."""
    return '"' + printable(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(node: GraphNode) -> str:
    if node.op in (INPUT_OP, OUTPUT_OP):
        return f"{node.op}: {node.id}"
    if node.op == MODULE_OP:
        return node.module or node.id
    parts = node.op.split(".")
    short = parts[1] if node.op.startswith("aten.") and len(parts) >= 2 else node.op
    shape = "" if node.shape is None else " [" + ", ".join(map(str, node.shape)) + "]"
    return f"{short}{shape}"


class _Cluster:
    """A module path's cluster: the nodes placed in it and its sub-modules' clusters, in first-seen order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.nodes: list[GraphNode] = []
        self.children: dict[str, _Cluster] = {}


def to_dot(graph: ModelGraph) -> str:
    """The DOT text of `graph` (a `digraph`, clusters nested by module path)."""
    top = _Cluster("")
    for node in graph.nodes:
        cluster = top
        if node.module:
            path = ""
            for part in node.module.split("."):
                path = f"{path}.{part}" if path else part
                cluster = cluster.children.setdefault(part, _Cluster(path))
        cluster.nodes.append(node)
    lines = [f"digraph {quoted(graph.source)} {{", "  rankdir=TB;", '  node [shape=box, fontsize=10];']
    counter = [0]
    _write(top, lines, 1, counter)
    for node in graph.nodes:
        for source in node.inputs:
            lines.append(f"  {quoted(source)} -> {quoted(node.id)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _write(cluster: _Cluster, lines: list[str], depth: int, counter: list[int]) -> None:
    """The cluster's nodes and sub-clusters; iterative over siblings, recursive only as deep as module paths."""
    pad = "  " * depth
    for node in cluster.nodes:
        shape = ", shape=ellipse" if node.op in (INPUT_OP, OUTPUT_OP) else ""
        lines.append(f"{pad}{quoted(node.id)} [label={quoted(elide(_label(node), _LABEL_CHARS))}{shape}];")
    for child in cluster.children.values():
        counter[0] += 1
        lines.append(f"{pad}subgraph cluster_{counter[0]} {{")
        lines.append(f"{pad}  label={quoted(elide(child.path, _LABEL_CHARS))};")
        _write(child, lines, depth + 1, counter)
        lines.append(f"{pad}}}")

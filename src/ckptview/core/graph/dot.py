"""A graph as Graphviz DOT text, for scripts: nodes clustered by module path, edges from inputs.

Each node says its op and its name once; each edge its tensor's shape and dtype (the output of the node it
leaves); a module's cluster its name and class. Given colours (a comparison's relative change, a figure of the
weights), nodes are filled with them. An inferred graph (names and shapes only, nothing traced) is drawn
dashed. Clusters nest at most `MAX_CLUSTER_DEPTH` levels (a module path thousands of levels deep is one
cluster at that depth), written with an explicit stack, and the work is charged to a `Budget`.

Every text from the file (ids, ops, module paths) is escaped twice: control characters as `printable`
writes them (no byte can move a terminal's cursor), then quotes and backslashes as DOT's quoted strings
need them, so a hostile name can neither forge DOT syntax nor a terminal's output.
"""

from __future__ import annotations

from collections.abc import Mapping

from ckptview.core.budget import Budget
from ckptview.core.graph.model import INPUT_OP, MODULE_OP, OUTPUT_OP, GraphNode, ModelGraph
from ckptview.core.text import elide, printable

_LABEL_CHARS = 120  # characters of one label drawn (a hostile module path may be megabytes)
MAX_CLUSTER_DEPTH = 64
INFERRED = "inferred"  # the source of a graph inferred from names and shapes (drawn dashed)


def quoted(text: str) -> str:
    """`text` as a DOT quoted string, printable and with quotes and backslashes escaped."""
    return '"' + printable(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def quoted_lines(*lines: str) -> str:
    """Lines as one DOT quoted string, each escaped as `quoted` escapes it, joined by DOT's line break."""
    return "\\n".join(quoted(elide(line, _LABEL_CHARS))[1:-1] for line in lines if line).join('""')


def shape_text(node: GraphNode) -> str:
    """A node's output as an edge says it: `1x8x32 float32` ("" where unknown)."""
    if node.shape is None:
        return ""
    dims = "x".join(str(s) for s in node.shape) or "scalar"
    return f"{dims} {node.dtype}" if node.dtype else dims


def _label(node: GraphNode) -> tuple[str, ...]:
    if node.op in (INPUT_OP, OUTPUT_OP):
        return (f"{node.op}: {node.id}",)
    if node.op == MODULE_OP:
        return (node.module or node.id,)
    parts = node.op.split(".")
    short = parts[1] if node.op.startswith("aten.") and len(parts) >= 2 else node.op
    base = node.id.rstrip("0123456789").rstrip("_")
    return (short,) if base == short else (short, node.id)


class _Cluster:
    """A module path's cluster: the nodes placed in it and its sub-modules' clusters, in first-seen order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.nodes: list[GraphNode] = []
        self.children: dict[str, _Cluster] = {}


def _text_on(fill: str) -> str:
    """Black or white text, whichever reads on the `#rrggbb` fill."""
    try:
        r, g, b = (int(fill[k:k + 2], 16) / 255 for k in (1, 3, 5))
    except ValueError:
        return "black"
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def to_dot(graph: ModelGraph, colours: Mapping[str, str] | None = None, budget: Budget | None = None,
           outlines: Mapping[str, str] | None = None) -> str:
    """The DOT text of `graph` (a `digraph`, clusters nested by module path); `colours`: node id -> fill
    `#rrggbb`; `outlines`: node id -> a thick outline's colour (a comparison's added, removed, changed)."""
    budget = budget or Budget.for_stored(0, "the graph's DOT text")
    colours, outlines = colours or {}, outlines or {}
    top = _Cluster("")
    for node in graph.nodes:
        cluster = top
        if node.module:
            path = ""
            for part in node.module.split(".", MAX_CLUSTER_DEPTH)[:MAX_CLUSTER_DEPTH]:
                budget.charge(1, "clusters written")
                path = f"{path}.{part}" if path else part
                found = cluster.children.get(part)
                if found is None:
                    found = cluster.children[part] = _Cluster(path)
                cluster = found
        cluster.nodes.append(node)
    dashed = graph.source == INFERRED
    lines = [f"digraph {quoted(graph.source)} {{", "  rankdir=TB;",
             '  node [shape=box, fontsize=10' + (', style=dashed' if dashed else '') + '];',
             '  edge [fontsize=8' + (', style=dashed' if dashed else '') + '];']
    counter = 0
    stack: list[tuple[_Cluster, int, bool] | str] = [(top, 1, False)]
    while stack:  # explicit: a cluster's nodes, then its sub-clusters, then its closing brace
        entry = stack.pop()
        if isinstance(entry, str):
            lines.append(entry)
            continue
        cluster, depth, framed = entry
        pad = "  " * depth
        if framed:  # numbered as it is opened: clusters in the order they are written
            counter += 1
            title = cluster.path.rpartition(".")[2]
            cls = graph.classes.get(cluster.path)
            label = f"{title}: {cls}" if cls else cluster.path
            lines.append(f"{pad[:-2]}subgraph cluster_{counter} {{")
            lines.append(f"{pad}label={quoted(elide(label, _LABEL_CHARS))};")
        for node in cluster.nodes:
            budget.charge(1, "nodes written")
            attrs = [f"label={quoted_lines(*_label(node))}"]
            if node.op in (INPUT_OP, OUTPUT_OP):
                attrs.append("shape=ellipse")
            fill = colours.get(node.id)
            if fill:
                style = "filled,dashed" if dashed else "filled"
                attrs += [f"style={quoted(style)}", f"fillcolor={quoted(fill)}", f"fontcolor={_text_on(fill)}"]
            outline = outlines.get(node.id)
            if outline:
                attrs += [f"color={quoted(outline)}", "penwidth=3"]
            lines.append(f"{pad}{quoted(node.id)} [{', '.join(attrs)}];")
        for child in reversed(list(cluster.children.values())):
            stack.append(f"{pad}}}")
            stack.append((child, depth + 1, True))
    by_id = {node.id: node for node in graph.nodes}
    for node in graph.nodes:
        for source in node.inputs:
            budget.charge(1, "edges written")
            reader = by_id.get(source)
            text = shape_text(reader) if reader is not None else ""
            label = f" [label={quoted(text)}]" if text else ""
            lines.append(f"  {quoted(source)} -> {quoted(node.id)}{label};")
    lines.append("}")
    return "\n".join(lines) + "\n"

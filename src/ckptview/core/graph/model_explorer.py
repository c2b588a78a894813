"""Per-node values in Model Explorer's node-data JSON, both ways: ckptview's figures open in Model Explorer, its
overlays open in ckptview.

The format is ai-edge-model-explorer's (`model_explorer/node_data_builder.py`): a graph's node data is
`{"results": {node key: {"value": number, "bgColor"?, "textColor"?}}, "thresholds"?: [{"value", "bgColor",
"textColor"?}], "gradient"?: [{"stop": 0..1, "bgColor"?, "textColor"?}]}`, a model's is `{graph id: that}`.
A node key is the node's id, which for a `.pt2` or a traced graph is the fx node's name, the id Model
Explorer's PyTorch adapter gives it (its one graph is `graph`). A node's colour is its own `bgColor` first,
then the gradient (0 at the smallest value, 1 at the largest), then the thresholds (the first whose value is
at least the node's); written here with ckptview's colours per node and its colour map as the gradient, so
Model Explorer shows what ckptview shows. Reading is bounded (a file's bytes, its entries), values that are
not finite numbers are skipped, and a node id the graph does not have is counted, not kept.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.graph.collapse import GROUP, Hierarchy, View
from ckptview.core.graph.overlay import BoxFigure, Scale, colour_hex, colour_rgb

GRAPH_ID = "graph"  # the id of the one graph Model Explorer's PyTorch adapter makes
MAX_FILE = 256 << 20  # bytes of node data read at most
GRADIENT_STOPS = 9  # stops written for the colour map (Model Explorer interpolates between them)


class NodeDataError(CheckpointFormatError):
    """A file that is not Model Explorer node data; the message says where."""


@dataclass
class NodeData:
    """Values by node id read from a node-data file, with the colours it asks for (None: by value)."""

    values: dict[str, float]
    colours: dict[str, str] = field(default_factory=dict)  # node id -> the CSS colour the file gives it
    unknown: int = 0  # node keys the graph has no node for (output tensor names, another model's ids)
    skipped: int = 0  # results that are not finite numbers


def _text_colour(rgb: tuple[int, int, int]) -> str:
    r, g, b = (c / 255 for c in rgb)
    return "#000000" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "#ffffff"


def node_data(values: Mapping[str, float | None], scale: Scale | None = None) -> dict[str, Any]:
    """The node data of `values` (node id -> figure; None and non-finite ones left out), each node coloured
    where `scale` places it, and the colour map as the gradient."""
    results: dict[str, dict[str, Any]] = {}
    for node_id, value in values.items():
        if value is None or not math.isfinite(value):
            continue
        result: dict[str, Any] = {"value": value}
        if scale is not None:
            rgb = colour_rgb(scale.position(value))
            result["bgColor"], result["textColor"] = colour_hex(scale.position(value)), _text_colour(rgb)
        results[node_id] = result
    stops = [k / (GRADIENT_STOPS - 1) for k in range(GRADIENT_STOPS)]
    gradient = [{"stop": t, "bgColor": colour_hex(t), "textColor": _text_colour(colour_rgb(t))} for t in stops]
    return {"results": results, "gradient": gradient}


def model_node_data(values: Mapping[str, float | None], scale: Scale | None = None) -> dict[str, Any]:
    """`node_data` as a model's node data (`{"graph": ...}`), the form Model Explorer's loader takes for a model."""
    return {GRAPH_ID: node_data(values, scale)}


def read_node_data(text: str | bytes, node_ids: set[str], budget: Budget | None = None) -> NodeData:
    """The values a node-data file gives the nodes of `node_ids` (a graph's, or the graph `graph` of a
    model's); NodeDataError when the text is not node data."""
    if len(text) > MAX_FILE:
        raise NodeDataError(f"node data of {len(text):,} bytes, more than the {MAX_FILE:,} read")
    budget = budget or Budget.for_stored(len(text), "the node data")
    budget.charge(len(text) // 64, "node data parsed")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NodeDataError(f"node data is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise NodeDataError("node data: expected an object")
    if "results" not in data:  # a model's: the graph Model Explorer's PyTorch adapter names, else the only one
        graphs = {k: v for k, v in data.items() if isinstance(v, dict) and "results" in v}
        chosen = graphs.get(GRAPH_ID) or (next(iter(graphs.values())) if len(graphs) == 1 else None)
        if chosen is None:
            raise NodeDataError("node data: no graph's results (expected 'results', or one graph's)")
        data = chosen
    results = data.get("results")
    if not isinstance(results, dict):
        raise NodeDataError("node data: 'results' is not an object")
    out = NodeData({})
    for key, result in results.items():
        budget.charge(1, "node data read")
        value = result.get("value") if isinstance(result, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            out.skipped += 1
            continue
        if key not in node_ids:
            out.unknown += 1
            continue
        out.values[key] = float(value)
        colour = result.get("bgColor") if isinstance(result, dict) else None
        if isinstance(colour, str) and len(colour) <= 64:
            out.colours[key] = colour
    return out


def box_values(hierarchy: Hierarchy, view: View, values: Mapping[str, float]) -> list[BoxFigure]:
    """Each box of `view` given per-node `values`: a node's own; a closed module's the largest inside it (Model
    Explorer's `max` of a group)."""
    boxes: list[BoxFigure] = []
    for item in view.items:  # bounded: a run's instances are disjoint, so each node is read once
        if item.kind == GROUP:
            found = [values[hierarchy.graph.nodes[i].id] for p in (item.instances or (item.path,))
                     for i in hierarchy.below(p) if hierarchy.graph.nodes[i].id in values]
            boxes.append(BoxFigure(max(found) if found else None, 0, len(found)))
        else:
            node_id = hierarchy.graph.nodes[item.node].id
            value = values.get(node_id)
            boxes.append(BoxFigure(value, 0, 0 if value is None else 1))
    return boxes

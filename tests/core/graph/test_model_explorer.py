"""Model Explorer's node-data JSON both ways (issue 44, "Overlays others can read"): ckptview's figures written
in the format of ai-edge-model-explorer's `node_data_builder.py` (results by node id, colours per node, a
gradient of stops), read back equal; Model Explorer's own forms (a graph's, a model's keyed by graph id,
thresholds, output-tensor keys) read; a file that is not node data is one error line."""

from __future__ import annotations

import json
import math

import pytest

from ckptview.core.graph.collapse import Hierarchy
from ckptview.core.graph.model_explorer import (
    GRAPH_ID,
    NodeDataError,
    box_values,
    model_node_data,
    node_data,
    read_node_data,
)
from ckptview.core.graph.overlay import NORM, colour_hex, scale_of
from tests.support.graphs import llama_program


@pytest.fixture(scope="module")
def graph():
    return llama_program(2)


def test_figures_round_trip_through_model_explorers_format(graph) -> None:
    values = {n.id: float(k + 1) / 7 for k, n in enumerate(graph.nodes) if n.params}
    values["output"] = math.nan  # never written: JSON has no NaN Model Explorer reads
    scale = scale_of(NORM, values.values())
    text = json.dumps(node_data(values, scale))
    data = json.loads(text)
    assert set(data) == {"results", "gradient"}
    stops = data["gradient"]
    assert stops[0]["stop"] == 0 and stops[-1]["stop"] == 1 and all("bgColor" in s for s in stops)
    first = next(iter(data["results"].values()))
    assert set(first) == {"value", "bgColor", "textColor"} and first["bgColor"].startswith("#")
    back = read_node_data(text, {n.id for n in graph.nodes})
    assert back.values == {k: v for k, v in values.items() if math.isfinite(v)}
    assert back.unknown == 0 and back.colours[next(iter(back.values))] == data["results"][next(iter(back.values))][
        "bgColor"]
    model = json.dumps(model_node_data(values, scale))  # a model's node data, keyed by the graph's id
    assert set(json.loads(model)) == {GRAPH_ID}
    assert read_node_data(model, {n.id for n in graph.nodes}).values == back.values


def test_model_explorers_own_node_data_reads(graph) -> None:
    """As Model Explorer writes it: thresholds instead of a gradient, output-tensor keys beside node ids, and
    a value that is a label, not a number."""
    ids = [n.id for n in graph.nodes][:3]
    text = json.dumps({"someModel": {"results": {ids[0]: {"value": 3}, ids[1]: {"value": 1.5, "bgColor": "red"},
                                                 "t_out_7": {"value": 2}, ids[2]: {"value": "slow"}},
                                     "thresholds": [{"value": 2, "bgColor": "#00ff00"}]}})
    read = read_node_data(text, {n.id for n in graph.nodes})
    assert read.values == {ids[0]: 3.0, ids[1]: 1.5} and read.colours == {ids[1]: "red"}
    assert read.unknown == 1 and read.skipped == 1


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"a": 1}', '{"results": []}', "[" * 100_000])
def test_what_is_not_node_data_is_one_error(graph, text) -> None:
    with pytest.raises(NodeDataError):
        read_node_data(text, {n.id for n in graph.nodes})


def test_a_closed_module_shows_the_largest_value_inside_it(graph) -> None:
    hierarchy = Hierarchy(graph)
    view = hierarchy.view(hierarchy.top())
    values = {n.id: float(k) for k, n in enumerate(graph.nodes)}
    boxes = box_values(hierarchy, view, values)
    by_key = {item.key: box for item, box in zip(view.items, boxes, strict=True)}
    assert by_key["g:model"].value == max(values[n.id] for n in graph.nodes if n.module.startswith("model"))
    assert by_key["n:output"].value == values["output"]
    assert colour_hex(0.0) == "#440154" and colour_hex(1.0) == "#fde725"  # viridis' ends, as the window's

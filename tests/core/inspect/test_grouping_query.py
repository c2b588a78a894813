"""Grouping by module path and the filter language, without Qt."""

from __future__ import annotations

import pytest

from ckptview.core.checkpoint import Node, Storage, TensorInfo
from ckptview.core.inspect.grouping import chart_rows, find_row, group_tree
from ckptview.core.inspect.query import QueryError, parse_query, visible_rows
from ckptview.core.units import human_bytes, natural_key


def tensor(shape, dtype="float32") -> Node:
    numel = 1
    for d in shape:
        numel *= d
    stride = tuple(int(s) for s in _strides(shape))
    storage = Storage(key="0", dtype=dtype, numel=numel)
    return Node(key="", kind="tensor", type_name="Tensor",
                tensor=TensorInfo(dtype=dtype, shape=tuple(shape), stride=stride, offset=0, storage=storage))


def _strides(shape):
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return reversed(out)


def state_dict(entries: dict) -> Node:
    root = Node(key="", kind="dict", type_name="dict")
    sd = root.add(Node(key="state_dict", kind="dict", type_name="collections.OrderedDict"))
    for name, node in entries.items():
        node.key = name
        sd.add(node)
    root.add(Node(key="epoch", kind="value", type_name="int", value=3))
    return root


@pytest.fixture
def top():
    return group_tree(state_dict({
        "encoder.layers.3.attn.q_proj.weight": tensor((768, 768)),
        "encoder.layers.3.attn.q_proj.bias": tensor((768,)),
        "encoder.layers.3.mlp.fc.weight": tensor((3072, 768), "float16"),
        "encoder.layers.10.mlp.fc.weight": tensor((3072, 768), "bfloat16"),
        "head.weight": tensor((10, 768)),
    }))


def test_dotted_keys_nest_by_module_path(top):
    sd = top.children[0]
    assert [c.label for c in sd.children] == ["encoder", "head"]
    attn = find_row(top, "state_dict.encoder.layers.3.attn")
    assert attn is not None and attn.is_group
    assert [c.label for c in attn.children] == ["q_proj"]
    weight = find_row(top, "state_dict.encoder.layers.3.attn.q_proj.weight")
    assert weight is not None and weight.node is not None and weight.label == "weight"
    assert weight.node.name == weight.name  # the contract name is kept
    assert [r.label for r in find_row(top, "state_dict.encoder.layers").children] == ["3", "10"]


def test_group_totals_sum_the_subtree(top):
    layer3 = find_row(top, "state_dict.encoder.layers.3")
    assert layer3.tensors == 3
    assert layer3.numel == 768 * 768 + 768 + 3072 * 768
    assert layer3.nbytes == (768 * 768 + 768) * 4 + 3072 * 768 * 2
    assert top.tensors == 5
    assert find_row(top, "epoch").tensors == 0


def test_chart_descends_through_a_lone_container(top):
    bars = chart_rows(top)
    assert [name for name, _ in bars] == ["state_dict.encoder", "state_dict.head"]
    assert bars[0][1] == find_row(top, "state_dict.encoder").nbytes


def visible_leaves(top, text):
    visible, count = visible_rows(top, parse_query(text))
    leaves = sorted(r.name for r in top.walk() if id(r) in visible and not r.children)
    return leaves, count, visible


@pytest.mark.parametrize(("text", "expected"), [
    ("q_proj", ["state_dict.encoder.layers.3.attn.q_proj.bias", "state_dict.encoder.layers.3.attn.q_proj.weight"]),
    ("*.fc.weight", ["state_dict.encoder.layers.10.mlp.fc.weight", "state_dict.encoder.layers.3.mlp.fc.weight"]),
    (r"/layers\.1\d/", ["state_dict.encoder.layers.10.mlp.fc.weight"]),
    ("768x768", ["state_dict.encoder.layers.3.attn.q_proj.weight"]),
    ("*x768", ["state_dict.encoder.layers.10.mlp.fc.weight", "state_dict.encoder.layers.3.attn.q_proj.weight",
               "state_dict.encoder.layers.3.mlp.fc.weight", "state_dict.head.weight"]),
    ("shape:768", ["state_dict.encoder.layers.3.attn.q_proj.bias"]),
    ("bf16", ["state_dict.encoder.layers.10.mlp.fc.weight"]),
    ("dtype:float16", ["state_dict.encoder.layers.3.mlp.fc.weight"]),
    (">3MB", ["state_dict.encoder.layers.10.mlp.fc.weight", "state_dict.encoder.layers.3.mlp.fc.weight"]),
    ("<4KB", ["state_dict.encoder.layers.3.attn.q_proj.bias"]),
    ("weight float32 >1MB", ["state_dict.encoder.layers.3.attn.q_proj.weight"]),
    ("epoch", ["epoch"]),
])
def test_filter_terms(top, text, expected):
    leaves, count, visible = visible_leaves(top, text)
    assert leaves == expected
    assert count == len(expected)
    for row in top.walk():  # ancestors of every match stay visible
        if id(row) in visible and row.parent is not None:
            assert id(row.parent) in visible


def test_size_units_and_bad_queries():
    mib = parse_query(">=1MiB").predicates[0]
    mb = parse_query(">=1MB").predicates[0]

    class R:
        node = tensor((1,))
        nbytes = 1_000_000

    assert mb(R) and not mib(R)
    with pytest.raises(QueryError, match="regular expression"):
        parse_query("/[unclosed/")
    with pytest.raises(QueryError, match="shape"):
        parse_query("shape:12xfoo")
    assert parse_query("   ").empty


def test_formatting():
    assert human_bytes(999) == "999 B"
    assert human_bytes(1_234_567) == "1.2 MiB"
    assert sorted(["10", "2", "1"], key=natural_key) == ["1", "2", "10"]

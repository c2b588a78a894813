"""A graph inferred from a state dict's key names and shapes alone: no library names it, nothing is traced,
no code runs.

Each module that holds tensors becomes one node, in key order, whose op is what its tensors' names and shapes
look like (`Linear`: a 2-D `weight` [out, in] and a `bias` [out]; `Conv2d`: a 4-D weight; `Embedding`: a 2-D
table named so, or first; a norm: 1-D weight and bias, with running statistics a `BatchNorm`). A layer takes
the output of the latest layer before it whose output size fits its input size (a `Linear(20->256)` then a
`Linear(256->10)` is a chain); layers of one module reading one input side by side (q, k and v projections)
read what the first of them reads. A module whose tensors say nothing is a `module` node, unconnected. The
graph's source is `inferred`: every front end draws it dashed and says it is a guess, with the family the
names suggest ("looks like a Llama-style decoder: 2 layers of attention + MLP"), named as a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint
from ckptview.core.graph.collapse import parent_path
from ckptview.core.graph.model import INPUT_OP, MODULE_OP, OUTPUT_OP, GraphNode, ModelGraph
from ckptview.core.run.state_dict import state_dict_entries

SOURCE = "inferred"
TOP = "(top)"
SIZE, LENGTH = "N", "L"  # the sizes of an inferred edge no key tells: the batch, a sequence's length
_EMBEDDING = re.compile(r"(embed|wte|wpe|tok|token|vocab|lookup|position)", re.IGNORECASE)
_NORM = re.compile(r"(norm|ln|bn)", re.IGNORECASE)
_NUMBERED = re.compile(r"(?:^|\.)(layers|layer|h|blocks|block|encoder\.layer|decoder\.layers)\.(\d+)\.")


@dataclass(frozen=True)
class Layer:
    """What one module's tensors look like: its class, the size it takes and the size it gives."""

    op: str
    takes: int | None  # the last dimension (features) of its input; None: token ids, or unknown
    gives: int | None
    spatial: int = 0  # 1, 2, 3 for a convolution's dims of space; 0 otherwise


def guess_layer(path: str, shapes: Mapping[str, tuple[int, ...]], first: bool) -> Layer | None:
    """The layer a module's tensors (`shapes`: leaf name -> shape) look like; None when they say nothing."""
    weight = shapes.get("weight")
    bias = shapes.get("bias")
    if "in_proj_weight" in shapes and len(shapes["in_proj_weight"]) == 2:
        width = shapes["in_proj_weight"][1]
        return Layer("MultiheadAttention", width, width)
    if weight is None:
        return None
    name = path.rpartition(".")[2]
    if len(weight) == 2:
        out, into = weight
        if (bias is None and (_EMBEDDING.search(name) or (first and out > 4 * into))) and not _NORM.search(name):
            return Layer("Embedding", None, into)
        if bias is not None and bias != (out,):
            return None
        return Layer("Linear", into, out)
    if len(weight) in (3, 4, 5):
        return Layer(f"Conv{len(weight) - 2}d", weight[1], weight[0], len(weight) - 2)
    if len(weight) == 1:
        (width,) = weight
        if "running_mean" in shapes or "running_var" in shapes:
            return Layer("BatchNorm", width, width)
        return Layer("LayerNorm" if bias is not None else "RMSNorm", width, width)
    return None


def _shape(layer: Layer) -> tuple[int | str, ...]:
    if layer.op == "Embedding":
        return (SIZE, LENGTH, layer.gives or 0)
    if layer.spatial:
        return (SIZE, layer.gives or 0, *(f"d{k}" for k in range(layer.spatial)))
    return (SIZE, layer.gives or 0)


def inferred_graph(checkpoint: Checkpoint, why: str, budget: Budget | None = None) -> ModelGraph | None:
    """The graph a checkpoint's model weights suggest, with `why` (no traced graph) as its first note; None when
    not one module looks like a layer (the module tree says as much)."""
    budget = budget or Budget.for_stored(checkpoint.file_size, "the inferred graph")
    _, entries = state_dict_entries(checkpoint)
    modules: dict[str, dict[str, tuple[int, ...]]] = {}
    names: dict[str, list[str]] = {}
    dtypes: dict[str, str] = {}
    for key, entry in entries.items():
        budget.charge(1 + len(key) // 64, "keys read")
        path, _, leaf = key.rpartition(".")
        modules.setdefault(path, {})[leaf] = tuple(entry.info.shape)
        names.setdefault(path, []).append(entry.name)
        dtypes.setdefault(path, entry.info.dtype)
    layers = {path: guess_layer(path, shapes, k == 0) for k, (path, shapes) in enumerate(modules.items())}
    if not any(layers.values()):
        return None
    nodes: list[GraphNode] = []
    classes: dict[str, str] = {}
    taken: set[str] = set(modules)
    ends = [_unique("(input)", taken), _unique("(output)", taken)]
    taken = set(ends)
    first = next(layer for layer in layers.values() if layer is not None)
    start = GraphNode(ends[0], INPUT_OP, shape=_input_shape(first), dtype="int64" if first.op == "Embedding" else
                      dtypes[next(p for p, layer in layers.items() if layer is first)])
    nodes.append(start)
    by_gives: dict[int, str] = {}  # output size -> the latest node giving it
    if first.takes is not None:
        by_gives[first.takes] = start.id
    last = start.id
    side: dict[str, tuple[int | None, tuple[str, ...]]] = {}  # parent module -> (size taken, inputs) of its last
    for path, layer in layers.items():
        budget.charge(1, "layers inferred")
        node_id = _unique(path or TOP, taken)
        if layer is None:
            nodes.append(GraphNode(node_id, MODULE_OP, path, params=tuple(names[path])))
            continue
        parent = parent_path(path)
        inputs: tuple[str, ...] = ()
        sibling = side.get(parent)
        if layer.takes is None:
            inputs = (start.id,) if first.op == "Embedding" and layer is first else ()
        elif sibling is not None and sibling[0] == layer.takes and layer.takes != layer.gives:
            inputs = sibling[1]  # q, k, v (gate, up) of one module read one input side by side
        elif layer.takes in by_gives:
            inputs = (by_gives[layer.takes],)
        nodes.append(GraphNode(node_id, layer.op, path, inputs, tuple(names[path]), _shape(layer), dtypes[path]))
        classes[path] = layer.op
        side[parent] = (layer.takes, inputs)
        if layer.gives is not None:
            by_gives[layer.gives] = node_id
        last = node_id
    nodes.append(GraphNode(ends[1], OUTPUT_OP, inputs=(last,)))
    notes = [why] if why else []
    shapes = {key: tuple(entry.info.shape) for key, entry in entries.items()}
    notes.append(f"inferred from the key names and shapes alone (nothing traced, no code run): {family(shapes)}")
    return ModelGraph(SOURCE, nodes, notes=notes, classes=classes)


def _unique(name: str, taken: set[str]) -> str:
    """`name`, or `name#k` when a module path already spells it (a hostile key); added to `taken`."""
    found, k = name, 0
    while found in taken:  # bounded: `name#k` names are module paths of this base only (linear in the layers)
        k += 1
        found = f"{name}#{k}"
    taken.add(found)
    return found


def _input_shape(first: Layer) -> tuple[int | str, ...]:
    if first.op == "Embedding":
        return (SIZE, LENGTH)
    if first.spatial:
        return (SIZE, first.takes or 0, *(f"d{k}" for k in range(first.spatial)))
    return (SIZE, first.takes or 0)


_FAMILIES = (  # (name, keys it needs (each a part of some key), what one numbered block holds)
    ("a Llama-style decoder", ("q_proj", "o_proj", "gate_proj", "down_proj"), "attention + gated MLP"),
    ("a GPT-2-style decoder", ("attn.c_attn", "mlp.c_fc", "mlp.c_proj"), "attention + MLP"),
    ("a GPT-NeoX-style decoder", ("attention.query_key_value", "mlp.dense_h_to_4h"), "attention + MLP"),
    ("a BERT-style encoder", ("attention.self.query", "intermediate.dense"), "attention + MLP"),
    ("a T5-style encoder-decoder", ("SelfAttention.q", "DenseReluDense"), "attention + MLP"),
    ("a ViT-style image encoder", ("patch_embed", "attn.qkv", "mlp.fc1"), "attention + MLP"),
    ("a ResNet-style CNN", ("conv1", "bn1", "downsample"), "residual convolutions"),
    ("a UNet (diffusion)", ("down_blocks", "up_blocks", "mid_block"), "residual and attention blocks"),
)


def family(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """A guess, in words, of the family a state dict's key names suggest (a guess, never a fact)."""
    keys = list(shapes)
    numbered: dict[str, set[str]] = {}
    for key in keys:  # bounded: the matches of a key are within its characters (paid for at the open)
        for match in _NUMBERED.finditer(key):
            numbered.setdefault(key[:match.end(1)], set()).add(match.group(2))
    count = max((len(v) for v in numbered.values()), default=0)
    for name, needs, block in _FAMILIES:
        if all(any(part in key for key in keys) for part in needs):  # bounded: a few fixed parts, each over the keys
            blocks = f": {count} layer{'s' if count != 1 else ''} of {block}" if count else ""
            return f"looks like {name}{blocks} (a guess from the key names)"
    ops = [layer.op for key, shape in shapes.items() if key.endswith("weight")
           if (layer := guess_layer(key.rpartition(".")[0], {"weight": shape}, False)) is not None]
    if ops and set(ops) <= {"Linear"}:
        return (f"looks like a multilayer perceptron: {len(ops)} linear layer{'s' if len(ops) != 1 else ''} "
                "(a guess from the key names)")
    if any(op.startswith("Conv") for op in ops):
        return "looks like a convolutional network (a guess from the key names)"
    return "no family recognised (a guess from the key names says nothing more)"

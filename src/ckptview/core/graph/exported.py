"""A `.pt2`'s exported program as a graph, read from its serialized JSON as data (no torch, no pickle).

`models/<model>.json` holds the program's graph: its inputs (parameters, buffers, constants and user inputs,
told apart by the graph signature), one record per node (the ATen overload it calls, its arguments by value
name, its outputs) and the tensor metadata of every value. The graph here lists the same call_function
nodes as `torch.export.load(f).graph`, in the same order, including the `getitem` nodes torch's deserializer
adds for an operator with several outputs; parameter and buffer placeholders are not nodes of their own:
each checkpoint key sits on the nodes that read it. A compiled library (AOTInductor) beside the program is
listed in a note and never loaded.

Every unit of work is charged to one budget of the file's stored bytes: the JSON as it is read (or inflated)
and what parsing it builds, each argument value visited, each node and edge emitted, each size expression
parsed (once: a value's metadata is read once, however many nodes name it).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.graph.limits import MAX_GRAPH_NODES, GraphRefused
from ckptview.core.graph.model import INPUT_OP, OUTPUT_OP, GraphNode, ModelGraph
from ckptview.core.graph.placing import aliases, unread_keys, with_params
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.formats.torch_export import SCALAR_TYPES, SizeTexts, read_program

SOURCE = "exported-program"
SUBJECT = "the exported program"
NODE_COST = 16
"""Units one node costs (a GraphNode and its id hold ~250 bytes); each edge costs one more."""
# Input kinds of the graph signature whose placeholders are checkpoint entries, and the field naming them.
_STATE_INPUTS = {"parameter": "parameter_name", "buffer": "buffer_name", "tensor_constant": "tensor_constant_name",
                 "custom_obj": "custom_obj_name"}
_STEP = 2000  # nodes between progress reports


def exported_graph(checkpoint: Checkpoint, token: CancelToken | None = None
                   ) -> Generator[Progress, None, ModelGraph]:
    """The graph of an opened `.pt2` (format `torch-export`); yields progress; its work charged to one budget of
    the file's stored bytes (`BudgetExceeded` past it), which looks at `token` as it is charged."""
    budget = Budget.for_stored(checkpoint.file_size, SUBJECT, cancel=token)
    models = [str(m) for m in checkpoint.metadata.get("models") or []]
    names = {entry.name for entry in checkpoint.tensors()}
    graph = ModelGraph(SOURCE)
    for model in models:
        prefix = "" if len(models) == 1 else f"{model}."
        program = read_program(checkpoint, model, budget)
        yield from _add_program(graph, program, prefix, names, budget)
    _place_aliases(graph, checkpoint, budget)
    graph.unread = unread_keys(graph, (e.name for e in checkpoint.tensors()
                                       if "sample_inputs" not in e.path[:2]))
    native = checkpoint.metadata.get("native_code") or []
    if native:
        shown = ", ".join(str(n) for n in native[:3]) + (" ..." if len(native) > 3 else "")
        graph.notes.append(f"native code present: {shown} (a compiled library of the program; never loaded, "
                           "the graph is the program's JSON)")
    return graph


def _add_program(graph: ModelGraph, program: dict[str, Any], prefix: str, names: set[str],
                 budget: Budget) -> Generator[Progress, None, None]:
    module = _obj(program.get("graph_module"), "graph_module")
    body = _obj(module.get("graph"), "graph_module.graph")
    signature = _obj(module.get("signature") or {}, "graph_module.signature")
    tensors = body.get("tensor_values") or {}
    if not isinstance(tensors, dict):
        raise CheckpointFormatError("serialized program: tensor_values is not an object")
    nodes = body.get("nodes") or []
    if not isinstance(nodes, list):
        raise CheckpointFormatError("serialized program: graph nodes are not a list")
    if len(nodes) + len(graph.nodes) > MAX_GRAPH_NODES:
        raise GraphRefused(f"serialized program holds {len(nodes):,} nodes, more than the {MAX_GRAPH_NODES:,} "
                           "a graph is drawn with")
    builder = _Builder(graph, prefix, tensors, budget)
    builder.inputs(body.get("inputs") or [], signature.get("input_specs") or [], names)
    total = len(nodes)
    for i, record in enumerate(nodes):  # each node charged as it is added
        if i % _STEP == 0:
            yield Progress(i, total, "reading the exported program")
        builder.node(_obj(record, f"graph node {i}"))
    builder.outputs(body.get("outputs") or [])


class _Builder:
    """Nodes of one program in order; value names resolved to node ids and placeholders to checkpoint keys."""

    def __init__(self, graph: ModelGraph, prefix: str, tensors: dict[str, Any], budget: Budget) -> None:
        self.graph, self.prefix, self.tensors, self.budget = graph, prefix, tensors, budget
        self.sizes = SizeTexts(budget)
        self.metas: dict[str, tuple[tuple[int | str, ...] | None, str | None]] = {}  # value name -> its _meta
        self.ids: dict[str, str] = {}  # value name -> id of the node that makes it
        self.keys: dict[str, str] = {}  # placeholder name -> checkpoint key
        self.taken = {n.id for n in graph.nodes}
        self.next: dict[str, int] = {}
        self.output_counts: dict[str, int] = {}

    def _unique(self, name: str) -> str:
        """`name` (with the model's prefix), made unique the way torch.fx makes names unique (`x_1`)."""
        base = self.prefix + name
        n = self.next.get(base, 0)  # a counter per base: a million getitems cost a million steps
        candidate = base if n == 0 else f"{base}_{n}"
        while candidate in self.taken:  # each name taken is skipped at most once per base
            self.budget.charge(1, "node names tried")
            n += 1
            candidate = f"{base}_{n}"
        self.next[base] = n + 1
        self.taken.add(candidate)
        return candidate

    def _meta(self, name: str) -> tuple[tuple[int | str, ...] | None, str | None]:
        """A value's shape and dtype, read once per value (many nodes may name one value)."""
        known = self.metas.get(name)
        if known is not None:
            return known
        meta = self.tensors.get(name)
        shape, dtype = None, None
        if isinstance(meta, dict):
            sizes = meta.get("sizes")
            if isinstance(sizes, list):
                self.budget.charge(len(sizes) + 1, "sizes read")
                shape = tuple(self.sizes.size(s) for s in sizes)
            dtype = SCALAR_TYPES.get(meta["dtype"]) if isinstance(meta.get("dtype"), int) else None
        self.metas[name] = shape, dtype
        return shape, dtype

    def inputs(self, args: list[Any], specs: list[Any], names: set[str]) -> None:
        """Placeholders: user inputs become input nodes, the program's state maps to checkpoint keys."""
        if not isinstance(args, list) or not isinstance(specs, list):
            raise CheckpointFormatError("serialized program: graph inputs are not a list")
        self.budget.charge(len(args) + 1, "inputs read")
        for i, arg in enumerate(args):
            name = next(_value_names(arg, self.budget), None)
            if name is None:
                continue  # a constant input (as_int, as_none): no value to draw
            spec = specs[i] if i < len(specs) and isinstance(specs[i], dict) and len(specs[i]) == 1 else {}
            kind, detail = next(iter(spec.items())) if spec else ("user_input", {})
            field = _STATE_INPUTS.get(kind)
            if field is not None and isinstance(detail, dict):
                key = self._key(str(detail.get(field, "")), kind, names)
                if key is not None:
                    self.keys[name] = key
                continue
            if kind == "token":
                continue  # an effect token: ordering, not data
            shape, dtype = self._meta(name)
            node_id = self._unique(name)
            self.ids[name] = node_id
            self._add(GraphNode(node_id, INPUT_OP, shape=shape, dtype=dtype))

    def _key(self, fqn: str, kind: str, names: set[str]) -> str | None:
        """The checkpoint's name for a placeholder's state: weights at the top, constants under `constants`."""
        for candidate in ((self.prefix + fqn, self.prefix + "constants." + fqn) if kind in ("parameter", "buffer")
                          else (self.prefix + "constants." + fqn, self.prefix + fqn)):
            if candidate in names:
                return candidate
        return None

    def node(self, record: dict[str, Any]) -> None:
        target = record.get("target")
        if not isinstance(target, str):
            raise CheckpointFormatError("serialized program: a node has no target")
        op = target.removeprefix("torch.ops.")
        arguments = record.get("inputs") or []
        if not isinstance(arguments, list):
            raise CheckpointFormatError(f"serialized program: inputs of a {op[:80]} node are not a list")
        # Each input is a named argument {"name": schema name, "arg": value, "kind"}: only `arg` names values.
        read = list(dict.fromkeys(_value_names([a.get("arg") for a in arguments if isinstance(a, dict)], self.budget)))
        inputs = tuple(self.ids[n] for n in read if n in self.ids)
        params = tuple(self.keys[n] for n in read if n in self.keys)
        metadata = record.get("metadata")
        module = _module_path(metadata.get("nn_module_stack") if isinstance(metadata, dict) else None)
        outputs = record.get("outputs") or []
        if not isinstance(outputs, list):
            raise CheckpointFormatError(f"serialized program: outputs of a {op[:80]} node are not a list")
        name = record.get("name") if isinstance(record.get("name"), str) and record.get("name") else None
        if not outputs:  # an operator returning nothing (an assert, a copy_ into its input)
            self._add(GraphNode(self._unique(name or _fx_name(op)), op, module, inputs, params))
            return
        single = _single_output(outputs)
        if single is not None:
            kind, value = single
            node_id = self._unique(name or value or _fx_name(op) + "_unused")
            shape, dtype = self._meta(value) if kind == "as_tensor" and value else (None, None)
            if value:
                self.ids[value] = node_id
            self._add(GraphNode(node_id, op, module, inputs, params, shape, dtype))
            return
        node_id = self._unique(name or _fx_name(op))
        self._add(GraphNode(node_id, op, module, inputs, params))
        # As torch's deserializer: one getitem node per output (lists nest: a getitem of the list, then
        # one per element), named after the value it yields.
        self._getitems(node_id, module, outputs if len(outputs) != 1 else _listed(outputs[0]))

    def _getitems(self, parent: str, module: str, items: list[Any]) -> None:
        """One getitem node per output, in torch's order: a list's node, then its elements' (depth first; an
        explicit stack, as a hostile record nests lists as deep as its size allows)."""
        stack: list[tuple[str, Iterator[Any]]] = [(parent, iter(items))]
        while stack:  # each item charged as its node is added
            owner, pending = stack[-1]
            item = next(pending, _END)
            if item is _END:
                stack.pop()
                continue
            kind, value = _output_kind(item)
            if kind in ("as_tensors", "as_sym_ints", "as_sym_floats", "as_ints", "as_floats", "as_strings",
                        "as_bools", "as_sym_bools"):
                list_id = self._unique("getitem")
                self._add(GraphNode(list_id, "getitem", module, (owner,)))
                stack.append((list_id, iter(value if isinstance(value, list) else [])))
                continue
            name = None if kind == "as_none" else _plain_name(item if kind is None else value)
            node_id = self._unique(name or ("as_none" if kind == "as_none" else "getitem"))
            shape, dtype = self._meta(name) if name else (None, None)
            if name:
                self.ids[name] = node_id
            self._add(GraphNode(node_id, "getitem", module, (owner,), (), shape, dtype))

    def _add(self, node: GraphNode) -> None:
        if len(self.graph.nodes) >= MAX_GRAPH_NODES:
            raise GraphRefused(f"serialized program yields more than {MAX_GRAPH_NODES:,} nodes, more than a graph "
                               "is drawn with")
        shape = node.shape or ()
        texts = sum(len(s) for s in shape if isinstance(s, str)) // 16  # a symbolic size is text to show
        self.budget.charge(NODE_COST + len(node.inputs) + len(node.params) + len(shape) + texts, "nodes and edges")
        self.graph.nodes.append(node)

    def outputs(self, outputs: list[Any]) -> None:
        if not isinstance(outputs, list):
            raise CheckpointFormatError("serialized program: graph outputs are not a list")
        read = list(dict.fromkeys(_value_names(outputs, self.budget)))
        self._add(GraphNode(self._unique(OUTPUT_OP), OUTPUT_OP, "", tuple(self.ids[n] for n in read if n in self.ids),
                            tuple(self.keys[n] for n in read if n in self.keys)))


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CheckpointFormatError(f"serialized program: {what} is not an object")
    return value


_END = object()


def _value_names(arg: Any, budget: Budget) -> Iterator[str]:
    """The names of the values an argument refers to (tensors, sizes, objects), in order; never into a subgraph.

    An explicit stack (a hostile record nests lists as deep as its size allows), each value visited charged."""
    stack: list[Any] = [arg]
    while stack:  # each value visited charged
        value = stack.pop()
        budget.charge(1, "argument values read")
        if isinstance(value, dict):
            for key in ("name", "as_name"):
                if isinstance(value.get(key), str) and "graph" not in value:
                    yield value[key]
            stack.extend(v for k, v in reversed(list(value.items())) if k != "as_graph" and isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend(v for v in reversed(value) if isinstance(v, (dict, list)))


def _output_kind(item: Any) -> tuple[str | None, Any]:
    """An output argument's kind and value: ("as_tensor", {"name": ...}); (None, item) for a bare argument."""
    if isinstance(item, dict) and len(item) == 1:
        kind, value = next(iter(item.items()))
        if kind.startswith("as_"):
            return kind, value
    return None, item


def _plain_name(value: Any) -> str | None:
    if isinstance(value, dict):
        for key in ("name", "as_name"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return None


def _single_output(outputs: list[Any]) -> tuple[str, str | None] | None:
    """(kind, value name) when the node has one output that is its own value (a tensor, a size, or none)."""
    if len(outputs) != 1:
        return None
    kind, value = _output_kind(outputs[0])
    if kind in ("as_tensor", "as_sym_int", "as_sym_bool", "as_sym_float"):
        return kind, _plain_name(value)
    if kind == "as_none":
        return kind, None
    return None


def _listed(output: Any) -> list[Any]:
    kind, value = _output_kind(output)
    return value if kind is not None and isinstance(value, list) else [output]


def _fx_name(op: str) -> str:
    """The name torch.fx gives an unnamed node of this target (`native_batch_norm` for aten's overloads)."""
    parts = op.split(".")
    return parts[-2] if len(parts) >= 3 else parts[-1]


def _module_path(stack: Any) -> str:
    """The innermost module of a serialized `nn_module_stack` ("key,path,type;..."), "" when none."""
    if not isinstance(stack, str) or not stack:
        return ""
    last = stack[stack.rfind(";") + 1:]
    parts = _split_top(last)
    return clean_path(parts[1]) if len(parts) == 3 else ""


def _split_top(text: str) -> list[str]:
    """`text` split at commas outside brackets, as torch's deserializer splits one stack entry."""
    out, start, depth = [], 0, 0
    for i, char in enumerate(text):
        if char in "[(":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def clean_path(path: str) -> str:
    """A module path as the checkpoint's keys spell it: `layers.slice(None, 2, None).0` -> `layers.0`."""
    if "(" not in path and "[" not in path:
        return path
    parts = []
    depth, part = 0, list[str]()
    for char in path:
        if char in "[(":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "." and depth == 0:
            parts.append("".join(part))
            part = []
            continue
        part.append(char)
    parts.append("".join(part))
    return ".".join(p for p in parts if "(" not in p and "[" not in p)


def _place_aliases(graph: ModelGraph, checkpoint: Checkpoint, budget: Budget) -> None:
    """A key no node reads whose tensor is another key's (tied weights: one storage, one view) sits where that
    one is read: export keeps one placeholder of a tied pair, the checkpoint keeps both names."""
    placed = graph.placed()
    extra: dict[str, list[str]] = {}
    for key, twins in aliases(checkpoint, budget).items():
        if key in placed:
            continue
        for twin in twins:  # charged: each placement
            for node_id in placed.get(twin, ()):
                budget.charge(1, "tied keys placed")
                extra.setdefault(node_id, []).append(key)
    if extra:
        graph.nodes[:] = [n if n.id not in extra else with_params(n, dict.fromkeys((*n.params, *extra[n.id])))
                          for n in graph.nodes]

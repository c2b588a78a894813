"""The graph every source produces and every front end draws: nodes of computations, each placed in a module.

One node per computation (an ATen call, a graph input or output, or a module where no data flow is known);
`inputs` names other nodes' ids, `params` the checkpoint keys the node reads. The JSON form is the
`ckptview graph --json` contract in `docs/cli.md`; `from_json` reads it back, checked (a graph another process
sent, or the cache kept), so a malformed one is one `GraphDataError` line, never a half-built graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# `op` of a node that stands for a module of the tree when the file holds no data flow (no edges invented).
MODULE_OP = "module"
INPUT_OP = "input"
OUTPUT_OP = "output"

# What `from_json` keeps of a graph it did not make: nodes, characters of one text, entries of one list.
MAX_NODES = 500_000
MAX_TEXT = 10_000
MAX_LIST = 10_000_000
MAX_RANK = 64


class GraphDataError(ValueError):
    """A graph's JSON form does not have the contract's shape; the message says where."""


@dataclass(frozen=True)
class GraphNode:
    """One computation: its ATen overload (`aten.linear.default`), or `input` / `output` / `module`."""

    id: str
    op: str
    module: str = ""  # the module path it belongs to ("" at the top), dotted as the checkpoint's keys
    inputs: tuple[str, ...] = ()  # ids of the nodes whose outputs it takes, in argument order
    params: tuple[str, ...] = ()  # checkpoint keys it reads
    shape: tuple[int | str, ...] | None = None  # its output's shape where known (str: a symbolic size)
    dtype: str | None = None  # its output's dtype (torch's name without "torch.") where known

    def to_json(self) -> dict[str, Any]:
        """The node as `graph --json` prints it."""
        return {"id": self.id, "op": self.op, "module": self.module, "inputs": list(self.inputs),
                "params": list(self.params), "shape": None if self.shape is None else list(self.shape),
                "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: Any, where: str = "node") -> GraphNode:
        """A node from its JSON form; GraphDataError when it is not one. (A traced 70B program's 20,000 nodes
        are read back from the cache on every reopen: the checks are plain type tests, nothing built twice.)"""
        if not isinstance(data, Mapping):
            raise GraphDataError(f"{where}: expected an object")
        get = data.get
        shape = get("shape")
        if shape is not None:
            if type(shape) is not list or len(shape) > MAX_RANK:
                raise GraphDataError(f"{where}.shape: expected a list of sizes or null")
            for size in shape:
                kind = type(size)
                if kind is not int and kind is not str and (kind is bool or not isinstance(size, (int, str))):
                    raise GraphDataError(f"{where}.shape: expected a list of sizes or null")
            shape = tuple(s if type(s) is not str or len(s) <= MAX_TEXT else s[:MAX_TEXT] for s in shape)
        dtype = get("dtype")
        if dtype is not None and type(dtype) is not str:
            raise GraphDataError(f"{where}.dtype: expected a string or null")
        return cls(id=_text(data, "id", where), op=_text(data, "op", where), module=_text(data, "module", where, ""),
                   inputs=tuple(_texts(data, "inputs", where)), params=tuple(_texts(data, "params", where)),
                   shape=shape, dtype=dtype if dtype is None or len(dtype) <= MAX_TEXT else dtype[:MAX_TEXT])


@dataclass
class ModelGraph:
    """A whole graph: where it came from, its nodes in a topological order, and what did not fit on it."""

    source: str  # "exported-program" | "torchscript" | "transformers:LlamaForCausalLM" | "module-tree" | ...
    nodes: list[GraphNode] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # checkpoint keys no node reads
    notes: list[str] = field(default_factory=list)  # one line each: why there is no data flow, native code, ...
    classes: dict[str, str] = field(default_factory=dict)  # module path -> its class name, where the source says

    def to_json(self) -> dict[str, Any]:
        """The `graph --json` object."""
        return {"source": self.source, "nodes": [n.to_json() for n in self.nodes], "unread": list(self.unread),
                "notes": list(self.notes), "classes": dict(self.classes)}

    @classmethod
    def from_json(cls, data: Any, where: str = "graph") -> ModelGraph:
        """A graph from its JSON form, checked: node ids unique, every input an earlier node's id."""
        if not isinstance(data, Mapping):
            raise GraphDataError(f"{where}: expected an object")
        raw = data.get("nodes", [])
        if not isinstance(raw, list):
            raise GraphDataError(f"{where}.nodes: expected a list")
        if len(raw) > MAX_NODES:
            raise GraphDataError(f"{where}: {len(raw):,} nodes, more than the {MAX_NODES:,} a graph may hold")
        nodes: list[GraphNode] = []
        seen: set[str] = set()
        for i, item in enumerate(raw):
            try:
                node = GraphNode.from_json(item)
            except GraphDataError as exc:  # named where it is only when it is wrong (no text per node else)
                raise GraphDataError(f"{where}.nodes[{i}]{str(exc).removeprefix('node')}") from None
            if node.id in seen:
                raise GraphDataError(f"{where}.nodes[{i}]: id {node.id[:80]!r} repeats")
            missing = next((n for n in node.inputs if n not in seen), None)
            if missing is not None:
                raise GraphDataError(f"{where}.nodes[{i}]: input {missing[:80]!r} is no earlier node's id")
            seen.add(node.id)
            nodes.append(node)
        return cls(source=_text(data, "source", where), nodes=nodes, unread=_texts(data, "unread", where),
                   notes=_texts(data, "notes", where), classes=_classes(data, where))

    def node(self, node_id: str) -> GraphNode:
        """The node with id `node_id`; KeyError when there is none."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def placed(self) -> dict[str, list[str]]:
        """{checkpoint key: ids of the nodes that read it}, in node order."""
        out: dict[str, list[str]] = {}
        for node in self.nodes:
            for key in node.params:
                out.setdefault(key, []).append(node.id)
        return out


_MISSING = object()


def _text(data: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if type(value) is not str:
        if isinstance(value, str):
            return str(value)[:MAX_TEXT]
        raise GraphDataError(f"{where}.{key}: expected a string")
    return value if len(value) <= MAX_TEXT else value[:MAX_TEXT]


def _texts(data: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = data.get(key, _MISSING)
    if value is _MISSING:
        return []
    if type(value) is not list or len(value) > MAX_LIST:
        raise GraphDataError(f"{where}.{key}: expected a list of strings")
    for item in value:
        if type(item) is not str:
            raise GraphDataError(f"{where}.{key}: expected a list of strings")
        if len(item) > MAX_TEXT:
            return [v[:MAX_TEXT] for v in value]
    return value


def _classes(data: Mapping[str, Any], where: str) -> dict[str, str]:
    value = data.get("classes", {})
    if not isinstance(value, Mapping) or len(value) > MAX_NODES or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise GraphDataError(f"{where}.classes: expected an object of module paths to class names")
    return {k[:MAX_TEXT]: v[:MAX_TEXT] for k, v in value.items()}

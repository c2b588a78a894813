"""The graph every source produces and every front end draws: nodes of computations, each placed in a module.

One node per computation (an ATen call, a graph input or output, or a module where no data flow is known);
`inputs` names other nodes' ids, `params` the checkpoint keys the node reads. The JSON form is the
`ckptview graph --json` contract in `docs/cli.md`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# `op` of a node that stands for a module of the tree when the file holds no data flow (no edges invented).
MODULE_OP = "module"
INPUT_OP = "input"
OUTPUT_OP = "output"


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


@dataclass
class ModelGraph:
    """A whole graph: where it came from, its nodes in a topological order, and what did not fit on it."""

    source: str  # "exported-program" | "torchscript" | "transformers:LlamaForCausalLM" | "module-tree" | ...
    nodes: list[GraphNode] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # checkpoint keys no node reads
    notes: list[str] = field(default_factory=list)  # one line each: why there is no data flow, native code, ...

    def to_json(self) -> dict[str, Any]:
        """The `graph --json` object."""
        return {"source": self.source, "nodes": [n.to_json() for n in self.nodes], "unread": list(self.unread),
                "notes": list(self.notes)}

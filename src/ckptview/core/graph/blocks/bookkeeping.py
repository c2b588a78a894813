"""Which ops of a graph are bookkeeping: the architecture view folds them into the nodes they serve.

An exported program spells out what a paper's diagram leaves out: `_assert_tensor_metadata` checks, `to`
and `_to_copy` casts, `alias` and `detach`, the `arange`/`le`/`index` ops that build position ids and the
causal mask, views whose only readers are more bookkeeping. They are hidden in the architecture view (never
in the view of every op), and an edge passes through them: the node a mask feeds shows an edge from where
the mask's data came from.

A node is bookkeeping when its op is one of `ALWAYS`; or when no data reaches it (it reads no weight and
no floating-point input flows into it: masks and position ids built from token ids and `arange`); or when
it is a view or a selection (`PASSING`) read only by bookkeeping. Inputs and outputs are never hidden.
"""

from __future__ import annotations

import functools

from ckptview.core.budget import Budget
from ckptview.core.graph.model import INPUT_OP, MODULE_OP, OUTPUT_OP, ModelGraph

# Ops that never carry the model's computation: checks, casts, aliases, copies, constants and sizes.
ALWAYS = frozenset({
    "alias", "detach", "lift_fresh_copy", "to", "_to_copy", "type_as", "contiguous", "clone", "dropout",
    "native_dropout", "feature_dropout", "arange", "scalar_tensor", "zeros", "ones", "empty", "full",
    "zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones", "new_empty", "new_full",
    "_local_scalar_dense", "item", "size", "dim", "numel", "stride", "_shape_as_tensor", "copy", "_assert_async",
    "Tensor.to", "Tensor.contiguous", "Tensor.size", "Tensor.dim", "Tensor.type_as", "Tensor.detach",
})
# Views and selections: bookkeeping when nothing but bookkeeping reads them.
PASSING = frozenset({
    "view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "expand", "expand_as", "permute", "transpose",
    "t", "slice", "select", "flatten", "unflatten", "view_as", "getitem", "split", "split_with_sizes", "chunk",
    "unbind", "narrow", "repeat", "as_strided", "movedim", "index", "Tensor.view", "Tensor.reshape",
    "Tensor.unsqueeze", "Tensor.expand", "Tensor.permute", "Tensor.transpose",
})
THROUGH = 16  # shown nodes one hidden node passes on at most (a mask read by every layer needs one or two)
_FLOATS = ("float", "bfloat", "complex", "half", "double")


@functools.lru_cache(maxsize=4096)
def op_word(op: str) -> str:
    """The op's name without its library and overload: `aten._to_copy.default` -> `_to_copy`."""
    if op.startswith("Tensor."):
        return op
    parts = op.split(".")
    if len(parts) >= 2 and parts[0] in ("aten", "prims", "quantized"):
        return parts[1]
    return parts[-1]


def is_check(word: str) -> bool:
    """An assertion or a symbolic size's bookkeeping (`_assert_scalar`, `sym_size`, `_check_is_size`)."""
    return word.startswith(("_assert", "_check", "sym_", "_sym"))


def hidden_nodes(graph: ModelGraph, budget: Budget, by_id: dict[str, int] | None = None) -> list[bool]:
    """Per node of `graph`: whether the architecture view hides it (see the module's docstring); `by_id`:
    node id -> index, when the caller has it."""
    nodes = graph.nodes
    by_id = by_id if by_id is not None else {node.id: i for i, node in enumerate(nodes)}
    data = [False] * len(nodes)
    hidden = [False] * len(nodes)
    readers = [0] * len(nodes)
    for i, node in enumerate(nodes):
        budget.charge(1 + len(node.inputs), "ops sorted into bookkeeping")
        sources = [by_id[s] for s in node.inputs if s in by_id]
        for s in sources:
            readers[s] += 1
        if node.op == INPUT_OP:
            data[i] = node.dtype is None or node.dtype.startswith(_FLOATS)
            continue
        if node.op in (OUTPUT_OP, MODULE_OP):
            data[i] = True
            continue
        word = op_word(node.op)
        data[i] = bool(node.params) or any(data[s] for s in sources)
        hidden[i] = word in ALWAYS or is_check(word) or not data[i]
    shown_readers = [0] * len(nodes)  # readers that are not hidden, counted as the pass below settles them
    for i in range(len(nodes) - 1, -1, -1):  # readers come after: a view read only by bookkeeping is bookkeeping
        node = nodes[i]
        budget.charge(1 + len(node.inputs), "ops sorted into bookkeeping")
        if not hidden[i] and readers[i] and shown_readers[i] == 0 and op_word(node.op) in PASSING:
            hidden[i] = True
        if not hidden[i]:
            for name in node.inputs:
                j = by_id.get(name)
                if j is not None:
                    shown_readers[j] += 1
    return hidden


def passed_inputs(graph: ModelGraph, hidden: list[bool], budget: Budget, by_id: dict[str, int] | None = None
                  ) -> list[tuple[int, ...]]:
    """Per node: the shown nodes whose outputs reach it, through hidden ones (at most `THROUGH` per hidden
    node: the sources of a mask, not every op that built it)."""
    nodes = graph.nodes
    by_id = by_id if by_id is not None else {node.id: i for i, node in enumerate(nodes)}
    out: list[tuple[int, ...]] = []
    for i, node in enumerate(nodes):
        found: dict[int, None] = {}
        for s in node.inputs:
            j = by_id.get(s)
            if j is None or j >= i:
                continue
            if hidden[j]:
                for k in out[j]:
                    budget.charge(1, "edges passed through bookkeeping")
                    found.setdefault(k)
            else:
                budget.charge(1, "edges passed through bookkeeping")
                found.setdefault(j)
        if hidden[i] and len(found) > THROUGH:
            found = dict.fromkeys(list(found)[:THROUGH])
        out.append(tuple(found))
    return out

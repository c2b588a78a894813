"""Size facts of a checkpoint for its summary: parameters and bytes by dtype, tied weights counted once."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

from ckptview.core import dtypes
from ckptview.core.checkpoint import MODULE_PART, Checkpoint, Node, PathKey, TensorEntry
from ckptview.core.inspect import zero
from ckptview.core.inspect.grouping import ParameterCounts
from ckptview.core.inspect.roles import BUFFER_NAMES, COUNTER_NAMES, last_name, learnable_dtype, tensor_role
from ckptview.core.read.formats.training_folder import is_weights_entry


class SizeFacts(NamedTuple):
    """The size facts the summary header shows."""
    parameters: int  # elements of the distinct parameters outside optimizer state (as torch counts them)
    bytes_by_dtype: list[tuple[str, int]]  # (dtype, bytes) over the distinct tensors, largest first (a quantized
    # weight's by its stored parts' dtypes)
    buffers: int = 0  # elements of the distinct buffers and integer counters outside optimizer state
    counted: ParameterCounts | None = None  # which tensors those parameters are (the tree's column counts them)


def _distinct(checkpoint: Checkpoint) -> tuple[list[TensorEntry], list[tuple[TensorEntry, TensorEntry]]]:
    """The distinct tensors, and (copy, the entry first seen) for every other name of one of them."""
    # Tied weights (`lm_head.weight is embed.weight`) are one tensor saved under two names: count once.
    entries = checkpoint.tensors()
    if not checkpoint.sharing() and not any(e.info.storage is None for e in entries):
        # No storage backs two tensors (safetensors always; `sharing` is computed once per checkpoint and
        # every listing asks for it): every tensor is distinct, and a million keys need not be built.
        return entries, []
    # Most storages back one view, so only a second view of a storage costs a key: a set of a million
    # (storage, offset, shape, stride) tuples took a third of a second to free, in one go, holding the GIL.
    first: dict[int, TensorEntry] = {}  # id(storage) -> its first view, or id(info) of a tensor without one
    views: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], TensorEntry] = {}
    out = []
    copies = []
    for entry in entries:
        info = entry.info
        key = id(info.storage) if info.storage is not None else id(info)
        seen = first.get(key)
        if seen is None:
            first[key] = entry
        elif seen.info is info:
            copies.append((entry, seen))
            continue
        elif info.storage is None:
            continue
        else:
            view = (info.offset, info.shape, info.stride)
            where = (key, *view)
            was = seen if view == (seen.info.offset, seen.info.shape, seen.info.stride) else views.get(where)
            if was is not None:
                copies.append((entry, was))
                continue
            views[where] = entry
        out.append(entry)
    return out, copies


# Where a training checkpoint keeps the model's weights (Lightning's `state_dict`, DeepSpeed's `module`, ...).
CONTAINER_KEYS = ("model_state_dict", "state_dict", "model", "model_state", "module", "net", "network")


def _in_model(checkpoint: Checkpoint, entries: list[TensorEntry]) -> Callable[[tuple[PathKey, ...]], bool]:
    """Whether a tensor at a path is one of the model's: inside a training checkpoint's model container (a
    training folder's weight files, and their own container), else anything outside optimizer state."""
    folder = checkpoint.format == "training-folder"
    heads: dict[tuple[PathKey, ...], PathKey | None] = {}  # the container of each level looked at

    def container(prefix: tuple[PathKey, ...]) -> PathKey | None:
        if prefix not in heads:
            keys = {e.path[len(prefix)] for e in entries
                    if len(e.path) > len(prefix) + 1 and e.path[:len(prefix)] == prefix}
            heads[prefix] = next((k for k in CONTAINER_KEYS if k in keys), None)
        return heads[prefix]

    if not folder:  # one container looked for, at the top: decided once, not per tensor
        top = container(())
        if top is not None:
            return lambda path: len(path) > 1 and path[0] == top
        return lambda path: not (path and "optim" in str(path[0]).lower())

    def inside(path: tuple[PathKey, ...]) -> bool:
        prefix: tuple[PathKey, ...] = ()
        if folder:
            if not path or not is_weights_entry(str(path[0])):
                return False
            prefix = path[:1]
        found = container(prefix)
        if found is not None:
            return len(path) > len(prefix) + 1 and path[len(prefix)] == found
        return not (len(path) > len(prefix) and "optim" in str(path[len(prefix)]).lower())

    return inside


def size_facts(checkpoint: Checkpoint) -> SizeFacts:
    """The facts in one pass over the distinct tensors (O(tensors): computed off the GUI thread).

    Parameters are counted as ``sum(p.numel() for p in model.parameters())`` counts them, buffers apart,
    by the rules of `roles` (what a pickled module or a .pt2's signature says, integer dtypes, known buffer
    names). Where the file says which tensors are the module's (a pickled module, a .pt2), nothing else
    counts (a .pt2's sample inputs); a training checkpoint's model is its container (`state_dict` beside a
    Lightning callback's score, DeepSpeed's `module`); optimizer state never counts. ZeRO-3's empty
    placeholders count with the shapes DeepSpeed records for them (``param_shapes``).
    """
    # Two counts in the one pass: what the module marks as its own (used when the file marks any), and what
    # sits in the model's part of the file by the rules of `roles` (used otherwise).
    marked = [0, 0]  # parameters, buffers among the marked tensors
    any_marked = False
    elements: dict[str, int] = {}  # dtype -> elements
    numels: dict[int, tuple[tuple[int, ...], int]] = {}  # id(shape) -> (shape kept alive, its element count)
    in_model = _in_model(checkpoint, checkpoint.tensors())
    placeholders: dict[tuple[PathKey, ...], set[str]] = {}  # owner of a `module` -> its empty parameters
    learnable: dict[str, bool] = {}  # dtype -> whether it can be a parameter's
    role_names = BUFFER_NAMES | COUNTER_NAMES  # a name in neither is a parameter's, whatever its shape
    parameters = buffers = 0  # model[0], model[1] in the loop's locals (100,000s of additions)
    quantized = False
    distinct, copies = _distinct(checkpoint)
    # id(node) -> elements of each tensor counted, as a module's own (`marked`) and by the rules (`model`)
    counted_marked: dict[int, int] = {}
    counted_model: dict[int, int] = {}
    for entry in distinct:
        info = entry.info
        shape, dtype = info.shape, info.dtype
        known = numels.get(id(shape))
        if known is None or known[0] is not shape:
            known = numels[id(shape)] = (shape, info.numel)
        n = known[1]
        if info.quant is None:
            elements[dtype] = elements.get(dtype, 0) + n
        else:  # a quantized weight's bytes are its parts', counted by their dtypes below
            quantized = True
        path = entry.path
        extra = info.extra
        if extra and MODULE_PART in extra:  # the module says what is its own
            any_marked = True
            role = tensor_role(info, path) != "parameter"
            marked[role] += n
            if not role:
                counted_marked[id(entry.node)] = n
        elif not any_marked and in_model(path):  # a file that marks any: nothing unmarked counts
            # `tensor_role` of a tensor its module does not mark, inlined (100,000 calls a listing)
            parameter = learnable.get(dtype)
            if parameter is None:
                parameter = learnable[dtype] = learnable_dtype(dtype)
            if parameter:
                key = path[-1] if path else ""
                name = key[key.rfind(".") + 1:] if type(key) is str else last_name(path)
                if name in role_names:
                    parameter = not (name in BUFFER_NAMES or len(shape) <= 1 and n == 1)
            if parameter:
                parameters += n
                counted_model[id(entry.node)] = n
                if not n and len(path) >= 2 and path[-2] == "module":  # ZeRO-3's placeholder
                    placeholders.setdefault(path[:-2], set()).add(str(path[-1]))
            else:
                buffers += n
    model = [parameters, buffers]
    for entry in checkpoint.tensors(with_parts=True) if quantized else ():
        part = entry.info
        if part.part_of is not None:
            elements[part.dtype] = elements.get(part.dtype, 0) + part.numel
    sizes = Counter({dtype: count * dtypes.itemsize(dtype) for dtype, count in elements.items()})
    counted = counted_marked if any_marked else counted_model
    tied = [(id(copy.node), id(was.node)) for copy, was in copies if id(was.node) in counted]
    for copy_node, was_node in tied:  # each name of a parameter is the parameter (a module's own counts it)
        counted[copy_node] = counted[was_node]
    found = ParameterCounts(counted, tied)
    if any_marked:
        return SizeFacts(marked[0], sizes.most_common(), marked[1], found)
    return SizeFacts(model[0] + _partitioned(checkpoint.root, placeholders), sizes.most_common(), model[1], found)


def _partitioned(root: Node, placeholders: dict[tuple[PathKey, ...], set[str]]) -> int:
    """Elements of the parameters DeepSpeed ZeRO-3 saved as empty placeholders in a model states file's
    ``module``, by the shapes that file records (each name once: every rank's file holds the same)."""
    counted: set[str] = set()
    total = 0
    for owner, names in placeholders.items():
        node: Node | None = root
        for key in owner:
            node = next((c for c in node.children if c.key == key), None) if node is not None else None
        shapes = zero.parameter_shapes(node)
        for name in names - counted:
            if name in shapes:
                total += math.prod(shapes[name])
                counted.add(name)
    return total

"""DeepSpeed ZeRO's optimizer state named by parameter (Qt-free, no torch, metadata only).

ZeRO's optimizer steps on flat fp32 tensors, one per param group and data-parallel rank: torch's optimizer
state dict inside ``zero_pp_rank_R_mp_rank_00_optim_states.pt`` has one "parameter" per group, whose
``exp_avg`` is the whole partition. DeepSpeed records where each parameter lies in it, and the names come
from those records only (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, utils/zero_to_fp32.py):

- ``param_slice_mappings`` (ZeRO-1/2 and the bf16 optimizer): per group, name -> ``fragment_address(numel,
  start)`` inside this rank's partition;
- else ``param_shapes`` of the tag's model states file (one OrderedDict name -> shape per group, in flat
  order): ZeRO-1/2 on one rank holds the parameters back to back in each group; ZeRO-3 holds each
  parameter's ``ceil(numel / W)`` piece of every rank back to back, across its groups in turn.

Each parameter's state is a view into the flat tensors (same storage, an offset, its own shape when the
rank holds it whole): its values read as torch's ``flat[start:start + numel].view(shape)`` would give them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ckptview.core.checkpoint import Node, PathKey, TensorInfo
from ckptview.core.read.pickle.vm import StubObject
from ckptview.core.units import plural

MASTER_KEYS = ("single_partition_of_fp32_groups", "fp32_flat_groups")  # ZeRO-1/2 (and bf16), ZeRO-3
MASTER_WEIGHT = "fp32"  # DeepSpeed's own name for a parameter's fp32 master weight (checkpoint/constants.py)
_RANK = re.compile(r"zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")

Shape = tuple[int, ...]


@dataclass
class Fragment:
    """One parameter's state in this rank's partition: views of the flat tensors, named."""

    name: str
    group: int
    state: list[Node]  # the optimizer's entries (``step``, ``exp_avg``, ...) and ``fp32``, the master weight
    piece: tuple[int, int] | None = None  # (first element, count) of the flattened parameter, when a piece
    param: Node | None = None  # the module's tensor of that name in the model states file (not a placeholder)


@dataclass
class ZeroLayout:
    """Where the parameters lie in one ZeRO optimizer file's flat partitions."""

    stage: int | None
    rank: int
    world: int
    fragments: list[Fragment] = field(default_factory=list)
    note: str = ""


def _child(node: Node | None, key: PathKey) -> Node | None:
    if node is None:
        return None
    return next((c for c in node.children if c.key == key), None)


def _int(node: Node | None) -> int | None:
    """An int held by a value node (or DeepSpeed's ZeroStageEnum(2), an int subclass recorded by name)."""
    if node is None or node.kind not in ("value", "object"):
        return None
    value = node.value
    if isinstance(value, StubObject) and len(value.args) == 1:
        value = value.args[0]
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _shape(node: Node) -> Shape | None:
    """A torch.Size (a tuple value, or a tuple node of ints)."""
    if node.kind == "value" and isinstance(node.value, tuple) and all(type(d) is int for d in node.value):
        return tuple(node.value)
    if node.kind in ("tuple", "list") and all(type(c.value) is int for c in node.children):
        return tuple(c.value for c in node.children)
    return None


def container(opt_node: Node) -> Node | None:
    """The ZeRO optimizer dict around torch's optimizer state dict ``opt_node``, or None when it is not one."""
    parent = opt_node.parent
    if parent is None or opt_node.key not in ("base_optimizer_state", "optimizer_state_dict"):
        return None
    return parent if any(_child(parent, key) is not None for key in MASTER_KEYS) else None


def _file_entry(node: Node) -> Node:
    """The top-level entry above `node` (a training folder's file), or the root."""
    while node.parent is not None and node.parent.parent is not None:
        node = node.parent
    return node


def _model_states_names(rank: int, mp_rank: int) -> tuple[str, str]:
    """The names DeepSpeed gives the tag's model states file: ZeRO-3's of the same rank, else the one file."""
    return f"zero_pp_rank_{rank}_mp_rank_{mp_rank:02d}_model_states.pt", f"mp_rank_{mp_rank:02d}_model_states.pt"


def model_states_beside(file_name: str) -> tuple[str, ...]:
    """The model states files that may sit beside a ZeRO optimizer file named `file_name`, the likeliest first
    (() when the name is no ZeRO optimizer file's)."""
    found = _RANK.search(file_name)
    return _model_states_names(int(found.group(1)), int(found.group(2))) if found else ()


def _model_states(entry: Node, rank: int, mp_rank: int) -> Node | None:
    """The tag's model states file beside the optimizer file in a step folder (ZeRO-3: the same rank's)."""
    root = entry.parent
    if root is None:
        return None
    for name in _model_states_names(rank, mp_rank):
        found = _child(root, name)
        if found is not None and found.kind in ("dict", "object"):
            return found
    return None


def _param_shapes(model_states: Node | None) -> list[list[tuple[str, Shape]]] | None:
    groups = _child(model_states, "param_shapes")
    if groups is None or groups.kind not in ("list", "tuple"):
        return None
    out = []
    for group in groups.children:
        shapes = [(str(c.key), _shape(c)) for c in group.children]
        if any(s is None for _, s in shapes):
            return None
        out.append([(n, s) for n, s in shapes if s is not None])
    return out


def parameter_shapes(model_states: Node | None) -> dict[str, Shape]:
    """Name -> shape of every parameter a model states file records (``param_shapes`` and, for frozen
    ones, ``frozen_param_shapes``): ZeRO-3's ``module`` holds empty placeholders for them."""
    out = {name: shape for group in _param_shapes(model_states) or [] for name, shape in group}
    frozen = _child(model_states, "frozen_param_shapes")
    for c in frozen.children if frozen is not None else ():
        shape = _shape(c)
        if shape is not None:
            out[str(c.key)] = shape
    return out


def _flat(node: Node | None) -> TensorInfo | None:
    """A flat 1-D contiguous tensor."""
    if node is None or node.kind != "tensor" or node.tensor is None:
        return None
    info = node.tensor
    ok = len(info.shape) == 1 and info.stride in ((1,), (0,)) and not info.broken and info.layout == "strided"
    return info if ok else None


def _view(source: Node, info: TensorInfo, start: int, count: int, shape: Shape, key: PathKey) -> Node | None:
    if start < 0 or count <= 0 or start + count > info.numel or math.prod(shape) != count:
        return None
    stride = []
    step = 1
    for size in reversed(shape):
        stride.append(step)
        step *= max(size, 1)
    view = TensorInfo(info.dtype, shape, tuple(reversed(stride)), info.offset + start, info.storage,
                      requires_grad=info.requires_grad)
    node = Node(key=key, kind="tensor", type_name=source.type_name, tensor=view)
    node.parent = source.parent  # where the flat tensor sits; not one of that container's children
    return node


def layout(opt_node: Node, flat_states: list[tuple[int | None, Node | None]], file_name: str = "",
           beside: tuple[str, Node] | None = None) -> ZeroLayout | None:
    """The parameters of a ZeRO optimizer's flat partitions (``flat_states``: (group, state node) of each of
    torch's flat parameters), or None when ``opt_node`` is no ZeRO optimizer's. ``beside``: (file name, tree)
    of the model states file beside an optimizer file opened alone (`model_states_beside`)."""
    zero = container(opt_node)
    if zero is None:
        return None
    entry = _file_entry(zero)
    found = _RANK.search(str(entry.key) if entry.parent is not None else file_name) or _RANK.search(file_name)
    rank, mp_rank = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    counts = _child(zero, "partition_count")
    world = max([_int(c) or 1 for c in counts.children] or [1]) if counts is not None and counts.children else (
        _int(counts) or 1)
    stage = _int(_child(zero, "zero_stage"))
    masters_node = next(c for key in MASTER_KEYS if (c := _child(zero, key)) is not None)
    masters = list(masters_node.children) if masters_node.kind in ("list", "tuple") else []
    out = ZeroLayout(stage, rank, world)
    what = f"DeepSpeed ZeRO stage {stage}" if stage is not None else "DeepSpeed's bf16 optimizer"
    where = f"rank {rank} of {world}"
    states: dict[int, Node | None] = {}
    for group, state in flat_states:
        if group is not None and group not in states:
            states[group] = state
    model_states = _model_states(entry, rank, mp_rank) if entry.parent is not None else None
    states_name = str(model_states.key) if model_states is not None else ""
    if model_states is None and beside is not None:
        states_name, model_states = beside
    shapes = _param_shapes(model_states)
    module = _child(model_states, "module")
    slices = _child(zero, "param_slice_mappings")
    if slices is not None and slices.kind in ("list", "tuple") and slices.children:
        _from_slices(out, slices, masters, states, shapes)
        how = "its param_slice_mappings"
    elif shapes is not None and (stage == 3 or world == 1):
        _from_shapes(out, shapes, masters, states, stage == 3)
        how = f"param_shapes of {states_name or 'the model states'}"
    else:
        out.note = (f"{what} ({where}): flat partitions not mapped to names (no param_slice_mappings in the file"
                    + ("" if shapes is not None else ", no model states file with param_shapes beside it") + ")")
        return out
    for fragment in out.fragments:
        tensor = _child(module, fragment.name)
        if tensor is not None and tensor.tensor is not None and fragment.piece is None and tensor.tensor.numel:
            fragment.param = tensor
    pieces = sum(1 for f in out.fragments if f.piece is not None)
    out.note = (f"{what} ({where}): flat partitions named by {how}"
                + (f"; {pieces} of {plural(len(out.fragments), 'parameter')} are pieces (the rest is on other ranks)"
                   if pieces else ""))
    return out


def _state_views(state: Node | None, master: Node | None, start: int, count: int, shape: Shape,
                 flat_numel: int) -> list[Node]:
    """The optimizer's entries of one parameter: a view of each flat state tensor, the shared ones as they are."""
    out: list[Node] = []
    for entry in state.children if state is not None else ():
        info = _flat(entry)
        if info is not None and info.numel == flat_numel:
            view = _view(entry, info, start, count, shape, entry.key)
            if view is not None:
                out.append(view)
        elif entry.kind != "tensor" or (entry.tensor is not None and entry.tensor.numel == 1):
            shared = Node(key=entry.key, kind=entry.kind, type_name=entry.type_name, tensor=entry.tensor,
                          value=entry.value)
            shared.parent = entry.parent
            out.append(shared)
    info = _flat(master)
    if master is not None and info is not None:
        view = _view(master, info, start, count, shape, MASTER_WEIGHT)
        if view is not None:
            out.append(view)
    return out


def _flat_numel(state: Node | None, master: Node | None) -> int:
    """The partition's length: its state tensors keep the padding the master weights drop."""
    for entry in state.children if state is not None else ():
        info = _flat(entry)
        if info is not None and info.numel > 1:
            return info.numel
    info = _flat(master)
    return info.numel if info is not None else 0


def _from_slices(out: ZeroLayout, slices: Node, masters: list[Node], states: dict[int, Node | None],
                 shapes: list[list[tuple[str, Shape]]] | None) -> None:
    for g, group in enumerate(slices.children):
        master = masters[g] if g < len(masters) else None
        state = states.get(g)
        flat_numel = _flat_numel(state, master)
        whole = dict(shapes[g]) if shapes is not None and g < len(shapes) else {}
        offsets: dict[str, int] = {}
        at = 0
        for name, dims in (shapes[g] if shapes is not None and g < len(shapes) else []):
            offsets[name] = at
            at += math.prod(dims)
        for item in group.children:
            start, count = _int(_child(item, "start")), _int(_child(item, "numel"))
            if start is None or count is None:
                continue
            name = str(item.key)
            known = whole.get(name)
            shape: Shape = known if known is not None and math.prod(known) == count else (count,)
            piece = None
            if (known is None or shape != known) and name in offsets:  # where the piece starts in the parameter
                piece = (out.rank * flat_numel + start - offsets[name], count)
            views = _state_views(state, master, start, count, shape, flat_numel)
            out.fragments.append(Fragment(name, g, views, piece))


def _from_shapes(out: ZeroLayout, shapes: list[list[tuple[str, Shape]]], masters: list[Node],
                 states: dict[int, Node | None], stage3: bool) -> None:
    if not stage3:  # one rank: every group's parameters back to back
        for g, group in enumerate(shapes):
            master = masters[g] if g < len(masters) else None
            state = states.get(g)
            flat_numel, at = _flat_numel(state, master), 0
            for name, shape in group:
                count = math.prod(shape)
                out.fragments.append(Fragment(name, g, _state_views(state, master, at, count, shape, flat_numel)))
                at += count
        return
    # ZeRO-3: each parameter's ceil(numel / W) piece of this rank, back to back across the groups in turn
    lengths = [_flat_numel(states.get(g), m) for g, m in enumerate(masters)]
    g, at = 0, 0
    for name, shape in (item for group in shapes for item in group):
        numel = math.prod(shape)
        piece = math.ceil(numel / out.world)
        while g < len(lengths) and at + piece > lengths[g]:
            g, at = g + 1, 0
        if g >= len(lengths):
            break
        first = out.rank * piece
        count = max(0, min(piece, numel - first))
        if count:
            whole = out.world == 1
            views = _state_views(states.get(g), masters[g], at, count, shape if whole else (count,), lengths[g])
            out.fragments.append(Fragment(name, g, views, None if whole else (first, count)))
        at += piece

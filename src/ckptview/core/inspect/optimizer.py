"""Recognise optimizer state dicts and map their entries to the model's parameter names (Qt-free, no torch).

An optimizer state dict is ``{"state": {id: {...}}, "param_groups": [{..., "params": [id, ...]}]}``.
The ids are positions (``0..N-1``, torch >= 0.4), raw Python object ids (older torch) or names (FSDP's
full optimizer state); whatever they are, their order in ``param_groups`` (groups concatenated) follows
the parameters the optimizer was built with, which usually follow ``model.named_parameters()``.

The mapping aligns that ordered list with the floating-point tensors of the model state dict found next
to the optimizer (same file), skipping known buffers (``running_mean``, ``running_var``,
``num_batches_tracked``, ...). Entries the optimizer did not receive (a frozen layer, an unknown buffer)
may be skipped too; the shapes of the state tensors (``exp_avg`` has the parameter's shape) decide which.
The result says how sure it is:

- ``exact``: one alignment only, and every parameter with state has that state's shape;
- ``by-order``: an alignment that fits every known shape, but others would fit too (or nothing to check);
- ``guessed``: the model file stores names sorted (safetensors, a Hub index), so the model's parameter
  order is not in it; each parameter whose state shape another model tensor shares is named by a guess of
  that order and flagged ``guessed`` (the name every view shows ends in "(guessed)"). Parameters of a shape
  no other tensor has are named for sure;
- ``none``: no model state dict in the file, or no alignment fits the shapes (names are then null).

Metadata only: finding and mapping reads no tensor bytes; :func:`optimizers_json` reads the 0-d ``step``
tensors (a few bytes each). The heavy figures (norms, effective step sizes) are a generator,
:func:`iter_figures`, that the GUI runs in a worker.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ckptview.core import dtypes
from ckptview.core.checkpoint import Checkpoint, Node, PathKey, TensorInfo
from ckptview.core.errors import CheckpointError
from ckptview.core.inspect import zero
from ckptview.core.inspect.hf_order import OrderRequest, ParamOrders, order_request
from ckptview.core.inspect.optimizer_align import align_groups
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.formats.hf_sharded import HUB_FORMATS, weight_sets
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.pickle.to_tree import short_repr
from ckptview.core.read.values.reading import read_scalar, read_values
from ckptview.core.run.declared_sizes import Listing
from ckptview.core.units import plural

# Buffers modules register under these names; they sit in the state dict but are never parameters.
KNOWN_BUFFERS = frozenset({"running_mean", "running_var", "num_batches_tracked", "inv_freq", "position_ids",
                           "masked_bias"})
# Where the model's weights sit beside an optimizer, most specific first.
MODEL_KEYS = ("model_state_dict", "model_state", "state_dict", "model", "module", "net", "network",
              "model_dict", "weights")
# Per-parameter state that has the parameter's own shape.
SHAPED_STATE = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "momentum_buffer", "square_avg",
                "grad_avg", "acc_delta", "sum", "prev", "step_size", "ax")
# The optimizer families told apart by their state keys (first match wins), documented in the README.
KINDS = ("adam-like", "lion", "sgd-momentum", "sgd", "rmsprop", "adagrad", "adadelta", "adafactor", "asgd",
         "rprop", "lbfgs", "unknown")
_DP_CELL_LIMIT = 4_000_000  # beyond this the alignment is greedy (no uniqueness proof): "by-order" at best

Shape = tuple[int, ...]


@dataclass(eq=False)
class ParamState:
    """One parameter as the optimizer knows it: its id, group, state entries and (when mapped) its name."""

    id: PathKey
    group: int | None
    index: int  # position in the concatenated param_groups lists
    node: Node | None  # the state[id] container; None when the parameter has no state
    name: str | None = None  # parameter name relative to the model state dict ("0.weight")
    param: Node | None = None  # the model's tensor node
    guessed: bool = False  # the name rests on a guessed model order (another tensor of its shape could be it)
    piece: tuple[int, int] | None = None  # ZeRO: (first element, count) of the flattened parameter this rank holds

    @property
    def display_name(self) -> str | None:
        """The name as every view shows it: ``"... (guessed)"`` when the order it rests on was guessed."""
        if self.name is None:
            return None
        return f"{self.name} (guessed)" if self.guessed else self.name

    def entries(self) -> list[Node]:
        """The state entries (``step``, ``exp_avg``, ...) in file order."""
        return list(self.node.children) if self.node is not None else []

    def entry(self, key: str) -> Node | None:
        """The state entry called ``key``, if present."""
        return next((c for c in self.entries() if c.key == key), None)

    def state_tensors(self) -> list[tuple[str, TensorInfo]]:
        """(key, tensor) of the state tensors other than the step counter."""
        return [(str(c.key), c.tensor) for c in self.entries()
                if c.kind == "tensor" and c.tensor is not None and c.key != "step"]

    def shape_hint(self) -> Shape | None:
        """The parameter's shape as the state tells it, or None when the state cannot tell."""
        tensors = dict(self.state_tensors())
        for key in SHAPED_STATE:
            if key in tensors:
                return tensors[key].shape
        shapes = {t.shape for t in tensors.values() if t.shape}
        return shapes.pop() if len(shapes) == 1 else None


@dataclass(eq=False)
class OptimizerState:
    """An optimizer state dict found in a checkpoint, with its parameters mapped to names."""

    node: Node
    kind: str
    mapping: str  # exact | by-order | none
    groups: list[dict[str, Any]]  # hyper-parameters of each param group (without "params")
    params: list[ParamState]
    model: Node | None = None  # the model state dict the names come from
    id_kind: str = "index"  # index | object-id | name
    note: str = ""  # why the mapping is what it is, for a person
    # The model's own order is not known yet, and the library its config names can tell it (`hf_order.learn`,
    # seconds in a child): the names are guessed until it is learned and handed down in the orders.
    order_pending: OrderRequest | None = None

    @property
    def path(self) -> tuple[PathKey, ...]:
        """Where the optimizer sits in the checkpoint tree."""
        return self.node.path

    @property
    def label(self) -> str:
        """The optimizer's contract name ("optimizer_state_dict", "optimizer_states.0")."""
        return self.node.name or "(root)"


# ---------------------------------------------------------------------------------------------------
# Plain values out of nodes


def scalar_value(info: TensorInfo) -> float | int | bool | None:
    """The value of a one-element tensor (reads its few bytes), or None when unreadable."""
    if info.numel != 1:
        return None
    try:
        value = read_scalar(info)  # its bytes, without NumPy: `info --json` must not pay NumPy's import
        if value is None:  # a dtype struct does not read (complex, float8, quantized): NumPy's, lazily
            import numpy as np

            value = np.asarray(read_values(info)).reshape(-1)[0]
    except (CheckpointError, ValueError, TypeError):
        return None
    if dtypes.is_complex(info.dtype):
        return None
    if info.dtype == "bool":
        return bool(value)
    if dtypes.is_floating(info.dtype):
        return float(value)
    return int(value)


def plain(node: Node, read_scalars: bool = False, depth: int = 0) -> Any:
    """A JSON-friendly copy of a small node: values as they are, tensors as shape/dtype (or read if 1 elem)."""
    if node.kind == "tensor" and node.tensor is not None:
        info = node.tensor
        if read_scalars and info.numel == 1 and not info.broken:
            value = scalar_value(info)
            if value is not None:
                return value
        return {"shape": list(info.shape), "dtype": info.dtype}
    if node.kind == "value":
        value = node.value
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return short_repr(value, 200)
    if depth > 4:
        return f"<{node.type_name}>"
    if node.kind in ("list", "tuple", "set"):
        return [plain(c, read_scalars, depth + 1) for c in node.children]
    return {str(c.key): plain(c, read_scalars, depth + 1) for c in node.children}


def _number(value: float | None) -> float | None:
    """Whole floats as ints (a step counter saved as a float tensor is still a count)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def param_step(ps: ParamState) -> int | float | None:
    """The parameter's step counter (reads a 0-d tensor), or None when it has none."""
    node = ps.entry("step")
    if node is None:
        return None
    if node.kind == "tensor" and node.tensor is not None:
        return _number(scalar_value(node.tensor))
    return _number(node.value) if isinstance(node.value, (int, float)) else None


# ---------------------------------------------------------------------------------------------------
# Recognition


def _child(node: Node, key: PathKey) -> Node | None:
    return next((c for c in node.children if c.key == key), None)


def is_optimizer_node(node: Node) -> bool:
    """True for ``{"state": dict, "param_groups": [dict, ...]}``."""
    if node.kind not in ("dict", "object"):
        return False
    state, groups = _child(node, "state"), _child(node, "param_groups")
    return (state is not None and state.kind in ("dict", "object")
            and groups is not None and groups.kind in ("list", "tuple")
            and all(g.kind in ("dict", "object") for g in groups.children))


def classify(params: list[ParamState], groups: list[dict[str, Any]]) -> str:
    """The optimizer family from its state keys (group hyper-parameters when nothing was stepped)."""
    keys: set[str] = set()
    momentum_tensor = False
    for ps in params:
        for entry in ps.entries():
            keys.add(str(entry.key))
            if entry.key == "momentum_buffer" and entry.kind == "tensor":
                momentum_tensor = True
    if "acc_delta" in keys:
        return "adadelta"
    if "square_avg" in keys:
        return "rmsprop"
    if "exp_avg_sq" in keys or "exp_inf" in keys:
        return "adam-like"
    if {"row_var", "col_var", "variance"} & keys:
        return "adafactor"
    if "sum" in keys:
        return "adagrad"
    if "momentum_buffer" in keys:
        return "sgd-momentum" if momentum_tensor else "sgd"
    if "exp_avg" in keys:
        return "lion"  # first moment only, no second: Lion (and kin)
    if {"eta", "mu", "ax"} & keys:
        return "asgd"
    if "prev" in keys and "step_size" in keys:
        return "rprop"
    if {"old_dirs", "func_evals", "n_iter"} & keys:
        return "lbfgs"
    return _classify_by_groups(groups)


def _classify_by_groups(groups: list[dict[str, Any]]) -> str:
    """Fallback for an optimizer that has no state yet: its group hyper-parameters tell the family."""
    g = groups[0] if groups else {}
    if "rho" in g:
        return "adadelta"
    if "centered" in g and "alpha" in g:
        return "rmsprop"
    if "lr_decay" in g:
        return "adagrad"
    if "dampening" in g:
        return "sgd-momentum" if g.get("momentum") else "sgd"
    if "betas" in g:
        return "adam-like"
    return "unknown"


def find_optimizers(ckpt: Checkpoint | Node, orders: ParamOrders | None = None) -> list[OptimizerState]:
    """Every optimizer state dict in the checkpoint, mapped to parameter names (metadata only).

    `orders`: the parameter orders learned before (the caller's cache). A model file that stores names
    sorted (safetensors) loses the model's order; a Trainer folder's config.json may name a library model
    whose order tells the names for sure: from `orders` when it was learned, else the names are guessed
    (marked) and `order_pending` says what `hf_order.learn` would ask. Nothing here waits for a library.
    """
    root = ckpt.root if isinstance(ckpt, Checkpoint) else ckpt
    found = [n for n in root.walk() if is_optimizer_node(n)]
    nodes = [n for n in found if not any(a in found for a in _ancestors(n))]
    # A training folder's config.json may name an architecture an installed transformers defines.
    folder = ckpt.path if isinstance(ckpt, Checkpoint) and ckpt.format == "training-folder" else None
    file_name = os.path.basename(ckpt.path) if isinstance(ckpt, Checkpoint) else ""
    beside = _deepspeed_beside(ckpt) if isinstance(ckpt, Checkpoint) and nodes else None
    found_opts = [_build(n, set(map(id, nodes)), folder, file_name, beside, orders) for n in nodes]
    if isinstance(ckpt, Checkpoint) and any(o.model is None for o in found_opts):
        _name_by_model_beside(ckpt, [o for o in found_opts if o.model is None], orders)
    return found_opts


def pending_orders(ckpt: Checkpoint | Node, orders: ParamOrders | None = None) -> list[OrderRequest]:
    """The parameter orders a library could tell and `orders` does not know yet (one per key), for a front
    end to learn (`ParamOrderCache.learn`) and then name the optimizers again."""
    pending: dict[str, OrderRequest] = {}
    for opt in find_optimizers(ckpt, orders):
        if opt.order_pending is not None:
            pending.setdefault(opt.order_pending.key, opt.order_pending)
    return list(pending.values())


def _name_by_model_beside(ckpt: Checkpoint, optimizers: list[OptimizerState],
                          orders: ParamOrders | None = None) -> None:
    """An optimizer file opened alone (a training folder's ``optimizer.bin``): the model file beside it, the
    one of the same number (``optimizer_1.bin``: ``model_1.safetensors``), names its parameters."""
    beside = _model_beside(ckpt)
    if beside is None:
        return
    label, model = beside
    folder = os.path.dirname(os.path.abspath(ckpt.path))
    for opt in optimizers:
        if model is None:  # the model file is there but does not open: say which, and how to see it whole
            opt.note = (f"no model state dict in this file; the model beside it ({label}) did not open: open "
                        f"the folder {folder} to map them")
            continue
        opt.model = model
        _map(opt, folder, orders)
        opt.note = f"names from the model beside this file ({label}): {opt.note}"


def _model_beside(ckpt: Checkpoint) -> tuple[str, Node | None] | None:
    """(file name, its tree) of the model beside a standalone optimizer file, read once per checkpoint (the
    window's panels ask again: the open's worker has read it first); None when there is none."""
    key = "_model_beside"
    if key in ckpt.metadata:
        cached: tuple[str, Node | None] | None = ckpt.metadata[key]
        return cached
    found = model_beside(ckpt.path)
    result = None if found is None else (found, _open_beside(ckpt, found))
    ckpt.metadata[key] = result
    return result


def _deepspeed_beside(ckpt: Checkpoint) -> tuple[str, Node] | None:
    """(file name, tree) of the model states file beside a ZeRO optimizer file opened alone (its
    ``param_shapes`` name the flat partitions), read once per checkpoint; None when there is none."""
    key = "_deepspeed_beside"
    if key in ckpt.metadata:
        cached: tuple[str, Node] | None = ckpt.metadata[key]
        return cached
    result = None
    if ckpt.format != "training-folder":  # a step folder holds its model states file itself
        for name in zero.model_states_beside(os.path.basename(ckpt.path)):
            tree = _open_beside(ckpt, name)
            if tree is not None:
                result = (name, tree)
                break
    ckpt.metadata[key] = result
    return result


def _open_beside(ckpt: Checkpoint, name: str) -> Node | None:
    """The tree of the file `name` beside the checkpoint's file (metadata only), None when it is not there or
    does not open. It is closed at once: its names and shapes stay, its values are read from its own tab."""
    path = os.path.join(os.path.dirname(ckpt.path), name)
    if locate(ckpt.path).is_remote or not os.path.isfile(path):
        return None
    try:
        beside = open_checkpoint(path)  # a header, an index or a pickle's records
    except CheckpointError:
        return None
    beside.close()
    return beside.root


def model_beside(path: str) -> str | None:
    """The model weight file in the same folder as a standalone optimizer file (a training folder), or None:
    the one of the optimizer's number (accelerate's ``optimizer_1.bin`` steps ``model_1.safetensors``)."""
    if not path or os.path.isdir(path):
        return None
    try:
        sets = [s for s in weight_sets(os.path.dirname(os.path.abspath(path))) if s.variant is None]
    except OSError:
        return None
    if not sets:
        return None
    mine = _file_number(os.path.basename(path))
    same = [s.label for s in sets if (s.index is not None or len(s.files) == 1) and _file_number(s.label) == mine]
    if not same and mine is not None:  # accelerate's pytorch_model_1.bin: no Hub name, so no weight set
        try:
            names = sorted(os.listdir(os.path.dirname(os.path.abspath(path))))
        except OSError:
            names = []
        same = [n for n in names if "model" in n and n.endswith((".bin", ".safetensors", ".pt", ".pth"))
                and _file_number(n) == mine]
    return (same or [sets[0].label])[0]


def _file_number(name: PathKey) -> str | None:
    """The number a training file's name carries before its extension (``optimizer_1.bin``,
    ``model_1.safetensors``, ``pytorch_model_1.bin``), or None (``model.safetensors``)."""
    found = _NUMBERED.search(name) if isinstance(name, str) else None
    return found.group(1) if found else None


def _ancestors(node: Node) -> Iterable[Node]:
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def _build(node: Node, optimizer_ids: set[int], folder: str | None = None, file_name: str = "",
           beside: tuple[str, Node] | None = None, orders: ParamOrders | None = None) -> OptimizerState:
    state = _child(node, "state")
    groups_node = _child(node, "param_groups")
    assert state is not None and groups_node is not None
    by_id = {c.key: c for c in state.children}
    params: list[ParamState] = []
    groups: list[dict[str, Any]] = []
    for g, group in enumerate(groups_node.children):
        ids = _child(group, "params")
        hyper = {str(c.key): plain(c, read_scalars=True) for c in group.children if c.key != "params"}
        members = [] if ids is None else [c.value if c.kind == "value" else c.key for c in ids.children]
        hyper["num_params"] = len(members)
        groups.append(hyper)
        for pid in members:
            key = pid if isinstance(pid, (int, str)) else str(pid)
            entry = by_id.pop(key, None)
            if entry is None and isinstance(key, int):  # DCP stores int state keys as str path components
                entry = by_id.pop(str(key), None)
            params.append(ParamState(key, g, len(params), entry))
    # State without a group (a hand-edited file): still listed, never mapped.
    for key, entry in by_id.items():
        params.append(ParamState(key, None, len(params), entry))
    for ps in params:  # {} is "no state" too
        if ps.node is not None and not ps.node.children:
            ps.node = None
    opt = OptimizerState(node, classify(params, groups), "none", groups, params)
    opt.id_kind = _id_kind([p.id for p in params])
    partitions = zero.layout(node, [(p.group, p.node) for p in params], file_name, beside)
    if partitions is not None:  # DeepSpeed ZeRO: flat partitions, named by DeepSpeed's own records
        _map_zero(opt, partitions)
        return opt
    opt.model = find_model(node, optimizer_ids)
    _map(opt, folder, orders)
    return opt


def _map_zero(opt: OptimizerState, partitions: zero.ZeroLayout) -> None:
    """One named parameter per fragment of the partitions (its state views of the flat tensors)."""
    opt.note = partitions.note
    if not partitions.fragments:
        return
    params: list[ParamState] = []
    for fragment in partitions.fragments:
        holder = Node(key=fragment.name, kind="dict", type_name="zero-fragment")
        holder.children = list(fragment.state)  # views: their parent stays where the flat tensors sit
        params.append(ParamState(fragment.name, fragment.group, len(params), holder, name=fragment.name,
                                 param=fragment.param, piece=fragment.piece))
    opt.params, opt.id_kind, opt.mapping = params, "name", "exact"


def _id_kind(ids: list[PathKey]) -> str:
    if any(isinstance(i, str) for i in ids):
        return "name"
    ints = [i for i in ids if isinstance(i, int)]
    return "index" if sorted(ints) == list(range(len(ints))) else "object-id"


# ---------------------------------------------------------------------------------------------------
# The model beside the optimizer


@dataclass(frozen=True)
class ModelEntry:
    """One tensor of the model state dict: its name relative to the model and its node."""

    name: str
    node: Node

    @property
    def shape(self) -> Shape:
        assert self.node.tensor is not None
        return self.node.tensor.shape


def find_model(opt_node: Node, optimizer_ids: set[int] | None = None) -> Node | None:
    """The model state dict that sits closest to the optimizer (sibling keys, then up the tree)."""
    skip = optimizer_ids or {id(opt_node)}
    child, anc = opt_node, opt_node.parent
    while anc is not None:
        if anc.kind in ("dict", "object"):
            siblings = [c for c in anc.children if c is not child and not _holds_optimizer(c, skip)]
            by_key = {c.key: c for c in siblings}
            for key in MODEL_KEYS:
                if key in by_key and model_entries(by_key[key]):
                    return by_key[key]
            named = [c for c in siblings if isinstance(c.key, str) and "model" in c.key.lower()
                     and c.kind in ("dict", "object") and model_entries(c)]
            if named:
                return _same_number(child.key, named)
            if sum(1 for c in anc.children if c.kind == "tensor") >= 2:
                return anc  # weights flat beside the optimizer: {"fc.weight": ..., "optimizer": {...}}
        child, anc = anc, anc.parent
    return None


_NUMBERED = re.compile(r"_(\d+)(?:\.[A-Za-z0-9]+)+$")


def _same_number(key: PathKey, models: list[Node]) -> Node:
    """The model of the optimizer's number: accelerate saves `optimizer_1.bin` for `model_1.safetensors`
    (no number: the first), else the first model."""
    mine = _file_number(key)
    return next((m for m in models if _file_number(m.key) == mine), models[0])


def _holds_optimizer(node: Node, optimizer_ids: set[int]) -> bool:
    if node.kind not in ("dict", "object", "list", "tuple"):
        return False
    return any(id(n) in optimizer_ids for n in node.walk())


def model_entries(model: Node) -> list[ModelEntry]:
    """The model's tensors that may be parameters, in file order (buffers and integer tensors left out)."""
    out: list[ModelEntry] = []
    flat_root = any(is_optimizer_node(c) for c in model.children) or model.parent is None
    stack: list[tuple[Node, str]] = [(c, "") for c in reversed(model.children)]
    while stack:
        node, prefix = stack.pop()
        name = f"{prefix}{node.key}"
        if node.kind == "tensor" and node.tensor is not None:
            info = node.tensor
            last = name.rsplit(".", 1)[-1]
            if (dtypes.is_floating(info.dtype) or dtypes.is_complex(info.dtype)) and last not in KNOWN_BUFFERS:
                out.append(ModelEntry(name, node))
        elif node.kind in ("dict", "object") and not flat_root and not is_optimizer_node(node):
            stack.extend((c, f"{name}.") for c in reversed(node.children))
    if any(e.node.tensor is not None and e.node.tensor.is_parameter for e in out):
        out = [e for e in out if e.node.tensor is not None and e.node.tensor.is_parameter]  # a pickled module
    return out


# ---------------------------------------------------------------------------------------------------
# Alignment


def align(hints: list[Shape | None], shapes: list[Shape]) -> tuple[list[int] | None, bool]:
    """Map params (shape hints, None = unknown) in order onto entries (shapes) in order, skipping entries.

    Returns (entry index per param, or None when no monotone alignment fits; whether it is the only one).
    Where several fit, each parameter goes to the *latest* entry that fits: the usual reason for skipping
    a model tensor is a frozen layer left out of the optimizer, and frozen layers are usually the first
    ones (a pretrained backbone), so skipped entries are put first.
    """
    n, m = len(hints), len(shapes)
    picked, unique = _align_leftmost(hints[::-1], shapes[::-1])
    if picked is None:
        return None, False
    return [m - 1 - j for j in reversed(picked)], unique and n <= m


def _align_leftmost(hints: list[Shape | None], shapes: list[Shape]) -> tuple[list[int] | None, bool]:
    n, m = len(hints), len(shapes)
    slack = m - n
    if slack < 0:
        return None, False
    if n == 0:
        return [], True

    def fits(i: int, j: int) -> bool:
        return hints[i] is None or hints[i] == shapes[j]

    if slack == 0:
        return (list(range(n)), True) if all(fits(i, i) for i in range(n)) else (None, False)
    if n * (slack + 1) > _DP_CELL_LIMIT:
        return _greedy(hints, shapes), False
    # ways[i][d]: alignments of params i.. when param i lands at entry >= i + d (capped at 2).
    ways = [[0] * (slack + 2) for _ in range(n + 1)]
    ways[n] = [1] * (slack + 1) + [0]
    for i in range(n - 1, -1, -1):
        row, below = ways[i], ways[i + 1]
        for d in range(slack, -1, -1):
            total = row[d + 1] + (below[d] if fits(i, i + d) else 0)
            row[d] = 2 if total > 2 else total
    if ways[0][0] == 0:
        return None, False
    out, d = [], 0
    for i in range(n):
        while not (fits(i, i + d) and ways[i + 1][d] > 0):
            d += 1
        out.append(i + d)
    return out, ways[0][0] == 1


def _greedy(hints: list[Shape | None], shapes: list[Shape]) -> list[int] | None:
    out, j = [], 0
    for i, hint in enumerate(hints):
        last = len(shapes) - (len(hints) - i)  # leave room for the params after this one
        while j <= last and hint is not None and shapes[j] != hint:
            j += 1
        if j > last:
            return None
        out.append(j)
        j += 1
    return out


def _map(opt: OptimizerState, folder: str | None = None, orders: ParamOrders | None = None) -> None:
    """Fill in names and the mapping confidence (`folder`: a training folder whose config.json may tell the
    model's parameter order through an installed transformers, when `orders` learned it before)."""
    entries = model_entries(opt.model) if opt.model is not None else []
    params = [p for p in opt.params if p.group is not None]
    if not entries:
        opt.note = "no model state dict found beside the optimizer"
        return
    if opt.id_kind == "name":
        _map_by_name(opt, entries)
        return
    guessed = order_lost(opt.model)
    library = ""
    if guessed:
        entries = guess_model_order(entries)
        request = order_request(folder, Listing.of(e.shape for e in entries)) if folder else None
        known = orders.known(request) if request is not None and orders is not None else None
        if known is not None and {e.name for e in entries} <= set(known):
            rank = {name: i for i, name in enumerate(known)}
            entries = sorted(entries, key=lambda e: rank[e.name])
            guessed = False
            library = request.describe() if request is not None else ""
        elif known is None and request is not None:
            opt.order_pending = request  # the library could tell: guessed (marked) until it is learned
    hints = [p.shape_hint() for p in params]
    shapes = [e.shape for e in entries]
    by_group: dict[int | None, list[int]] = {}
    for i, p in enumerate(params):
        by_group.setdefault(p.group, []).append(i)
    order = [i for members in by_group.values() for i in members]
    found = align_groups([[hints[i] for i in members] for members in by_group.values()], shapes)
    if found.picked is None and guessed:
        by_shape = match_by_shape(hints, shapes)
        if by_shape is not None:  # the guessed order was wrong somewhere: shapes alone still name them
            for p, j in zip(params, by_shape, strict=True):
                p.name, p.param = entries[j].name, entries[j].node
            unsure = _flag_guessed(params, hints, shapes)
            opt.mapping = "guessed" if unsure else "exact"
            opt.note = ("the model file lists names sorted, not in model order, and no guess of that order fits: "
                        "parameters matched by state shape only"
                        + (f"; {unsure} of {plural(len(params), 'name')} guessed (another tensor has the same shape)"
                           if unsure else ""))
            return
    if found.picked is None:
        model_name = opt.model.name if opt.model is not None and opt.model.name else "(root)"
        opt.note = (misfit(params, hints, entries, model_name) if found.complete
                    else f"no alignment found within {found.states} search states")
        return
    picked = [0] * len(params)
    for i, j in zip(order, found.picked, strict=True):
        picked[i] = j
    for p, j in zip(params, picked, strict=True):
        p.name, p.param = entries[j].name, entries[j].node
    verified = sum(1 for h in hints if h is not None)
    unsure = _flag_guessed(params, hints, shapes) if guessed else 0
    if guessed:
        opt.mapping = "guessed" if unsure else "exact"
    else:
        opt.mapping = "exact" if found.unique and verified else "by-order"
    how = ("parameters in model order" if len(by_group) <= 1
           else f"{len(by_group)} param groups aligned together in model order")
    if library:
        how += f" ({library})"
    skipped = len(entries) - len(params)
    doubt = ("" if found.unique else "; other alignments fit too" if found.complete
             else f"; not proven unique (search stopped after {found.states} states)")
    opt.note = (f"{how}; {verified} of {len(params)} checked by state shape"
                + (f"; {skipped} model tensors skipped as buffers/not optimized" if skipped else "")
                + doubt
                + (f"; the model file lists names sorted, not in model order: {unsure} of "
                   f"{plural(len(params), 'name')} guessed from the usual order of such names (marked guessed; the "
                   "others have a shape no other tensor has)" if unsure else ""))


def _flag_guessed(params: list[ParamState], hints: list[Shape | None], shapes: list[Shape]) -> int:
    """Mark the parameters whose name a guessed model order decides; returns how many.

    A parameter is named for sure when its state has a shape that exactly one model tensor has (and no other
    parameter's state has): whatever the order, that tensor is it. Any other name rests on the order.
    """
    tensors: dict[Shape, int] = {}
    for shape in shapes:
        tensors[shape] = tensors.get(shape, 0) + 1
    wanted: dict[Shape, int] = {}
    for hint in hints:
        if hint is not None:
            wanted[hint] = wanted.get(hint, 0) + 1
    count = 0
    for p, hint in zip(params, hints, strict=True):
        p.guessed = hint is None or tensors.get(hint, 0) != 1 or wanted.get(hint, 0) != 1
        count += p.guessed
    return count


# Where a submodule usually sits among its siblings, by its name: embeddings first (token, then position,
# then type), the body, final norms and poolers, heads last. Named siblings of a sorted file
# (safetensors) lose their definition order; this is the best guess.
_ROLES = (
    (0, ("word", "tok", "wte", "embed_tokens", "patch", "stem", "conv1", "bn1", "cls_token", "input")),
    (1, ("pos", "wpe")),
    (2, ("token_type", "embed", "embeddings")),
    (3, ("encoder", "backbone", "features", "transformer", "model", "base_model", "bert", "roberta", "gpt")),
    (4, ("layer", "block", "h", "stage", "decoder", "attn", "attention", "self_attn", "mlp", "ffn",
         "feed_forward")),
    (5, ("norm", "ln_f", "final", "pool", "neck")),
    (6, ("fc", "head", "lm_head", "classifier", "score", "out", "pred")),
)


def order_lost(model: Node | None) -> bool:
    """True when the model's tensors come from a file that stores names sorted (safetensors, a HF index)."""
    return model is not None and (model.type_name == "safetensors" or model.type_name in HUB_FORMATS)


def _role(name: str) -> int:
    low = name.lower()
    if low.startswith("token_type"):
        return 2
    for rank, words in _ROLES:  # short words ("h") must match whole: "head" is not a block list
        if any(low == w or (len(w) > 2 and low.startswith(w)) for w in words):
            return rank
    return 4


def guess_model_order(entries: list[ModelEntry]) -> list[ModelEntry]:
    """``named_parameters()`` order guessed from sorted names: a module's own tensors (weight before bias)
    before its submodules, numbered submodules by number, named ones by their usual role."""
    def key(entry: ModelEntry) -> list[tuple[int, int, str]]:
        parts = entry.name.split(".")
        out: list[tuple[int, int, str]] = []
        for depth, part in enumerate(parts):
            leaf = depth == len(parts) - 1
            if leaf:
                out.append((0, "bias" in part, part))
            elif part.isdigit():
                out.append((1, int(part), ""))
            else:
                out.append((1, (_role(part) + 1) << 20, part))
        return out

    return sorted(entries, key=key)


def match_by_shape(hints: list[Shape | None], shapes: list[Shape]) -> list[int] | None:
    """Each parameter on a distinct tensor of its state's shape, in order (unknown shapes take what is left,
    same number of dimensions first); None when the shapes do not suffice. For a model whose order is lost."""
    free: dict[Shape, list[int]] = {}
    for j, shape in enumerate(shapes):
        free.setdefault(shape, []).append(j)
    for queue in free.values():
        queue.reverse()  # pop() takes the earliest
    picked: list[int | None] = [None] * len(hints)
    for i, hint in enumerate(hints):
        if hint is not None:
            if not free.get(hint):
                return None
            picked[i] = free[hint].pop()
    used = {j for j in picked if j is not None}
    rest = [j for j in range(len(shapes)) if j not in used]
    for i, hint in enumerate(hints):
        if hint is None:
            if not rest:
                return None
            picked[i] = rest.pop(0)
    return [j for j in picked if j is not None]


def _fmt_shape(shape: Shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def misfit(params: list[ParamState], hints: list[Shape | None], entries: list[ModelEntry], model: str) -> str:
    """Why no alignment fits, for a person: too many parameters, a shape the model lacks, or the order."""
    if len(params) > len(entries):
        return (f"the optimizer has {plural(len(params), 'parameter')}, '{model}' only "
                f"{plural(len(entries), 'tensor')} that can be parameters")
    need: dict[Shape, int] = {}
    for h in hints:
        if h is not None:
            need[h] = need.get(h, 0) + 1
    have: dict[Shape, int] = {}
    for e in entries:
        have[e.shape] = have.get(e.shape, 0) + 1
    short = [(s, n, have.get(s, 0)) for s, n in need.items() if n > have.get(s, 0)]
    if short:
        s, n, found = short[0]
        more = f" (and {len(short) - 1} more shapes)" if len(short) > 1 else ""
        return (f"{plural(n, 'parameter')} {'has' if n == 1 else 'have'} state of shape {_fmt_shape(s)}, '{model}' "
                f"has {plural(found, 'tensor')} of that shape{more}")
    groups = sorted({p.group for p in params if p.group is not None})
    shapes = [e.shape for e in entries]
    for g in groups:
        members = [h for p, h in zip(params, hints, strict=True) if p.group == g]
        j, prev = 0, None
        for k, hint in enumerate(members):  # earliest placement: the first parameter left without a tensor
            while j < len(shapes) and hint is not None and shapes[j] != hint:
                j += 1
            if j >= len(shapes):
                where = f"after '{prev}' (where parameter {k - 1} lands)" if prev is not None else "at all"
                return (f"param group {g}: parameter {k} (state shape {_fmt_shape(hint or ())}) finds no tensor "
                        f"of that shape in '{model}' {where}")
            prev, j = entries[j].name, j + 1
    return (f"each param group fits '{model}' on its own, but no assignment gives every group distinct "
            "tensors in model order")


def _name_prefix(ids: list[str], names: list[str]) -> str:
    """The prefix the model's names carry over the optimizer's (``model.`` of a DCP subfolder), "" if none."""
    if not ids or all(i in names for i in ids):
        return ""
    counts: dict[str, int] = {}
    for name in names:
        for pid in ids:
            if name.endswith("." + pid):
                prefix = name[: len(name) - len(pid)]
                counts[prefix] = counts.get(prefix, 0) + 1
    return max(counts, key=lambda k: (counts[k], -len(k))) if counts else ""


def _map_by_name(opt: OptimizerState, entries: list[ModelEntry]) -> None:
    prefix = _name_prefix([str(p.id) for p in opt.params if p.group is not None], [e.name for e in entries])
    by_name = {e.name[len(prefix):]: e for e in entries if e.name.startswith(prefix)}
    ok = True
    for p in opt.params:
        p.name = str(p.id)
        entry = by_name.get(p.name)
        hint = p.shape_hint()
        if entry is None or (hint is not None and hint != entry.shape):
            ok = False
        else:
            p.param = entry.node
    opt.mapping = "exact" if ok else "none"
    opt.note = ("state keyed by parameter name" + (f" (the model's names carry the prefix '{prefix}')" if prefix else "")
                + ("" if ok else "; some names or shapes are not in the model"))


# ---------------------------------------------------------------------------------------------------
# info --json


def optimizers_json(ckpt: Checkpoint, orders: ParamOrders | None = None) -> list[dict[str, Any]]:
    """The ``"optimizers"`` list of ``info --json`` (reads only the 0-d step tensors)."""
    out = []
    for opt in find_optimizers(ckpt, orders):
        params = []
        for p in opt.params:
            state: dict[str, Any] = {}
            for entry in p.entries():
                key = str(entry.key)
                if key == "step":
                    state[key] = param_step(p)
                else:
                    state[key] = plain(entry)
            params.append({"id": p.id, "name": p.name, "name_guessed": p.guessed, "group": p.group,
                           "state": state})
        out.append({"path": list(opt.path), "kind": opt.kind, "mapping": opt.mapping, "note": opt.note,
                    "param_groups": opt.groups, "params": params})
    return out


# ---------------------------------------------------------------------------------------------------
# The tree: optimizer state named by parameter


def state_labels(ckpt: Checkpoint | Node, orders: ParamOrders | None = None) -> dict[int, str]:
    """id(node) -> display label for mapped optimizer state: ``"0 · encoder.0.weight"`` for a parameter's
    state, ``"exp_avg of encoder.0.weight"`` for each of its entries."""
    labels: dict[int, str] = {}
    for opt in find_optimizers(ckpt, orders):
        for p in opt.params:
            if p.node is None or p.name is None:
                continue
            labels[id(p.node)] = f"{p.id} · {p.display_name}"
            for entry in p.entries():
                labels[id(entry)] = f"{entry.key} of {p.display_name}"
    return labels


def label_state_rows(top: Any, ckpt: Checkpoint | Node, orders: ParamOrders | None = None) -> None:
    """Relabel the display rows (``core.grouping.Row``) of mapped optimizer state: a parameter's state row
    reads ``"0 · encoder.0.weight"``; its entries keep their keys (``exp_avg``: the row above names the
    parameter, and ``exp_avg of model.layers.0.post_attention_layernorm.weight`` repeated under it was cut
    at any width). The filter finds both by parameter name too."""
    labels = state_labels(ckpt, orders)
    if not labels:
        return
    for row in top.walk():
        label = labels.get(id(row.node)) if row.node is not None else None
        if label is not None:
            parent = row.parent
            if parent is None or parent.node is None or id(parent.node) not in labels:
                row.label = label
            # Label first, joined by a dot: name globs anchored at a dot boundary still match the name.
            row.search_name = f"{label}.{row.name}".lower()

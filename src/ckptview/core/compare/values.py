"""The values two checkpoints hold beside their tensors, compared: epoch, step, lr, loss, hyper-parameters
and every other non-tensor leaf that differs (Qt-free, no torch).

Leaves are matched by their contract name (as ``info --json`` names its ``values``). A one-element tensor
outside the model weights and the optimizers' per-parameter state (a saved ``loss``, Lightning's
``best_model_score``) is a value too: its few bytes are read. A list of records that grew (a trainer
state's ``log_history``) is one change, its length, not one per new record, and each key's last logged value
is a value of its own (``trainer_state.json.log_history (last loss)``). Every leaf visited and every
value read charges the budget of the two files' bytes.

Each change has a `rank`: 0 for what a person looks for first (epoch, step, learning rates, losses,
metrics), 1 for hyper-parameters, 2 for the rest (loop counters, paths); the listing keeps file order
within a rank.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ckptview.core import dtypes
from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Node, PathKey, TensorInfo, join_path
from ckptview.core.errors import TensorDataError
from ckptview.core.inspect.optimizer import is_optimizer_node
from ckptview.core.inspect.training import HYPER_KEYS
from ckptview.core.read.bytes.files import ReadAhead
from ckptview.core.read.formats.training_folder import is_weights_entry
from ckptview.core.read.pickle.to_tree import short_repr
from ckptview.core.read.values.reading import read_values
from ckptview.core.units import figure, plural

MISSING_SIDE = None  # the value of a side that does not hold the entry ("status" says which)
LAST = "(last)"  # the path component of a record list's last logged values: ``[..., "log_history", "(last)", "loss"]``
_TRAINING_WORDS = re.compile(r"(^|_)(epoch|epochs|step|steps|global_step|iteration|iter|lr|last_lr|learning_rate|"
                             r"loss|metric|score|acc|accuracy|grad_norm)$",
                             re.IGNORECASE)
_PLACE_KEYS = frozenset({"step", "epoch", "global_step"})  # a record that says where it was logged
_MODEL_ROOTS = frozenset({"model_state_dict", "model_state", "state_dict", "model", "module", "net", "network",
                          "model_dict", "weights"})


@dataclass
class ValueChange:
    """One value that differs: its contract name and path, both sides (None where absent) and a rank."""

    name: str
    path: tuple[PathKey, ...]
    a: Any
    b: Any
    status: str  # "changed" | "only_a" | "only_b"
    rank: int = 2

    def to_json(self) -> dict[str, Any]:
        """The ``values`` entry of ``diff --json``."""
        return {"name": self.name, "path": [p if isinstance(p, (str, int)) else repr(p) for p in self.path],
                "a": _json(self.a), "b": _json(self.b), "status": self.status}


def value_changes(a: Checkpoint, b: Checkpoint, budget: Budget | None = None) -> list[ValueChange]:
    """Every value of A or B that differs from the other's (see the module docstring), ranked."""
    if budget is None:
        budget = Budget.for_stored(a.file_size + b.file_size, "the values of both checkpoints")
    ahead = ReadAhead()  # the one-element tensors' few bytes: from windows of each file read at once
    with ahead:
        left = _leaves(a, budget, ahead)
        right = _leaves(b, budget, ahead)
    ahead.finish()
    lists = {n for side in (left, right) for n, (_, v) in side.items() if isinstance(v, _Records)}
    changes: list[ValueChange] = []
    for name, (path, value) in left.items():
        budget.charge(1, "values compared")
        if name not in right:
            if not _in_grown_list(path, lists):
                changes.append(ValueChange(name, path, value, MISSING_SIDE, "only_a"))
        elif not _same(value, right[name][1]):
            changes.append(ValueChange(name, path, value, right[name][1], "changed"))
    for name, (path, value) in right.items():
        if name not in left and not _in_grown_list(path, lists):
            changes.append(ValueChange(name, path, MISSING_SIDE, value, "only_b"))
    for change in changes:
        change.rank = rank(change.path)
    return sorted(changes, key=lambda c: c.rank)


def rank(path: tuple[PathKey, ...]) -> int:
    """0: a training fact (epoch, step, lr, loss, a metric); 1: a hyper-parameter; 2: anything else."""
    words = [str(p) for p in path if not isinstance(p, int)]
    if any(str(p) in HYPER_KEYS for p in path[:2]) or (path and str(path[0]).startswith("training_args")):
        return 1
    if words and (_TRAINING_WORDS.search(words[-1]) or words[-1] == "_last_lr"):
        return 0 if not any(w in ("loops", "param_groups") and words[-1] != "lr" for w in words) else 2
    return 2


def _leaves(ckpt: Checkpoint, budget: Budget, ahead: ReadAhead | None = None) -> dict[str, tuple[tuple[PathKey, ...], Any]]:
    """name -> (path, value) of every value leaf of `ckpt` outside the model weights (see the module
    docstring); a list of records is also a value of its own, its length (`_Records`)."""
    out: dict[str, tuple[tuple[PathKey, ...], Any]] = {}
    weights_beside: dict[int, bool] = {}  # id(container) -> it holds a tensor of more than one element
    stack: list[tuple[Node, tuple[PathKey, ...], bool]] = [(ckpt.root, (), False)]
    while stack:
        node, path, in_optimizer = stack.pop()
        budget.charge(1, "values")
        if in_optimizer and node.kind in ("value", "tensor"):
            continue  # per-parameter state (step, exp_avg): the tensor rows compare it
        if node.kind == "value":
            budget.charge(len(path), "names")  # the name built
            out[join_path(path)] = (path, _plain(node.value))
            continue
        if node.kind == "tensor":
            info = node.tensor
            if (info is not None and info.numel == 1 and not _in_weights(ckpt, path)
                    and not _beside_weights(node, weights_beside)):
                budget.charge(1 + len(path), "values read")
                number = _scalar(info, ahead) if not info.broken else None
                out[join_path(path)] = (path, number if number is not None else f"tensor {info.dtype}")
            continue
        if _in_weights(ckpt, path):
            continue  # the model's own tensors: the tensor rows compare them
        optimizer = in_optimizer or is_optimizer_node(node)
        if node.kind in ("list", "tuple") and node.children and all(c.kind in ("dict", "object") for c in node.children):
            out[join_path(path)] = (path, _Records(len(node.children)))
            for key, value in _last_logged(node, budget).items():
                out[f"{join_path(path)} (last {key})"] = ((*path, LAST, key), value)
        for child in reversed(node.children):
            stack.append((child, (*path, child.key), optimizer and not _is_param_groups(child, node)))
    return out


class _Records(int):
    """A list of records' length, as a value: shown as "N records"."""

    def __repr__(self) -> str:
        return f"{plural(int(self), 'record')}"


def _last_logged(records: Node, budget: Budget) -> dict[str, Any]:
    """Each key's value in the last record that holds it (a trainer state's last logged loss, lr, ...)."""
    out: dict[str, Any] = {}
    if not any(c.key in _PLACE_KEYS for record in records.children[:1] for c in record.children):
        return out  # records of something else (an optimizer's param groups): no log
    for record in records.children:
        budget.charge(1 + len(record.children), "records")
        for child in record.children:
            if child.kind == "value" and isinstance(child.value, (int, float)) and not isinstance(child.value, bool):
                out.pop(str(child.key), None)  # re-inserted: the keys in the order they were last logged
                out[str(child.key)] = child.value
    return out


def _in_grown_list(path: tuple[PathKey, ...], lists: set[str]) -> bool:
    """True for a leaf of a record that only one side holds: the list's length says it (`_Records`)."""
    return any(isinstance(path[k], int) and join_path(path[:k]) in lists for k in range(1, len(path)))


def _beside_weights(node: Node, known: dict[int, bool]) -> bool:
    """True for a tensor whose container holds a tensor of more than one element: a state dict's scalar
    parameter or counter (``num_batches_tracked``), not a saved ``loss`` beside ``epoch``. Each container
    is looked at once (`known`): a million scalars in one dict are not a million looks at it."""
    parent = node.parent
    if parent is None:
        return False
    found = known.get(id(parent))
    if found is None:
        found = known[id(parent)] = any(c.kind == "tensor" and c.tensor is not None and c.tensor.numel != 1
                                        for c in parent.children)
    return found


def _is_param_groups(child: Node, parent: Node) -> bool:
    """True for an optimizer's ``param_groups``: its lr and betas are values, its state per parameter not."""
    return is_optimizer_node(parent) and child.key == "param_groups"


def _in_weights(ckpt: Checkpoint, path: tuple[PathKey, ...]) -> bool:
    """True for the model weights' own container (a state dict's root, ``model_state_dict``, a training
    folder's model file)."""
    if not path:
        return False
    if ckpt.format == "training-folder":
        return len(path) == 1 and is_weights_entry(str(path[0]))
    return len(path) == 1 and str(path[0]) in _MODEL_ROOTS


def _scalar(info: TensorInfo, ahead: ReadAhead | None) -> float | int | bool | None:
    """The value of a one-element tensor (`inspect.optimizer.scalar_value`, its bytes through `ahead`)."""
    import numpy as np

    if dtypes.is_complex(info.dtype):
        return None
    try:
        value = np.asarray(read_values(info, ahead)).reshape(-1)[0]
    except (TensorDataError, ValueError, TypeError):
        return None
    if info.dtype == "bool":
        return bool(value)
    return float(value) if dtypes.is_floating(info.dtype) else int(value)


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return short_repr(value, 200)


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return type(x) is type(y) and x == y or (isinstance(x, (int, float)) and isinstance(y, (int, float))
                                              and not isinstance(x, bool) and not isinstance(y, bool) and x == y)


def _json(value: Any) -> Any:
    if isinstance(value, _Records):
        return repr(value)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # "nan", "inf": the contract writes no NaN
    return value


def iter_text(change: ValueChange, exact: bool = False) -> Iterator[str]:
    """The two sides as texts for a person: floats to four significant digits unless `exact` (then as
    Python prints them), "(absent)" where a side does not hold the entry."""
    for side in (change.a, change.b):
        if side is None and change.status != "changed":
            yield "(absent)"
        elif isinstance(side, float) and not exact:
            yield figure(side)
        else:
            yield short_repr(side, 80)

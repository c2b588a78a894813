"""What a diff row is: a model weight, or something else (optimizer state, sample inputs, counters), and
tied weights matched to their twin (Qt-free, no torch).

A diff compares model weights: its headline, its counts and ``ckptview diff``'s exit status are about
them. Rows outside the weights are reported in their own section:

- tensors outside the model container (``extra`` rows: what sits beside ``model_state_dict``);
- every tensor of an optimizer state dict, labelled by the parameter it belongs to
  (``exp_avg of encoder.0.weight``);
- a ``.pt2``'s example inputs (``sample_inputs``, ...) and constants, the files of a training folder other than the
  model (RNG state, scheduler);
- one-element step counters at any depth (``step``, ``global_step``, ``epoch``, ...);
- non-persistent buffers of a pickled module (``rotary_emb.inv_freq``): ``state_dict()`` leaves them out.

Each row also has a ``role``: "parameter" or "buffer" (see `roles`). The headline (the overall relative
change) is over the parameters; buffers and integer counters are reported on their own line.

A tensor present on one side only that shares its storage (same dtype, shape, strides, offset) with a
tensor matched on both sides is a tied copy (``lm_head.weight`` over the embedding in a ``.bin``; the
safetensors of the same model keeps one of them): it is compared with the other side's twin.
"""

from __future__ import annotations

from typing import Any

from ckptview.core.checkpoint import Checkpoint, PathKey, TensorInfo
from ckptview.core.compare.align import Alignment
from ckptview.core.inspect.optimizer import find_optimizers
from ckptview.core.inspect.roles import COUNTER_NAMES, is_non_persistent, tensor_role
from ckptview.core.read.formats.training_folder import is_weights_entry

NON_WEIGHT_ROOTS = frozenset({"sample_inputs", "example_inputs", "example_kwarg_inputs", "inputs"})
STEP_KEYS = COUNTER_NAMES


def _same_view(x: TensorInfo, y: TensorInfo) -> bool:
    return (x.storage is y.storage and x.dtype == y.dtype and tuple(x.shape) == tuple(y.shape)
            and tuple(x.stride) == tuple(y.stride) and x.offset == y.offset)


def match_tied(alignment: Alignment, a: Checkpoint, b: Checkpoint) -> None:
    """Give each one-sided pair whose tensor is a tied copy the other side's entry of its twin (in place)."""
    pairs = alignment.pairs
    for side, other, ckpt in (("a", "b", a), ("b", "a", b)):
        sharing = ckpt.sharing()
        if not sharing:
            continue
        matched = {getattr(p, side).name: p for p in pairs
                   if getattr(p, side) is not None and getattr(p, other) is not None}
        for pair in pairs:
            mine = getattr(pair, side)
            if mine is None or getattr(pair, other) is not None:
                continue
            for twin in sharing.get(mine.name, ()):
                twin_pair = matched.get(twin)
                if twin_pair is not None and _same_view(mine.info, getattr(twin_pair, side).info):
                    partner = getattr(twin_pair, other)
                    setattr(pair, other, partner)
                    pair.tied_to = partner.name
                    break


def optimizer_labels(ckpt: Checkpoint) -> tuple[dict[int, str], set[int]]:
    """(id(TensorInfo) -> "exp_avg of encoder.0.weight", ids of every tensor inside an optimizer state dict)."""
    labels: dict[int, str] = {}
    members: set[int] = set()
    for opt in find_optimizers(ckpt):
        for node in opt.node.walk():
            if node.tensor is not None:
                members.add(id(node.tensor))
        for p in opt.params:
            who = p.display_name if p.name is not None else f"parameter {p.id}"
            for entry in p.entries():
                if entry.tensor is not None:
                    labels[id(entry.tensor)] = f"{entry.key} of {who}"
    return labels, members


def _paths(ckpt: Checkpoint) -> dict[int, tuple[PathKey, ...]]:
    return {id(e.info): e.path for e in ckpt.tensors()}


def _is_counter(info: TensorInfo, path: tuple[PathKey, ...]) -> bool:
    return bool(path) and info.numel == 1 and str(path[-1]) in STEP_KEYS


def _outside_weights(ckpt: Checkpoint, path: tuple[PathKey, ...]) -> bool:
    if not path:
        return False
    if str(path[0]) in NON_WEIGHT_ROOTS:
        return True
    if ckpt.format == "torch-export" and "constants" in map(str, path[:2]):
        return True  # lifted tensor constants and non-persistent buffers: not in a state dict
    if ckpt.format == "training-folder":
        return not is_weights_entry(str(path[0]))
    return False


def _second_model(ckpt: Checkpoint, path: tuple[PathKey, ...]) -> bool:
    """A tensor of a training folder's model weights entry (any of them, not only the one aligned)."""
    if ckpt.format != "training-folder" or len(path) < 2:
        return False
    return is_weights_entry(str(path[0]))


def classify_rows(rows: list[Any], a: Checkpoint, b: Checkpoint) -> None:
    """Set ``section`` ("weights" | "other") and ``label`` of every diff row (in place)."""
    sides = []
    for ckpt in (a, b):
        labels, members = optimizer_labels(ckpt)
        sides.append((ckpt, labels, members, _paths(ckpt)))
    for row in rows:
        # A row outside the model container is no weight, except another model of a training folder
        # (accelerate's `model_1.safetensors` beside `model.safetensors`).
        other = bool(row.extra) and not all(
            _second_model(ckpt, paths.get(id(info), ()))
            for info, (ckpt, _l, _m, paths) in zip((row.info_a, row.info_b), sides, strict=True) if info is not None)
        role = "parameter"
        for info, (ckpt, labels, members, paths) in zip((row.info_a, row.info_b), sides, strict=True):
            if info is None:
                continue
            path = paths.get(id(info), ())
            if (id(info) in members or _outside_weights(ckpt, path) or _is_counter(info, path)
                    or is_non_persistent(info)):
                other = True
            if tensor_role(info, path) == "buffer":
                role = "buffer"
            if row.label is None and id(info) in labels:
                row.label = labels[id(info)]
        row.section = "other" if other else "weights"
        row.role = role

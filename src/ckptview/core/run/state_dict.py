"""Which part of a checkpoint is the model's weights, and their names as a model's `state_dict()` has them
(wrapper prefixes peeled). Read from ckptview's safe listing: no torch, nothing from the file runs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ckptview.core.checkpoint import MODULE_PART
from ckptview.core.errors import CheckpointError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.run.input_specs import InputSpec, guess_inputs

# Keys under which training checkpoints keep the model's weights (Lightning, common scripts, HF trainers).
STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model_state", "model", "module", "net", "network",
                   "weights", "params", "ema_state_dict")
# Wrapper prefixes: DataParallel/DDP, torch.compile, Lightning/HF wrappers.
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "model.")
# Path components of a pickled nn.Module's own state that a state_dict() key leaves out.
_MODULE_INTERNALS = ("_modules", "_parameters", "_buffers")

def state_dict_node(checkpoint: Any) -> Any:
    """The node holding a checkpoint's model weights: the root, or the first of STATE_DICT_KEYS with tensors;
    in a training folder (Trainer, accelerate) its model's weight file, whose name is no part of the keys.
    A pickled module's own children (`model`, `lm_head`) are the model's, never a container."""
    base = checkpoint.root
    entry = checkpoint.metadata.get("model_entry") if checkpoint.format == "training-folder" else None
    if entry is not None:
        child = next((c for c in base.children if c.key == entry), None)
        if child is not None:
            return child
    if base.kind == "object" and any(MODULE_PART in e.info.extra for e in checkpoint.tensors()):
        return base
    for key in STATE_DICT_KEYS:
        child = next((c for c in base.children if c.key == key and c.kind in ("dict", "object")), None)
        if child is not None and any(n.kind == "tensor" for n in child.walk()):
            return child
    return base


def find_state_dict(checkpoint: Any) -> tuple[str, dict[str, Any]]:
    """(key it was found under or '', {state_dict key: TensorInfo}) of a checkpoint's model weights."""
    found_under, entries = state_dict_entries(checkpoint)
    return found_under, {key: entry.info for key, entry in entries.items()}


def state_dict_entries(checkpoint: Any) -> tuple[str, dict[str, Any]]:
    """(key it was found under or '', {state_dict key: TensorEntry}): the model weights with their names in
    the checkpoint (`state_dict.fc.weight` of a training checkpoint is state-dict key `fc.weight`)."""
    base = state_dict_node(checkpoint)
    depth = len(base.path)
    found: dict[str, Any] = {}
    for entry in checkpoint.tensors():
        if entry.path[:depth] != base.path:
            continue
        parts = [str(p) for p in entry.path[depth:] if p not in _MODULE_INTERNALS]
        found[".".join(parts)] = entry
    return (base.name if base is not checkpoint.root else ""), found


def strip_prefixes(keys: Iterable[str], model_keys: Iterable[str],
                   prefixes: tuple[str, ...] = WRAPPER_PREFIXES) -> tuple[dict[str, str], list[str]]:
    """Map checkpoint keys to model keys by peeling wrapper prefixes, keeping the peel that matches most.

    Returns ({checkpoint key: model key}, prefixes stripped in order). `module._orig_mod.x` peels twice;
    a model whose own keys start with `model.` keeps them (peeling would match fewer keys).
    """
    model_set = set(model_keys)
    mapping = {k: k for k in keys}
    best, best_seq, best_score = mapping, [], _overlap(mapping.values(), model_set)
    seq: list[str] = []
    for _ in range(8):  # wrappers nest a few levels at most
        counts = {p: sum(1 for v in mapping.values() if v.startswith(p)) for p in prefixes}
        prefix = max(counts, key=lambda p: counts[p])
        if counts[prefix] == 0:
            break
        mapping = {k: v.removeprefix(prefix) for k, v in mapping.items()}
        seq = [*seq, prefix]
        score = _overlap(mapping.values(), model_set)
        if score > best_score:
            best, best_seq, best_score = mapping, seq, score
    return best, best_seq


def _overlap(keys: Iterable[str], model_set: set[str]) -> int:
    return sum(1 for k in keys if k in model_set)


def state_dict_tensors(path: str, checkpoint: Any = None) -> dict[str, Any] | None:
    """{state_dict key: TensorInfo} of the model weights at `path` (or of `checkpoint`, already open);
    None when the file does not open. No torch, nothing from the file runs."""
    if checkpoint is not None:
        return find_state_dict(checkpoint)[1]
    try:
        checkpoint = open_checkpoint(path)
    except CheckpointError:
        return None
    try:
        return find_state_dict(checkpoint)[1]
    finally:
        checkpoint.close()


def suggest_inputs(path: str, checkpoint: Any = None) -> list[InputSpec] | None:
    """A guess at the input for a state dict from the first layer that takes it (`guess_inputs`; no torch)."""
    tensors = state_dict_tensors(path, checkpoint)
    return None if tensors is None else guess_inputs([(name, tuple(i.shape)) for name, i in tensors.items()])

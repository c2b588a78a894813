"""Find the checkpoints of a training run and the step/epoch of each (Qt-free, no torch, no values).

A run is given as a folder (its ``checkpoint-N``, ``step_N``, ``epoch=E-step=S.ckpt``, ... entries, or else
every checkpoint inside it) or as several paths/globs. The step and epoch of a checkpoint come, in this
order, from the file (``global_step``, ``step``, ``epoch``, ... at its top or one level down), from a
Hugging Face ``trainer_state.json`` beside the weights, or from its name.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any

from ckptview.core.checkpoint import Checkpoint, Node
from ckptview.core.errors import CheckpointError, NoSuchFile, NotACheckpointError
from ckptview.core.inspect.optimizer import scalar_value
from ckptview.core.read.bytes.fs import LOCAL, FileSystem, filesystem
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.options import DEFAULT as DEFAULT_REMOTE
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.context import Source
from ckptview.core.read.formats import readers

# Keys whose integer value is the training step / epoch, most specific first.
STEP_KEYS = ("global_step", "global_steps", "step", "iteration", "iter", "num_steps", "steps")  # global_steps: DeepSpeed
EPOCH_KEYS = ("epoch", "epochs", "cur_epoch", "current_epoch")
TRAINER_STATE = "trainer_state.json"
MAX_TRAINER_STATE_BYTES = 64 << 20
_GLOB_CHARS = re.compile(r"[*?\[]")
# An entry of a run folder: checkpoint-500, step_100, global_step100, iter-7, epoch=2-step=300.ckpt, ...
_RUN_ENTRY = re.compile(r"(?:^|[^a-z])(?:checkpoint|ckpt|step|global_step|iter|iteration|epoch)[-_=]?\d+",
                        re.IGNORECASE)
_NAME_STEP = re.compile(r"(?:^|[^a-z])(?:global_step|step|iteration|iter|checkpoint|ckpt)[-_=]?(\d+)",
                        re.IGNORECASE)
_NAME_EPOCH = re.compile(r"(?:^|[^a-z])epoch[-_=]?(\d+)", re.IGNORECASE)
_HEAD_BYTES = 4096


@dataclass
class Position:
    """Where a checkpoint sits in its run: step and epoch, and where each was found."""

    step: int | None = None
    epoch: int | float | None = None
    step_source: str | None = None  # "file: global_step", "trainer_state.json", "name"
    epoch_source: str | None = None


# ---------------------------------------------------------------------------------------------------
# Finding the checkpoints.


def find_checkpoints(paths: list[str], remote: RemoteOptions = DEFAULT_REMOTE) -> list[str]:
    """The checkpoint paths named by ``paths`` (folders expanded, globs matched), without duplicates."""
    out: list[str] = []
    for raw in paths:
        raw = os.path.expanduser(str(raw))
        if locate(raw).is_remote:  # a URL: a remote run folder is listed like a local one, through a session of its own
            fs = filesystem(raw, options=remote)
            out += expand_folder(raw, fs) if fs.isdir(raw) and not _is_checkpoint_folder(raw, fs) else [raw]
            continue
        if not os.path.exists(raw) and _GLOB_CHARS.search(raw):
            matches = sorted(glob.glob(raw))
            if not matches:
                raise NotACheckpointError(f"no file matches {raw}")
            for match in matches:
                out += expand_folder(match) if os.path.isdir(match) and not _is_checkpoint_folder(match) else [match]
        elif os.path.isdir(raw):
            out += expand_folder(raw)
        elif os.path.exists(raw):
            out.append(raw)
        else:
            raise NoSuchFile(f"no such file: {raw}")
    seen: set[str] = set()
    unique = []
    for path in out:
        key = path if "://" in path else os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def expand_folder(folder: str, fs: FileSystem = LOCAL) -> list[str]:
    """The checkpoints of a run folder; the folder itself when it is one checkpoint."""
    try:
        names = sorted(n for n in fs.listdir(folder) if not n.startswith("."))
    except OSError as exc:
        raise NotACheckpointError(f"cannot list folder {folder}: {exc.strerror or exc}") from None
    entries = [fs.join(folder, n) for n in names]
    patterned = [p for p in entries if _RUN_ENTRY.search(os.path.basename(p)) and _sniffs(p, fs)]
    if patterned:
        return sorted(patterned, key=natural_key)
    if _is_checkpoint_folder(folder, fs):
        return [folder]
    found = [p for p in entries if _sniffs(p, fs)]
    if found:
        return sorted(found, key=natural_key)
    raise NotACheckpointError(f"not a training run: folder {folder} holds no checkpoint this tool reads")


def _is_checkpoint_folder(folder: str, fs: FileSystem = LOCAL) -> bool:
    """A folder that is one checkpoint: an HF index, a DCP .metadata, or HF's config/trainer state."""
    try:
        names = set(fs.listdir(folder))
    except (OSError, CheckpointError):
        return False
    if ".metadata" in names or TRAINER_STATE in names or any(n.endswith(".index.json") for n in names):
        return True
    return "config.json" in names and _sniffs(folder, fs)


def _sniffs(path: str, fs: FileSystem) -> bool:
    """True when some reader recognises ``path`` (a file's first bytes, or a folder's content)."""
    head = b""
    is_dir = False
    try:
        if fs.isfile(path):
            with fs.open_regular(path) as fh:
                head = fh.read(_HEAD_BYTES)
        elif not (is_dir := fs.isdir(path)):
            return False
    except (OSError, CheckpointError):
        return True  # unreadable: let opening it say why
    source = Source(path, head, is_dir, fs=fs)
    for reader in readers():
        try:
            if reader.sniff(source):
                return True
        except Exception:  # a sniffer that chokes on odd bytes just does not claim the file
            continue
    return False


def natural_key(path: str) -> tuple[Any, ...]:
    """Sort key that orders numbers by value: step_9 before step_10."""
    name = os.path.basename(os.path.normpath(path))
    parts = re.split(r"(\d+)", name)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p)


# ---------------------------------------------------------------------------------------------------
# Step and epoch.


def find_position(ckpt: Checkpoint, path: str, remote: RemoteOptions = DEFAULT_REMOTE) -> Position:
    """Step and epoch of one checkpoint: from the file, a trainer_state.json (a URL's read with `remote`),
    or the name."""
    pos = Position()
    step = _from_file(ckpt.root, STEP_KEYS)
    if step is not None:
        pos.step, pos.step_source = int(step[1]), _source(step[0])
    epoch = _from_file(ckpt.root, EPOCH_KEYS)
    if epoch is not None:
        pos.epoch, pos.epoch_source = epoch[1], _source(epoch[0])
    if pos.step is None or pos.epoch is None:
        _from_trainer_state(path, pos, remote)
    if pos.step is None or pos.epoch is None:
        position_from_name(path, pos)
    return pos


def _source(key: str) -> str:
    # A training folder shows its trainer_state.json as an entry of the tree: name the file, as when it
    # is read beside the weights.
    return TRAINER_STATE if key.startswith(TRAINER_STATE + ".") else f"file: {key}"


def _from_file(root: Node, keys: tuple[str, ...]) -> tuple[str, int | float] | None:
    """(dotted key, value) of the first key found at the top of the file, then one level down."""
    if root.kind not in ("dict", "object"):
        return None
    for key in keys:
        for child in root.children:
            if child.key == key:
                value = _number(child)
                if value is not None:
                    return key, value
    for key in keys:
        for parent in root.children:
            if parent.kind not in ("dict", "object") or parent.key in ("optimizer", "optimizer_states"):
                continue
            for child in parent.children:
                if child.key == key:
                    value = _number(child)
                    if value is not None:
                        return f"{parent.key}.{key}", value
    return None


def _number(node: Node) -> int | float | None:
    """A whole, non-negative number held by a value node or a one-element integer/float tensor."""
    value: Any = None
    if node.kind == "value":
        value = node.value
    elif node.kind == "tensor" and node.tensor is not None and node.tensor.numel == 1:
        value = scalar_value(node.tensor)
    return _whole(value)


def _whole(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0:
            return None
        return int(value) if value.is_integer() else value
    return value if value >= 0 else None


def _from_trainer_state(path: str, pos: Position, remote: RemoteOptions) -> None:
    fs = filesystem(path, options=remote)
    folder = path if fs.isdir(path) else fs.dirname(path)
    state_file = fs.join(folder, TRAINER_STATE)
    try:
        if not fs.isfile(state_file) or fs.getsize(state_file) > MAX_TRAINER_STATE_BYTES:
            return
        with fs.open_regular(state_file) as fh:
            state = json.loads(fh.read(MAX_TRAINER_STATE_BYTES + 1).decode("utf-8"))
    except (OSError, ValueError, RecursionError, CheckpointError):
        return  # a broken trainer state (nested past the parser's depth too) is just not a source of steps
    if not isinstance(state, dict):
        return
    step = _whole(state.get("global_step"))
    if pos.step is None and isinstance(step, int):
        pos.step, pos.step_source = step, TRAINER_STATE
    epoch = _whole(state.get("epoch"))
    if pos.epoch is None and epoch is not None:
        pos.epoch, pos.epoch_source = epoch, TRAINER_STATE


def position_from_name(path: str, pos: Position) -> None:
    norm = os.path.normpath(os.path.abspath(path))
    # The file's own name first, then its folder's (checkpoint-500/model.safetensors).
    for name in (os.path.basename(norm), os.path.basename(os.path.dirname(norm))):
        if pos.step is None:
            match = _NAME_STEP.search(name)
            if match:
                pos.step, pos.step_source = int(match.group(1)), "name"
        if pos.epoch is None:
            match = _NAME_EPOCH.search(name)
            if match:
                pos.epoch, pos.epoch_source = int(match.group(1)), "name"


def order_key(path: str, pos: Position, by: str) -> tuple[Any, ...]:
    """Sort key of one checkpoint for the chosen order ("step", "epoch" or "name")."""
    if by == "step":
        return (pos.step, pos.epoch if pos.epoch is not None else -1, natural_key(path))
    if by == "epoch":
        return (pos.epoch, natural_key(path))
    return natural_key(path)


def choose_order(positions: list[Position]) -> str:
    """'step' when every checkpoint has one, else 'epoch', else 'name' (numbers in names by value)."""
    if positions and all(p.step is not None for p in positions):
        return "step"
    if positions and all(p.epoch is not None for p in positions):
        return "epoch"
    return "name"


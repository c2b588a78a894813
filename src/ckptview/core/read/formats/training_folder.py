"""Training folders: one step of a run saved as several files, opened as one checkpoint.

The layouts (by file name, as the libraries write them):

- Hugging Face Trainer ``checkpoint-N/``: ``model.safetensors`` or ``pytorch_model.bin`` (or shards and
  an index), ``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth`` (``rng_state_K.pth`` per process),
  ``scaler.pt``, ``trainer_state.json``, ``training_args.bin`` (a full pickle of TrainingArguments).
- accelerate ``save_state``: ``model.safetensors`` (``model_1.safetensors``, ...), ``optimizer.bin``,
  ``scheduler.bin``, ``sampler.bin``, ``scaler.pt``, ``random_states_K.pkl``, ``custom_checkpoint_K.pkl``;
  with FSDP sharded state, DCP subfolders (``pytorch_model_fsdp_0/``, ``optimizer_0/``).
- Lightning / DCP step folders: a DCP ``.metadata`` with ``__R_N.distcp`` files beside other files
  (Lightning's ``meta.pt``).
- DeepSpeed ``save_checkpoint``: a folder per tag (``global_stepN/``) with ``mp_rank_00_model_states.pt``
  (ZeRO-3: ``zero_pp_rank_R_mp_rank_00_model_states.pt`` per rank) and the ZeRO optimizer's partitions
  ``zero_pp_rank_R_mp_rank_00_optim_states.pt`` (``bf16_`` in front with bf16; ``expp_rank_E_...`` and
  ``layer_L_expert_E_...`` with experts); ``latest`` and ``zero_to_fp32.py`` sit in the folder above.

Every file becomes a top-level entry named by its file name (a set of shards by its index, a DCP folder
by ``.metadata`` or its subfolder name); each is read by its own reader, so nothing runs and only
metadata is read. JSON files are values. The optimizer then finds the model beside it (an entry whose
name holds "model"), and the training summary reads ``trainer_state.json``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ckptview.core.budget import OPEN_COST, Budget, json_units
from ckptview.core.checkpoint import Checkpoint, Node, OpenFiles
from ckptview.core.errors import UNRECOVERABLE, CheckpointError, CheckpointFormatError, NotACheckpointError
from ckptview.core.read.bytes.fs import LOCAL, FileSystem
from ckptview.core.read.context import DEFAULT, ReaderContext, Source
from ckptview.core.read.formats import dcp, hf_sharded
from ckptview.core.read.pickle.to_tree import build_tree

NAME = "training-folder"
PRIORITY = 120  # above DCP and Hub folders: a step folder holds one of those and more
MAX_JSON_BYTES = 4 << 20  # one JSON file read whole: a bound on one allocation (its parse is charged)
# Files that only a training step writes beside the model (checked by name; the content by its reader).
_TRAINING_FILE = re.compile(
    r"^(optimizer(_\d+)?\.(pt|bin|pth)|scheduler(_\d+)?\.(pt|bin|pth)|rng_state(_\d+)?\.pth|scaler\.pt"
    r"|trainer_state\.json|training_args\.bin|random_states_\d+\.pkl|sampler(_\d+)?\.bin|meta\.pt"
    r"|custom_checkpoint_\d+\.pkl)$")
# DeepSpeed's files (deepspeed/runtime/engine.py `_get_ckpt_name`, `_get_rank_zero_ckpt_name`, ...).
_DEEPSPEED_FILE = re.compile(
    r"^((bf16_|fp16_)?zero_pp_rank_\d+_)?mp_rank_\d+_(model|optim)_states\.pt$"
    r"|^expp_rank_\d+_mp_rank_\d+_optim_states\.pt$|^(layer_\d+_)?expert_\d+_mp_rank_\d+_model_states\.pt$")
_DCP_SUBFOLDER = re.compile(r"^(pytorch_model_fsdp|optimizer|model)(_\d+)?$")


def is_weights_entry(key: str) -> bool:
    """True for the top-level entry of a training folder that holds model weights (not optimizer, RNG, ...)."""
    return "model" in key.lower() and not _TRAINING_FILE.match(key) and not key.endswith((".json", ".pkl"))


def _files(folder: str, fs: FileSystem) -> list[str]:
    return sorted(fs.list_files(folder))


def _dcp_subfolders(folder: str, fs: FileSystem) -> list[str]:
    return sorted(n for n in fs.listdir(folder) if _DCP_SUBFOLDER.match(n)
                  and fs.isfile(fs.join(folder, n, ".metadata")))


def training_files(folder: str, fs: FileSystem = LOCAL) -> list[str]:
    """The names in ``folder`` that mark a training step (optimizer, scheduler, RNG state, trainer state,
    DeepSpeed's model and optimizer states...)."""
    return [n for n in _files(folder, fs) if _TRAINING_FILE.match(n) or _DEEPSPEED_FILE.match(n)]


def sniff(source: Source) -> bool:
    """True for a folder holding a training step's files (optimizer, scheduler, RNG, trainer state) or DCP subfolders."""
    if not source.is_dir:
        return False
    try:
        return bool(training_files(source.path, source.fs) or _dcp_subfolders(source.path, source.fs))
    except OSError:
        return False


def _json_node(path: str, fs: FileSystem, budget: Budget) -> Node:
    size = fs.getsize(path)
    if size > MAX_JSON_BYTES:
        return Node(key="", kind="value", type_name="str", value=f"<JSON file of {size} bytes, not read>")
    with fs.open_regular(path) as fh:
        raw = fh.read(MAX_JSON_BYTES + 1)  # no more than was sized: it may have grown since
    if len(raw) > MAX_JSON_BYTES:
        return Node(key="", kind="value", type_name="str", value=f"<JSON file of more than {size} bytes, not read>")
    budget.charge(json_units(raw), f"JSON of {path.rsplit('/', 1)[-1][:120]}")
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return Node(key="", kind="value", type_name="str", value=f"<not valid JSON: {str(exc)[:80]}>")
    return build_tree(value, budget)


def open(source: Source, ctx: ReaderContext = DEFAULT) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read a training step folder into one Checkpoint: every file a top-level entry, metadata only, nothing run."""
    folder, fs = source.path, source.fs
    budget = ctx.budget_for(source)
    root = Node(key="", kind="dict", type_name=NAME)
    parts: list[tuple[str, Checkpoint]] = []
    warnings: list[str] = []
    files = _files(folder, fs)
    budget.charge(len(files) + 1, "folder entries listed")
    used: set[str] = set()

    def add_part(key: str, opener: Any) -> None:
        try:
            ckpt = opener()
        except UNRECOVERABLE:  # a network failure or a changed file: never a partial folder shown whole
            raise
        except CheckpointError as exc:
            warnings.append(f"'{key}' not read: {exc}")
            root.add(Node(key=key, kind="value", type_name="str", value=f"<not read: {exc}>"))
            return
        except (OSError, ValueError, MemoryError, RecursionError) as exc:  # one line, never a traceback
            err = CheckpointError(f"{type(exc).__name__}: {exc}")
            warnings.append(f"'{key}' not read: {err}")
            root.add(Node(key=key, kind="value", type_name="str", value=f"<not read: {err}>"))
            return
        node = ckpt.root
        node.key = key
        root.add(node)
        parts.append((key, ckpt))

    sets = hf_sharded.weight_sets(folder, fs)
    for ws in sets:
        members = [*ws.files, *([ws.index] if ws.index else [])]
        if ws.index:
            try:
                index_path = fs.join(folder, ws.index)
                weight_map, _ = hf_sharded.read_index(index_path, source.child_identity(index_path), fs, budget)
                members += list(dict.fromkeys(weight_map.values()))
            except CheckpointError:
                pass
        used.update(members)
        if ws.variant is not None:
            warnings.append(f"variant '{ws.variant}' ({ws.label}) is a separate checkpoint: open its file to see it")
            continue
        key = ws.index or (ws.files[0] if len(ws.files) == 1 else f"{ws.base}-*.{ws.ext}")
        if ws.index is None and len(ws.files) == 1:  # one file: its own reader (and its own key order)
            add_part(key, lambda ws=ws: ctx.open_child(fs.join(folder, ws.files[0])))
        else:
            add_part(key, lambda ws=ws: hf_sharded.open_set(folder, ws, None, ctx, source))
    if fs.isfile(fs.join(folder, ".metadata")):
        used.update(n for n in files if n == ".metadata" or n.endswith(".distcp"))
        add_part(".metadata", lambda: dcp.open(source, ctx))  # not ctx.open_child: that would come back here
    for sub in _dcp_subfolders(folder, fs):
        add_part(sub, lambda sub=sub: dcp.open(Source.folder(fs.join(folder, sub), fs=fs), ctx))
    rest = [n for n in files if n not in used]
    # Each file opened is charged OPEN_COST by the open itself: list what the budget affords, keeping some for
    # the rest of the open.
    affordable = max(0, budget.remaining // OPEN_COST - 2)
    if len(rest) > affordable:
        warnings.append(f"{len(rest) - affordable} more files not listed: the folder's work budget is spent")
        rest = rest[:affordable]
    # The step's other files (optimizer, scheduler, RNG states, ...): remote ones opened at once.
    opened = ctx.open_children([fs.join(folder, n) for n in rest if not n.endswith(".json")], "files")
    for name in rest:
        full = fs.join(folder, name)
        if name.endswith(".json"):
            budget.charge(OPEN_COST, "files opened")
            node = _json_node(full, fs, budget)
            node.key = name
            root.add(node)
            continue
        ckpt = next(opened)
        if isinstance(ckpt, NotACheckpointError):
            size = fs.getsize(full)
            root.add(Node(key=name, kind="value", type_name="str", value=f"<file of {size} bytes, not a checkpoint>"))
            continue
        if isinstance(ckpt, UNRECOVERABLE):
            raise ckpt
        if isinstance(ckpt, CheckpointError):
            warnings.append(f"'{name}' not read: {ckpt}")
            root.add(Node(key=name, kind="value", type_name="str", value=f"<not read: {ckpt}>"))
            continue
        node = ckpt.root
        node.key = name
        root.add(node)
        parts.append((name, ckpt))
    if not parts:
        if warnings:  # the training files are there but none reads: say why, for the first one
            raise CheckpointFormatError(f"training folder: {warnings[0]}")
        raise NotACheckpointError(f"not a checkpoint: folder {folder} holds no file this tool reads")
    return _combine(folder, root, parts, warnings, fs)


def _combine(folder: str, root: Node, parts: list[tuple[str, Checkpoint]], warnings: list[str],
             fs: FileSystem) -> Checkpoint:
    seen: dict[str, None] = {}  # every global named, in order (sets: parts may name many)
    bad: dict[str, None] = {}
    files = OpenFiles()
    formats: dict[str, str] = {}
    by_entry: dict[str, list[str]] = {}  # each entry's unsafe globals: a run loads the model's entry alone
    for key, ckpt in parts:
        by_entry[key] = list(ckpt.unsafe_globals)
        seen.update(dict.fromkeys(ckpt.globals))
        bad.update(dict.fromkeys(ckpt.unsafe_globals))
        warnings.extend(f"{key}: {w}" for w in ckpt.warnings)  # bounded: each part's warnings once
        files.add(ckpt.files)
        formats[key] = ckpt.format
    total = sum(fs.getsize(fs.join(folder, n)) for n in _files(folder, fs))
    model = next((k for k, _ in parts if is_weights_entry(k) and formats[k] != "dcp"), None)
    return Checkpoint(path=folder, format=NAME, file_size=total, root=root, globals=list(seen),
                      unsafe_globals=list(bad), warnings=warnings, files=files,
                      metadata={"files": formats, "model_entry": model, "unsafe_by_entry": by_entry})

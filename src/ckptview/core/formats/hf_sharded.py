"""Hugging Face sharded checkpoints: `model.safetensors.index.json` / `pytorch_model.bin.index.json`
plus the shard files it names, or a folder of shards, opened as one logical checkpoint.

Each shard is opened with its own reader (a safetensors header, or a torch zip's `data.pkl`): that is
the metadata cost, nothing more. Tensors keep their shard's lazy byte source; `info.extra["shards"]`
names the shard file (`[{"file": "model-00001-of-00002.safetensors"}]`).
"""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any

from ckptview.core.errors import CheckpointError, CheckpointFormatError, NotACheckpointError
from ckptview.core.files import open_regular
from ckptview.core.model import BoundedWarnings, Checkpoint, Node

NAME = "hf-sharded"
PRIORITY = 60
MAX_INDEX_BYTES = 256 << 20
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_SHARD = re.compile(r"-\d+-of-\d+\.(safetensors|bin)$")
_SINGLE = ("model.safetensors", "pytorch_model.bin")
_nesting = threading.local()  # set while an index's shards are opened


def _index_files(folder: str) -> list[str]:
    """Index files in `folder`: the standard names first (safetensors before bin), then others."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(".index.json"))
    return sorted(names, key=lambda n: (INDEX_NAMES.index(n) if n in INDEX_NAMES else len(INDEX_NAMES),
                                        ".bin." in n, n))


def _shard_files(folder: str) -> list[str]:
    """Files that look like shards (by name: the content is checked when they are opened)."""
    names = [n for n in sorted(os.listdir(folder)) if os.path.isfile(os.path.join(folder, n))]
    safetensors = [n for n in names if n.endswith(".safetensors")]
    if safetensors:
        return safetensors
    return [n for n in names if _SHARD.search(n) or n in _SINGLE]


def sniff(path: str, head: bytes) -> bool:
    """True when the path or its first bytes (`head`; b"" for a folder) look like a Hugging Face sharded folder or index file."""
    if os.path.isdir(path):
        try:
            return bool(_index_files(path) or _shard_files(path))
        except OSError:
            return False
    stripped = head.lstrip()
    return stripped.startswith(b"{") and (b'"weight_map"' in head or path.endswith(".index.json"))


def read_index(path: str) -> tuple[dict[str, str], dict[str, Any]]:
    """(weight_map, index metadata) of an index file, validated."""
    size = os.path.getsize(path)
    if size > MAX_INDEX_BYTES:
        raise CheckpointFormatError(f"index file is {size} bytes, more than the {MAX_INDEX_BYTES} allowed")
    with open_regular(path) as fh:  # never blocks on a FIFO named like an index
        raw = fh.read(MAX_INDEX_BYTES + 1)
    try:
        index = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise NotACheckpointError(f"not a checkpoint: {os.path.basename(path)} is not valid JSON ({str(exc)[:80]})") \
            from None
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise NotACheckpointError(f"not a checkpoint: {os.path.basename(path)} has no weight_map")
    weight_map = index["weight_map"]
    for key, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise CheckpointFormatError(f"index: weight_map['{key}'] is not a file name")
    meta = index.get("metadata")
    return weight_map, meta if isinstance(meta, dict) else {}


def _shard_path(folder: str, name: str) -> str:
    folder = os.path.abspath(folder)
    path = os.path.abspath(os.path.join(folder, name))
    if os.path.commonpath([path, folder]) != folder:  # an index must not point outside its folder
        raise CheckpointFormatError(f"index names shard {name!r} outside its folder")
    return path


def open(path: str) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read a Hugging Face sharded folder or index file into a Checkpoint: metadata only, no tensor bytes, nothing run."""
    if getattr(_nesting, "active", False):
        # A shard that is itself an index (the index naming itself, or a cycle): one line, no recursion.
        raise CheckpointFormatError(f"{os.path.basename(path)} is an index file, named as a shard by another index")
    _nesting.active = True
    try:
        return _open(path)
    finally:
        _nesting.active = False


def _open(path: str) -> Checkpoint:
    from ckptview.core.open import open_checkpoint

    warnings: list[str] = BoundedWarnings()
    index_path: str | None = None
    if os.path.isdir(path):
        folder = path
        indexes = _index_files(folder)
        if indexes:
            index_path = os.path.join(folder, indexes[0])
            if len(indexes) > 1:
                warnings.append(f"folder holds several index files ({', '.join(indexes)}); showing {indexes[0]}")
    else:
        folder, index_path = os.path.dirname(os.path.abspath(path)), path
    if index_path is not None:
        weight_map, index_meta = read_index(index_path)
        shard_names = list(dict.fromkeys(weight_map.values()))
    else:
        weight_map, index_meta = {}, {}
        shard_names = _shard_files(folder)
        if not shard_names:
            raise NotACheckpointError(f"not a checkpoint: folder {folder} holds no index file and no shards")

    shards: dict[str, Checkpoint] = {}
    for name in shard_names:
        shard_path = _shard_path(folder, name)
        if not os.path.isfile(shard_path):
            warnings.append(f"shard '{name}' is missing")
            continue
        try:
            shards[name] = open_checkpoint(shard_path)
        except CheckpointError as exc:
            if index_path is None and len(shard_names) > 1:  # a stray file in a folder of shards
                warnings.append(f"'{name}' skipped: {exc}")
                continue
            raise CheckpointFormatError(f"shard '{name}': {exc}") from None
    if not shards:
        raise CheckpointFormatError("none of the shards could be opened")
    return _combine(path, folder, index_path, weight_map, index_meta, shards, warnings)


def _combine(path: str, folder: str, index_path: str | None, weight_map: dict[str, str],
             index_meta: dict[str, Any], shards: dict[str, Checkpoint], warnings: list[str]) -> Checkpoint:
    kinds = {s.format for s in shards.values()}
    fmt = "hf-sharded-safetensors" if kinds == {"safetensors"} else "hf-sharded-bin"
    root = Node(key="", kind="dict", type_name=fmt)
    by_shard = {name: {e.name: e for e in s.tensors()} for name, s in shards.items()}
    placed: set[tuple[str, str]] = set()
    for key, shard in weight_map.items():
        entries = by_shard.get(shard)
        if entries is None:
            continue  # the shard's absence is already a warning
        entry = entries.get(key)
        if entry is None:
            warnings.append(f"tensor '{key}' is listed in the index but missing from shard '{shard}'")
            continue
        _add_tensor(root, key, entry.info, shard)
        placed.add((shard, key))
    for shard, entries in by_shard.items():
        for key, entry in entries.items():
            if (shard, key) not in placed:
                if index_path is not None:
                    warnings.append(f"tensor '{key}' in shard '{shard}' is not listed in the index")
                _add_tensor(root, key, entry.info, shard)
    globals_seen: list[str] = []
    unsafe: list[str] = []
    file_maps: list[Any] = []
    for name, shard_ckpt in shards.items():
        globals_seen += [g for g in shard_ckpt.globals if g not in globals_seen]
        unsafe += [g for g in shard_ckpt.unsafe_globals if g not in unsafe]
        warnings.extend(f"{name}: {w}" for w in shard_ckpt.warnings)
        file_maps.extend(shard_ckpt.metadata.get("_file_maps", []))
    total = sum(s.file_size for s in shards.values()) + (os.path.getsize(index_path) if index_path else 0)
    first = next(iter(shards.values()))
    metadata: dict[str, Any] = {"_file_maps": file_maps, "shards": list(shards), "index_metadata": index_meta,
                                "index": os.path.basename(index_path) if index_path else None}
    for node in first.root.children:  # a safetensors shard's __metadata__ (the same in every shard)
        if node.key == "__metadata__":
            metadata["shard_metadata"] = {c.key: c.value for c in node.children}
    declared = index_meta.get("total_size")
    actual = sum(n.tensor.nbytes for n in root.children if n.tensor is not None)
    if isinstance(declared, int) and declared != actual:
        warnings.append(f"index declares total_size {declared}, the shards hold {actual} bytes of tensors")
    return Checkpoint(path=path if not os.path.isdir(path) else folder, format=fmt, file_size=total, root=root,
                      globals=globals_seen, unsafe_globals=unsafe, warnings=warnings, metadata=metadata)


def _add_tensor(root: Node, key: str, info: Any, shard: str) -> None:
    info.extra["shards"] = [{"file": shard}]
    root.add(Node(key=key, kind="tensor", type_name="Parameter" if info.is_parameter else "Tensor", tensor=info))


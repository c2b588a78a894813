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
from dataclasses import dataclass
from typing import Any

from ckptview.core import dtypes
from ckptview.core.budget import Budget, json_units
from ckptview.core.checkpoint import BoundedWarnings, Checkpoint, Node, OpenFiles, TensorInfo
from ckptview.core.errors import UNRECOVERABLE, CheckpointFormatError, NotACheckpointError
from ckptview.core.read.bytes.files import FileIdentity
from ckptview.core.read.bytes.fs import LOCAL, FileSystem
from ckptview.core.read.bytes.remote.causes import is_missing
from ckptview.core.read.context import DEFAULT, ReaderContext, Source
from ckptview.core.units import plural

NAME = "hf-sharded"
PRIORITY = 60
# The formats a Hub folder opens as: its weights in shards (or with an index), or in one file.
SHARDED_FORMATS = ("hf-sharded-safetensors", "hf-sharded-bin")
ONE_FILE_FORMATS = ("hf-safetensors", "hf-bin")
HUB_FORMATS = SHARDED_FORMATS + ONE_FILE_FORMATS
MAX_INDEX_BYTES = 256 << 20
# How many names an index may map, before its JSON is parsed (parsed whole, each name costs ~100 bytes
# of Python objects: 21 million tiny names under the byte limit took 2.7-4.3 GB). Up to MIN_INDEX_ENTRIES
# always (an index downloaded with one shard of many); past it, as many as the shard files beside it can
# hold (every tensor costs its shard at least SHARD_BYTES_PER_TENSOR bytes of header), never past
# MAX_INDEX_ENTRIES (the safetensors reader's limit for one file; real models hold ~100k tensors).
MIN_INDEX_ENTRIES = 100_000
MAX_INDEX_ENTRIES = 1_000_000
SHARD_BYTES_PER_TENSOR = 24
INDEX_PIECE = 16 << 20  # bytes read and counted at a time
ENTRY_COST = 16  # units an entry placed costs (a Node over a shard's tensor, its shard record)
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
# Weight file bases the libraries write (transformers, diffusers, peft, ...), preferred in this order.
LIBRARY_BASES = ("model", "diffusion_pytorch_model", "pytorch_model", "adapter_model", "pytorch_lora_weights")
# `{base}[.{variant}][-00001-of-00002].{safetensors|bin}` and `{base}.{ext}.index[.{variant}].json`
_WEIGHT = re.compile(r"^(?P<base>[^.]+?)(?:\.(?P<variant>[^.]+?))?(?P<shard>-\d+-of-\d+)?\.(?P<ext>safetensors|bin)$")
_INDEX = re.compile(r"^(?P<base>[^.]+)\.(?P<ext>safetensors|bin)\.index(?:\.(?P<variant>[^.]+))?\.json$")


@dataclass(frozen=True)
class WeightSet:
    """One checkpoint in a Hub folder: a single weight file, a set of shards, or an index and its shards."""

    base: str
    variant: str | None
    ext: str
    files: tuple[str, ...] = ()
    index: str | None = None

    @property
    def label(self) -> str:
        if self.index or len(self.files) == 1:
            return self.index or self.files[0]
        return f"{self.files[0]} (+{plural(len(self.files) - 1, 'shard')})"

    def rank(self) -> tuple[int, int, int, str]:
        """Sort key: plain before variants, library names in their order, safetensors before .bin."""
        lib = LIBRARY_BASES.index(self.base) if self.base in LIBRARY_BASES else len(LIBRARY_BASES)
        return (self.variant is not None, lib, self.ext != "safetensors", self.base)


def weight_sets(folder: str, fs: FileSystem = LOCAL) -> list[WeightSet]:
    """The checkpoints a Hub folder holds, best first: one per (name, variant, format), index or shards."""
    # Everything but folders: a FIFO or socket named like an index must be refused when read, not skipped.
    names = sorted(fs.list_files(folder, special=True))
    sets: dict[tuple[str, str | None, str], WeightSet] = {}
    for n in names:
        m = _INDEX.match(n)
        if m:
            key = (m["base"], m["variant"], m["ext"])
            sets.setdefault(key, WeightSet(*key, index=n))
    files: dict[tuple[str, str | None, str], list[str]] = {}
    for n in names:
        m = _WEIGHT.match(n)
        if m and not (m["ext"] == "bin" and m["base"] not in LIBRARY_BASES and not m["shard"]):
            files.setdefault((m["base"], m["variant"], m["ext"]), []).append(n)
    for key, found in files.items():
        if key not in sets:
            sets[key] = WeightSet(*key, files=tuple(found))
    return sorted(sets.values(), key=WeightSet.rank)


# Files that say a folder is one model's, as the libraries write them beside its weights.
CONFIG_NAMES = ("config.json", "adapter_config.json")


def described(folder: str, fs: FileSystem = LOCAL) -> bool:
    """True when `folder` holds a config the libraries write beside a model's weights."""
    return any(fs.isfile(fs.join(folder, name)) for name in CONFIG_NAMES)


def _index_files(folder: str, fs: FileSystem) -> list[str]:
    """Index files in `folder`: the standard names first (safetensors before bin), then others."""
    names = sorted(n for n in fs.listdir(folder) if n.endswith(".index.json"))
    return sorted(names, key=lambda n: (INDEX_NAMES.index(n) if n in INDEX_NAMES else len(INDEX_NAMES),
                                        ".bin." in n, n))


def sniff(source: Source) -> bool:
    """True when the source (a folder's content, a file's name and first bytes) looks like a Hugging Face sharded folder or index file."""
    path, head = source.path, source.head
    if source.is_dir:
        try:
            return bool(_index_files(path, source.fs) or weight_sets(path, source.fs))
        except OSError:
            return False
    stripped = head.lstrip()
    return stripped.startswith(b"{") and (b'"weight_map"' in head or path.endswith(".index.json"))


def read_index(path: str, expected: FileIdentity | None = None, fs: FileSystem = LOCAL,
               budget: Budget | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """(weight_map, index metadata) of an index file, validated (refused when it is no longer `expected`); its
    JSON charged to `budget` (one of the index's own bytes when none is given) while it is read."""
    size = fs.getsize(path)
    if size > MAX_INDEX_BYTES:
        raise CheckpointFormatError(f"index file is {size} bytes, more than the {MAX_INDEX_BYTES} allowed")
    raw = _read_counted(path, expected, fs, budget if budget is not None else Budget.for_stored(size, "the index"))
    try:
        index = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise NotACheckpointError(f"not a checkpoint: {os.path.basename(path)} is not valid JSON ({str(exc)[:80]})") \
            from None
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise NotACheckpointError(f"not a checkpoint: {os.path.basename(path)} has no weight_map")
    weight_map = index["weight_map"]
    for key, shard in weight_map.items():  # charged: parsed from the JSON just charged
        if not isinstance(shard, str) or not shard:
            raise CheckpointFormatError(f"index: weight_map['{key}'] is not a file name")
    meta = index.get("metadata")
    return weight_map, meta if isinstance(meta, dict) else {}


def _read_counted(path: str, expected: FileIdentity | None, fs: FileSystem, budget: Budget) -> bytes:
    """The index's bytes, read in pieces and refused as soon as they hold more names than allowed.

    Every JSON value after the first follows a ',', ':' or '[', and every object starts with '{': their
    count (taken in C, no allocation) bounds how many values and names a parse would build. An index
    past the limit of what the shard files beside it can describe is refused before it is parsed, and
    before more of it than the piece that crossed the limit is held.
    """
    pieces: list[bytes] = []
    held = values = 0
    limit: int | None = None
    with fs.open_regular(path, expected) as fh:  # never blocks on a FIFO named like an index
        while piece := fh.read(INDEX_PIECE):  # each piece charged by what its parse will build
            held += len(piece)
            if held > MAX_INDEX_BYTES:  # it grew while read
                raise CheckpointFormatError(f"index file is over the {MAX_INDEX_BYTES} bytes allowed")
            budget.charge(json_units(piece), f"JSON of {os.path.basename(path)[:120]}")
            values += piece.count(b",") + piece.count(b":") + piece.count(b"[") + piece.count(b"{")
            entries = values // 2  # each weight_map entry is a name and a value
            if entries > MIN_INDEX_ENTRIES:
                if limit is None:
                    shard_bytes = None if fs.remote else _shard_bytes(path)
                    limit = MAX_INDEX_ENTRIES if shard_bytes is None else min(
                        MAX_INDEX_ENTRIES, max(MIN_INDEX_ENTRIES, shard_bytes // SHARD_BYTES_PER_TENSOR))
                if entries > limit:
                    name, seen = os.path.basename(path), f"{entries:,} in its first {held:,} bytes"
                    if shard_bytes is None:
                        raise CheckpointFormatError(f"index {name} lists more entries than a remote index may "
                                                    f"({limit:,}; {seen}); refused before parsing")
                    raise CheckpointFormatError(
                        f"index {name} lists more entries than the shard files beside it can hold (at most "
                        f"{limit:,} for their {shard_bytes:,} bytes; {seen}); refused before parsing")
            pieces.append(piece)
    return b"".join(pieces)


def _shard_bytes(path: str) -> int | None:
    """Total size of the files beside a local index (its shards and anything else); a remote index gets
    the fixed limit instead (one request per file to find out)."""
    folder = os.path.dirname(os.path.abspath(path))
    total = 0
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if not entry.name.endswith(".json") and entry.is_file():
                    total += entry.stat().st_size
    except OSError:
        return 0
    return total


def _shard_path(folder: str, name: str, fs: FileSystem) -> str:
    folder = fs.abspath(folder)
    path = fs.abspath(fs.join(folder, name))
    if not fs.inside(path, folder):  # an index must not point outside its folder
        raise CheckpointFormatError(f"index names shard {name!r} outside its folder")
    return path


def choose_set(folder: str, fs: FileSystem = LOCAL) -> tuple[WeightSet | None, list[str]]:
    """The weight set a folder opens as, and warnings naming the others (variants are separate checkpoints)."""
    sets = weight_sets(folder, fs)
    if not sets:
        return None, []
    chosen = sets[0]
    notes = []
    variants = [s for s in sets if s.variant is not None and s is not chosen]
    if variants:
        notes.append("folder also holds variants, each a separate checkpoint (open its file to see it): "
                     + ", ".join(f"{s.variant} ({s.label})" for s in variants))
    plain = [s for s in sets if s.variant is None and s is not chosen]
    if plain:
        notes.append(f"showing {chosen.label}; folder also holds " + ", ".join(s.label for s in plain)
                     + " (open its file to see it)")
    if chosen.variant is not None:
        notes.insert(0, f"folder holds only variant weights; showing variant '{chosen.variant}' ({chosen.label})")
    return chosen, notes


def open(source: Source, ctx: ReaderContext = DEFAULT) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read a Hugging Face sharded folder or index file into a Checkpoint: metadata only, no tensor bytes, nothing run."""
    path = source.path
    if ctx.inside_index:
        # A shard that is itself an index (the index naming itself, or a cycle): one line, no recursion.
        raise CheckpointFormatError(f"{os.path.basename(path)} is an index file, named as a shard by another index")
    if source.is_dir:
        chosen, others = choose_set(path, source.fs)
        if chosen is None:
            raise NotACheckpointError(f"not a checkpoint: folder {path} holds no index file and no shards")
        return open_set(path, chosen, others, ctx, source)
    return _open_files(path, source.fs.dirname(path), path, [], [], ctx, source.fs, source.identity)


def open_set(folder: str, chosen: WeightSet, warnings: list[str] | None, ctx: ReaderContext,
             source: Source) -> Checkpoint:
    """Open one weight set of a Hub folder (its index and shards, or its shard files) as one checkpoint.

    `source` is the folder's (the open began with it): its index is read as the file found then."""
    fs = source.fs
    index_path = fs.join(folder, chosen.index) if chosen.index is not None else None
    expected = source.child_identity(index_path) if index_path is not None else None
    return _open_files(folder, folder, index_path, list(chosen.files), list(warnings or []), ctx, fs, expected)


def _open_files(path: str, folder: str, index_path: str | None, files: list[str], notes: list[str],
                ctx: ReaderContext, fs: FileSystem, index_identity: FileIdentity | None = None) -> Checkpoint:
    warnings: list[str] = BoundedWarnings()
    warnings.extend(notes)
    budget = ctx.budget_for(Source(path, fs=fs))
    if index_path is not None:
        weight_map, index_meta = read_index(index_path, index_identity, fs, budget)
        shard_names = list(dict.fromkeys(weight_map.values()))
    else:
        weight_map, index_meta = {}, {}
        shard_names = files
    shards: dict[str, Checkpoint] = {}
    shard_ctx = ctx.in_index()  # the shards join this open's session; an index among them is refused
    paths: dict[str, str] = {}
    for name in shard_names:  # each shard opened is charged (OPEN_COST, by the open itself)
        shard_path = _shard_path(folder, name, fs)
        # A remote shard's absence is told by its open's first request (asking first costs a round trip).
        if not fs.remote and not fs.isfile(shard_path):
            warnings.append(f"shard '{name}' is missing")
            continue
        paths[name] = shard_path
    # Every shard's header at once where they are remote: a handful of round trips for hundreds of shards.
    for name, opened in zip(paths, shard_ctx.open_children(list(paths.values()), "shards"), strict=True):
        if isinstance(opened, Checkpoint):
            shards[name] = opened
        elif is_missing(opened):
            warnings.append(f"shard '{name}' is missing")
        elif isinstance(opened, UNRECOVERABLE):  # a network failure or a changed file: never a partial set
            raise opened
        elif index_path is None and len(shard_names) > 1:  # a stray file in a folder of shards
            warnings.append(f"'{name}' skipped: {opened}")
        else:
            raise CheckpointFormatError(f"shard '{name}': {opened}") from None
    if not shards:
        raise CheckpointFormatError("none of the shards could be opened")
    return _combine(path, folder, index_path, weight_map, index_meta, shards, warnings, fs, budget)


def _combine(path: str, folder: str, index_path: str | None, weight_map: dict[str, str],
             index_meta: dict[str, Any], shards: dict[str, Checkpoint], warnings: list[str],
             fs: FileSystem, budget: Budget) -> Checkpoint:
    kinds = {s.format for s in shards.values()}
    # One weight file (`save_pretrained` under its shard size) is no set of shards.
    sharded = index_path is not None or len(shards) > 1
    fmt = ("hf-sharded-" if sharded else "hf-") + ("safetensors" if kinds == {"safetensors"} else "bin")
    root = Node(key="", kind="dict", type_name=fmt)
    by_shard = {name: _tensor_infos(s) for name, s in shards.items()}  # charged: each just below
    budget.charge(ENTRY_COST * (len(weight_map) + sum(map(len, by_shard.values())) + 1), "index entries placed")
    # Every tensor of a shard names it with the same (read-only) value: one list, not one per tensor.
    named = {shard: [{"file": shard}] for shard in by_shard}
    children: list[Node] = []
    for key, shard in weight_map.items():  # charged above
        infos = by_shard.get(shard)
        if infos is None:
            continue  # the shard's absence is already a warning
        info = infos.pop(key, None)  # taken: what stays in `infos` is what the index does not list
        if info is None:
            warnings.append(f"tensor '{key}' is listed in the index but missing from shard '{shard}'")
            continue
        children.append(_tensor_node(root, key, info, named[shard]))
    for shard, infos in by_shard.items():
        for key, info in infos.items():  # charged above
            if index_path is not None:
                warnings.append(f"tensor '{key}' in shard '{shard}' is not listed in the index")
            children.append(_tensor_node(root, key, info, named[shard]))
    if children:
        root.children = children
    seen: dict[str, None] = {}  # every global named, in order (sets: shards may name many)
    bad: dict[str, None] = {}
    files = OpenFiles()
    for name, shard_ckpt in shards.items():
        seen.update(dict.fromkeys(shard_ckpt.globals))
        bad.update(dict.fromkeys(shard_ckpt.unsafe_globals))
        warnings.extend(f"{name}: {w}" for w in shard_ckpt.warnings)  # bounded: each warning once (BoundedWarnings)
        files.add(shard_ckpt.files)
    total = sum(s.file_size for s in shards.values()) + (fs.getsize(index_path) if index_path else 0)
    first = next(iter(shards.values()))
    metadata: dict[str, Any] = {"shards": list(shards), "index_metadata": index_meta,
                                "index": os.path.basename(index_path) if index_path else None}
    for node in first.root.children:  # a safetensors shard's __metadata__ (the same in every shard)
        if node.key == "__metadata__":
            metadata["shard_metadata"] = {c.key: c.value for c in node.children}  # bounded: one node's, once
    declared = index_meta.get("total_size")
    actual = _stored_bytes(root)
    if isinstance(declared, int) and declared != actual:
        warnings.append(f"index declares total_size {declared}, the shards hold {actual} bytes of tensors")
    return Checkpoint(path=path if not fs.isdir(path) else folder, format=fmt, file_size=total, root=root,
                      globals=list(seen), unsafe_globals=list(bad), warnings=warnings, metadata=metadata, files=files)


def _stored_bytes(root: Node) -> int:
    """Tensor bytes as the index's total_size counts them: a storage shared by tied tensors once."""
    seen: set[int] = set()
    total = 0
    sizes: dict[str, int] = {}  # itemsize by dtype (91,000 tensors, a handful of dtypes)
    for node in root.children:
        info = node.tensor
        if info is None:
            continue
        if info.storage is not None:
            if id(info.storage) in seen:
                continue
            seen.add(id(info.storage))
        size = sizes.get(info.dtype)
        if size is None:
            size = sizes[info.dtype] = dtypes.itemsize(info.dtype)
        total += info.numel * size  # TensorInfo.nbytes, the itemsize looked up once per dtype
    return total


def _tensor_infos(shard: Checkpoint) -> dict[str, TensorInfo]:
    """A shard's tensors by name. A safetensors shard's are its root's tensor children (its reader makes
    nothing deeper): read straight from them, without a `TensorEntry` each (91,000 in a 163-shard model)."""
    if shard.format == "safetensors":
        return {c.key: c.tensor for c in shard.root.children  # type: ignore[misc]  # its keys are str
                if c.kind == "tensor" and c.tensor is not None}
    return {e.name: e.info for e in shard.tensors()}


def _tensor_node(root: Node, key: str, info: TensorInfo, shard: list[dict[str, str]]) -> Node:
    info.set_extra("shards", shard)
    return Node(key, "tensor", "Parameter" if info.is_parameter else "Tensor", (), info, None, root)


"""`torch.distributed.checkpoint` (DCP) folders: a pickled `.metadata` plus `__R_N.distcp` files.

`.metadata` is read with the safe pickle VM only; its dataclasses (`Metadata`, `TensorStorageMetadata`,
`ChunkStorageMetadata`, `MetadataIndex`, `_StorageInfo`, ...) arrive as inert stubs whose recorded state
we decode here. Nothing else is read at open time except small non-tensor items.

What torch (2.x, FileSystemWriter default) writes into a `.distcp` file: one record per item, back to
back. A tensor chunk's record is a complete `torch.save(chunk)` zip archive; a non-tensor item's
record is the `torch.save(obj)` zip of that object. The metadata's `_StorageInfo(relative_path,
offset, length)` locates each record. A tensor's value is assembled from its chunk records on demand
(`ckptview.core.read.values.assembled`).

Each tensor's `info.extra["shards"]` lists its chunks: `{"file", "offsets", "sizes", "byte_offset",
"byte_length"}`; offsets/sizes are the chunk's place in the global tensor, byte_offset/byte_length the
record's range in the file (a torch.save archive, not raw values).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from ckptview.core import dtypes
from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Node, NodeKind, OpenFiles, Storage, TensorInfo
from ckptview.core.errors import CheckpointFormatError, NotACheckpointError, TensorDataError
from ckptview.core.read.bytes.files import FileIdentity, FileMap
from ckptview.core.read.bytes.fs import FileSystem
from ckptview.core.read.context import DEFAULT, ReaderContext, Source
from ckptview.core.read.formats.torch_zip import load_embedded
from ckptview.core.read.pickle.to_tree import build_tree
from ckptview.core.read.pickle.torch_tree import load_torch_pickle, unsafe_of
from ckptview.core.read.pickle.vm import StubObject
from ckptview.core.read.values.assembled import AssembledSource, Chunk, coverage_problem

NAME = "dcp"
PRIORITY = 110  # above torch-zip: a `.distcp` file is a run of zips that torch-zip would half-read
METADATA_FILE = ".metadata"
MAX_METADATA_BYTES = 1 << 30
MAX_BYTES_ITEM = 16 << 20  # non-tensor items larger than this are listed, not read
ENTRY_COST = 12  # units an item, chunk or storage record of the metadata costs (its objects, its node)
ITEM_READ_COST = 8192  # units a non-tensor item read costs beyond its bytes (a zip directory, a pickle)
_DISTCP = re.compile(r"^__\d+_\d+\.distcp$")
_DCP = "torch.distributed.checkpoint."
# The dataclasses a DCP `.metadata` always names: decoded here, never constructed.
EXPECTED_GLOBALS = {
    _DCP + "metadata." + n for n in (
        "Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata",
        "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")
} | {_DCP + "filesystem._StorageInfo", "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePosixPath"}


def _folder_of(path: str, fs: FileSystem) -> str | None:
    """The DCP folder `path` names (the folder, its `.metadata` or one of its `.distcp` files)."""
    if fs.isdir(path):
        return path if fs.isfile(fs.join(path, METADATA_FILE)) else None
    name = os.path.basename(path)
    folder = fs.dirname(path)
    if (name == METADATA_FILE or _DISTCP.match(name)) and fs.isfile(fs.join(folder, METADATA_FILE)):
        return folder
    return None


def sniff(source: Source) -> bool:
    """True when the source (a folder, its .metadata or one of its .distcp files) looks like a torch.distributed.checkpoint folder."""
    path, head = source.path, source.head
    if source.is_dir:
        return _folder_of(path, source.fs) is not None
    if head.startswith(b"\x80") and b"torch.distributed.checkpoint" in head:
        return True  # a `.metadata` pickle, whatever its file name
    return _folder_of(path, source.fs) is not None and head.startswith(b"PK\x03\x04")


# -- decoding the metadata stubs ----------------------------------------------------------------

def fields(obj: Any) -> dict[str, Any]:
    """The attributes a pickled dataclass stub carries (dict state, or (dict, slots) state)."""
    if not isinstance(obj, StubObject):
        return {}
    state = obj.state
    if isinstance(state, dict):
        return state
    if isinstance(state, tuple) and len(state) == 2:
        out: dict[str, Any] = {}
        for part in state:
            if isinstance(part, dict):
                out.update(part)
        return out
    return {}


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                        for v in value):
        raise CheckpointFormatError(f"DCP metadata: {what} is not a list of integers")
    return tuple(value)


def _dtype_of(properties: Any) -> str:
    state = properties.state if isinstance(properties, StubObject) else None
    if isinstance(state, tuple) and state:  # TensorProperties.__getstate__: (dtype, layout, ...)
        dtype = state[0]
    elif isinstance(state, dict):
        dtype = state.get("dtype")
    else:
        dtype = None
    if not isinstance(dtype, str) or not dtypes.is_known(dtype):
        raise CheckpointFormatError(f"DCP metadata: unknown tensor dtype {dtype!r}")
    return dtypes.canonical(dtype)


def _requires_grad(properties: Any) -> bool:
    state = properties.state if isinstance(properties, StubObject) else None
    if isinstance(state, tuple) and len(state) > 2:
        return state[2] is True
    return isinstance(state, dict) and state.get("requires_grad") is True


@dataclass(frozen=True)
class Location:
    """Where one item's record lies: file (relative to the folder), byte offset, byte length."""

    file: str
    offset: int
    length: int
    transforms: tuple[str, ...] = ()

    def where(self) -> str:
        return f"{self.file} @ {self.offset}"


def _locations(storage_data: Any, budget: Budget) -> dict[tuple[str, tuple[int, ...] | None], Location]:
    """(fqn, chunk offsets or None) -> Location, from the metadata's storage_data mapping."""
    if not isinstance(storage_data, dict):
        raise CheckpointFormatError("DCP metadata: storage_data is not a mapping (not a FileSystemWriter checkpoint?)")
    out: dict[tuple[str, tuple[int, ...] | None], Location] = {}
    budget.charge(ENTRY_COST * (len(storage_data) + 1), "storage records listed")
    for index, info in storage_data.items():  # charged above: each record
        key_fields, info_fields = fields(index), fields(info)
        fqn = key_fields.get("fqn")
        rel, offset, length = (info_fields.get(k) for k in ("relative_path", "offset", "length"))
        if not isinstance(fqn, str) or not isinstance(rel, str) or not isinstance(offset, int) \
                or not isinstance(length, int):
            raise CheckpointFormatError("DCP metadata: malformed storage_data entry")
        chunk_offset = key_fields.get("offset")
        key = (fqn, None if chunk_offset is None else _ints(chunk_offset, f"offset of '{fqn}'"))
        transforms = info_fields.get("transform_descriptors") or ()
        out[key] = Location(rel, offset, length, tuple(str(t) for t in transforms))
    return out


# -- records inside .distcp files ------------------------------------------------------------

class _Files:
    """The folder's .distcp files, each mapped once and only when first read."""

    def __init__(self, folder: str, opened_as: dict[str, FileIdentity], fs: FileSystem) -> None:
        self.folder, self.fs = folder, fs
        self.maps: dict[str, FileMap] = {}
        self.opened_as = opened_as  # by absolute path: a file read later must be this one

    def get(self, rel: str) -> FileMap:
        if rel not in self.maps:
            fs = self.fs
            folder = fs.abspath(self.folder)
            path = fs.abspath(fs.join(folder, rel))
            if not fs.inside(path, folder):  # a hostile '../' must not read elsewhere
                raise TensorDataError(f"record path {rel!r} leaves the checkpoint folder")
            if not fs.isfile(path):
                raise TensorDataError(f"file '{rel}' missing from the checkpoint folder")
            self.maps[rel] = fs.file_map(path, self.opened_as.get(path))
        return self.maps[rel]


def _chunk_resolver(files: _Files, loc: Location) -> Any:
    def resolve() -> TensorInfo:
        if loc.transforms:
            raise TensorDataError(f"stored with transforms {list(loc.transforms)}, which this reader does not undo")
        fmap = files.get(loc.file)
        if fmap.read(loc.offset, 4) != b"PK\x03\x04":
            raise TensorDataError("not a torch.save record (a safetensors-format DCP checkpoint?)")
        obj, _ = load_embedded(fmap, loc.offset, loc.length, loc.where())
        if not isinstance(obj, TensorInfo):
            raise TensorDataError(f"record holds a {type(obj).__name__}, not a tensor")
        return obj

    return resolve


# -- building the checkpoint -------------------------------------------------------------------

def _tree_path(fqn: str, planner_data: Any) -> tuple[Any, ...]:
    """The item's nested path (from planner_data) when it spells the FQN, else the FQN as one key."""
    path = planner_data.get(fqn) if isinstance(planner_data, dict) else None
    if (isinstance(path, (tuple, list)) and path and all(isinstance(p, (str, int)) for p in path)
            and ".".join(str(p) for p in path) == fqn):
        return tuple(path)
    return (fqn,)


class _TreeBuilder:
    def __init__(self, budget: Budget) -> None:
        self.root = Node(key="", kind="dict", type_name="dcp")
        self._dirs: dict[tuple[Any, ...], Node] = {(): self.root}
        self.budget = budget

    def parent_of(self, path: tuple[Any, ...]) -> Node:
        self.budget.charge(len(path) * len(path), "path components looked up")  # a prefix per level
        for depth in range(1, len(path)):  # charged above
            prefix = path[:depth]
            if prefix not in self._dirs:
                parent = self._dirs[path[: depth - 1]]
                # DCP flattens lists with int path components (`optim.param_groups.0.lr`) and rebuilds a
                # list for them on load; dict keys are always str in its paths.
                kind: NodeKind = "list" if isinstance(path[depth], int) else "dict"
                self._dirs[prefix] = parent.add(Node(key=path[depth - 1], kind=kind, type_name=kind))
        return self._dirs[path[:-1]]


def _tensor_info(fqn: str, meta: dict[str, Any], locs: dict[tuple[str, tuple[int, ...] | None], Location],
                 files: _Files, budget: Budget) -> TensorInfo:
    dtype = _dtype_of(meta.get("properties"))
    shape = _ints(meta.get("size"), f"size of '{fqn}'")
    chunk_stubs = meta.get("chunks")
    if not isinstance(chunk_stubs, list):
        raise CheckpointFormatError(f"DCP metadata: chunks of '{fqn}' are not a list")
    chunks: list[Chunk] = []
    shards: list[dict[str, Any]] = []
    broken: str | None = None
    budget.charge(ENTRY_COST * (len(chunk_stubs) + 1), "chunks listed")
    for stub in chunk_stubs:  # charged above: each chunk
        f = fields(stub)
        offsets = _ints(f.get("offsets"), f"chunk offsets of '{fqn}'")
        sizes = _ints(f.get("sizes"), f"chunk sizes of '{fqn}'")
        loc = locs.get((fqn, offsets))
        if loc is None:
            broken = broken or f"no stored record for the chunk at offsets {list(offsets)}"
            continue
        if loc.transforms:
            broken = broken or f"chunks are stored with transforms {list(loc.transforms)} (not supported)"
        chunks.append(Chunk(offsets, sizes, _chunk_resolver(files, loc), loc.where()))
        shards.append({"file": loc.file, "offsets": list(offsets), "sizes": list(sizes),
                       "byte_offset": loc.offset, "byte_length": loc.length})
    broken = broken or coverage_problem(shape, chunks)
    numel = math.prod(shape)
    source = AssembledSource(shape, chunks, sorted({s["file"] for s in shards}))
    storage = Storage(key=f"dcp:{fqn}", dtype=dtype, numel=numel, device="cpu", source=source)
    stride, acc = [], 1
    budget.charge(len(shape), "sizes read")
    for size in reversed(shape):  # charged above
        stride.append(acc)
        acc *= max(size, 1)
    info = TensorInfo(dtype=dtype, shape=shape, stride=tuple(reversed(stride)), offset=0, storage=storage,
                      requires_grad=_requires_grad(meta.get("properties")), extra={"shards": shards})
    info.broken = broken
    return info


class DcpBytesItem:
    """A non-tensor item that was not read (too large, or over the count limit): where it lies."""

    def __init__(self, loc: Location, reason: str) -> None:
        self.loc, self.reason = loc, reason

    def __repr__(self) -> str:
        return f"<{self.loc.length}-byte torch.save'd object at {self.loc.where()}: {self.reason}>"


def _read_bytes_item(files: _Files, loc: Location, budget: Budget) -> tuple[Any, list[str]]:
    if loc.transforms:
        return DcpBytesItem(loc, f"stored with transforms {list(loc.transforms)}"), []
    if loc.length > MAX_BYTES_ITEM:
        return DcpBytesItem(loc, "not read (large)"), []
    if not budget.affords(ITEM_READ_COST + 4 * loc.length):
        return DcpBytesItem(loc, "not read (the folder's work budget is spent)"), []
    return load_embedded(files.get(loc.file), loc.offset, loc.length, loc.where(), budget)


def _opened_as(source: Source, folder: str) -> dict[str, FileIdentity]:
    """The identities of the folder's files (by absolute path) as the open found them: the source's own
    when the source is the folder or one of its files, a scan of the folder for the rest."""
    fs = source.fs
    if source.is_dir and source.identities is not None and fs.abspath(source.path) == fs.abspath(folder):
        return {fs.abspath(p): identity for p, identity in source.identities.items()}
    found = fs.folder_identities(fs.abspath(folder))
    if source.identity is not None:  # the file the open began with: as it was then
        found[fs.abspath(source.path)] = source.identity
    return found


def open(source: Source, ctx: ReaderContext = DEFAULT) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read a torch.distributed.checkpoint folder into a Checkpoint: metadata only, no tensor bytes, nothing run."""
    path, fs = source.path, source.fs
    budget = ctx.budget_for(source)
    folder = _folder_of(path, fs) or fs.dirname(path)
    meta_path = fs.join(folder, METADATA_FILE)
    if not fs.isfile(meta_path):
        raise NotACheckpointError(f"not a checkpoint: DCP folder {folder} has no .metadata file")
    size = fs.getsize(meta_path)
    if size > MAX_METADATA_BYTES:
        raise CheckpointFormatError(f"DCP .metadata is {size} bytes, more than the {MAX_METADATA_BYTES} allowed")
    files = _Files(folder, _opened_as(source, folder), fs)
    with fs.open_regular(meta_path, files.opened_as.get(fs.abspath(meta_path))) as fh:  # never blocks on a FIFO
        data = fh.read()
    obj, globals_seen, _ = load_torch_pickle(data, None, what=".metadata", budget=budget)
    if not isinstance(obj, StubObject) or not obj.cls.endswith("checkpoint.metadata.Metadata"):
        raise NotACheckpointError(f"not a checkpoint: .metadata holds a {getattr(obj, 'cls', type(obj).__name__)}, "
                                  "not DCP metadata")
    top = fields(obj)
    items = top.get("state_dict_metadata")
    if not isinstance(items, dict):
        raise CheckpointFormatError("DCP metadata: state_dict_metadata is not a mapping")
    locs = _locations(top.get("storage_data"), budget)
    builder = _TreeBuilder(budget)
    warnings: list[str] = []
    budget.charge(ENTRY_COST * (len(items) + 1), "items listed")
    seen = dict.fromkeys(globals_seen)  # every global named, in order (a set: items may name many)
    for fqn, item in items.items():  # charged above: each item
        if not isinstance(fqn, str) or not isinstance(item, StubObject):
            raise CheckpointFormatError("DCP metadata: malformed state_dict_metadata entry")
        tree_path = _tree_path(fqn, top.get("planner_data"))
        parent = builder.parent_of(tree_path)
        if item.cls.endswith(".TensorStorageMetadata"):
            info = _tensor_info(fqn, fields(item), locs, files, budget)
            parent.add(Node(key=tree_path[-1], kind="tensor", type_name="Tensor", tensor=info))
            if info.broken:
                warnings.append(f"tensor '{fqn}' is broken: {info.broken}")
            continue
        if not item.cls.endswith(".BytesStorageMetadata"):
            warnings.append(f"item '{fqn}' has unknown storage kind {item.cls}; listed as a value")
        loc = locs.get((fqn, None))
        if loc is None:
            value: Any = f"<no stored record for '{fqn}'>"
            warnings.append(f"item '{fqn}' has no stored record")
        else:
            try:
                value, item_globals = _read_bytes_item(files, loc, budget)
            except (CheckpointFormatError, TensorDataError) as exc:
                value, item_globals = DcpBytesItem(loc, f"unreadable: {exc}"), []
                warnings.append(f"item '{fqn}' is unreadable: {exc}")
            seen.update(dict.fromkeys(item_globals))
        node = build_tree(value, budget)
        node.key = tree_path[-1]
        parent.add(node)
    globals_seen = list(seen)
    listing = fs.listdir(folder)
    budget.charge(ENTRY_COST * (len(listing) + 1), "folder entries listed")
    total = size + sum(fs.getsize(fs.join(folder, f)) for f in listing
                       if f.endswith(".distcp") and fs.isfile(fs.join(folder, f)))
    unsafe = [g for g in unsafe_of(globals_seen) if g not in EXPECTED_GLOBALS]
    ckpt = Checkpoint(path=folder, format=NAME, file_size=total, root=builder.root, globals=list(globals_seen),
                      unsafe_globals=unsafe, warnings=warnings, files=OpenFiles(_LazyMaps(files)),
                      metadata={"dcp_version": top.get("version"),
                                "files": sorted({loc.file for loc in locs.values()})})
    if unsafe:
        ckpt.warnings.insert(0, "file references globals outside the safe set (nothing was run): " + ", ".join(unsafe))
    return ckpt


class _LazyMaps:
    """The folder's file maps for its OpenFiles: the maps opened so far, evaluated when iterated."""

    def __init__(self, files: _Files) -> None:
        self.files = files

    def __iter__(self) -> Any:
        return iter(list(self.files.maps.values()))

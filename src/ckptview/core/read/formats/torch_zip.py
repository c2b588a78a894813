"""torch.save's zip format (PyTorch >= 1.6: .pth/.pt/.ckpt/.bin) and TorchScript archives.

Reads the central directory and `data.pkl` only. Storages become lazily-read zip members; nothing
else is read until a value is asked for.

A file cut short (a download that stopped) has no central directory: its records before the cut are found
by their local headers instead (`zip_salvage`; data.pkl comes first and says how large every storage is),
the listing is whole, the tensors whose records the cut took are marked broken, and the first warning says
what happened (`salvaged`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

from ckptview.core import dtypes
from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Storage
from ckptview.core.errors import CheckpointFormatError, NotACheckpointError, TensorDataError
from ckptview.core.read.bytes.files import FileMap
from ckptview.core.read.bytes.sources import ZipMember
from ckptview.core.read.bytes.zip_salvage import LocalRecords, Salvaged
from ckptview.core.read.bytes.zipdir import TruncatedZip, ZipEntry, case_collision, read_central_directory
from ckptview.core.read.context import DEFAULT, ReaderContext, Source
from ckptview.core.read.pickle.census import census
from ckptview.core.read.pickle.torch_globals import StorageClass
from ckptview.core.read.pickle.torch_tree import load_torch_pickle, make_checkpoint
from ckptview.core.read.pickle.vm import StubObject
from ckptview.core.units import human_bytes, plural

NAME = "torch-zip"
PRIORITY = 100
MAX_PICKLE_BYTES = 2 << 30  # data.pkl of 100k tensors is ~10 MB; refuse absurd declared sizes

ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")


def sniff(source: Source) -> bool:
    """True when the source's first bytes look like a zip archive (torch.save, TorchScript)."""
    return source.head.startswith(ZIP_MAGICS)


class ZipArchive:
    """The records of a torch zip archive, by name below its root folder."""

    # The record that marks the archive's root folder (a torch.save archive: data.pkl).
    MARKER = "data.pkl"

    def __init__(self, path: str, start: int = 0, length: int | None = None, what: str = "zip",
                 fmap: FileMap | None = None, budget: Budget | None = None,
                 salvaged: tuple[list[ZipEntry], Salvaged] | None = None) -> None:
        """`salvaged`: the records of a file cut short, found by their local headers, and where that stopped."""
        self.path, self.what, self.budget = path, what, budget
        self.fmap = fmap or FileMap(path)
        if start < 0 or (length is not None and (length < 0 or start + length > self.fmap.size)):
            raise TensorDataError(f"record {what} runs past the end of the file ({self.fmap.size} bytes)")
        self.salvage = salvaged[1] if salvaged is not None else None
        self.expected = 0  # a salvaged archive: the bytes its records need at least (data.pkl's storages)
        if salvaged is not None:
            entries = salvaged[0]
        else:
            entries = read_central_directory(path, start, length, source=self.fmap, budget=budget)
        self.infos: dict[str, ZipEntry] = {entry.name: entry for entry in entries}  # the last of a repeated name
        duplicates: set[str] = set()
        if len(self.infos) != len(entries):
            seen: set[str] = set()
            for entry in entries:
                (duplicates if entry.name in seen else seen).add(entry.name)
        marker = self.MARKER
        if not duplicates and (pair := case_collision(list(self.infos))) is not None:
            # torch's reader finds record names in any case: which of two it would read is not known.
            raise CheckpointFormatError(f"ambiguous {what}: records '{pair[0][:80]}' and '{pair[1][:80]}' differ "
                                        "only in case, one name to torch's reader; refusing to guess")
        roots = [n for n in self.infos if n.endswith("/" + marker) and n.count("/") == 1] + (
            [marker] if marker in self.infos else [])
        if duplicates & set(roots) or len(roots) > 1:
            raise CheckpointFormatError(f"ambiguous {what}: {len(roots) + len(duplicates)} '{marker}' records; "
                                        "refusing to guess which is real")
        if not roots:
            raise NotACheckpointError(f"not a checkpoint: {what} archive has no {marker} record")
        self.root = roots[0].rpartition("/")[0]
        self.prefix = self.root + "/" if self.root else ""

    def has(self, name: str) -> bool:
        return self.prefix + name in self.infos

    def member(self, name: str) -> ZipMember | None:
        info = self.infos.get(self.prefix + name)
        if info is None:
            return None
        return ZipMember(self.fmap, info)

    def read_small(self, name: str, limit: int = MAX_PICKLE_BYTES, budget: Budget | None = None,
                   units: Callable[[bytes | bytearray], int] = len, what: str = "bytes read") -> bytes:
        """A record's bytes, CRC-checked; charged to `budget` (the archive's when not given) as they are read or
        inflated (`units` of each piece)."""
        member = self.member(name)
        if member is None:
            raise CheckpointFormatError(f"record '{name}' missing")
        data = member.read_all(limit, budget if budget is not None else self.budget, units, what)
        info = self.infos[self.prefix + name]
        # torch.serialization.set_crc32_options(False) writes 0 for every record: nothing to check then.
        if info.crc != 0 and zlib.crc32(data) != info.crc:
            raise CheckpointFormatError(f"corrupt zip: CRC mismatch in record '{info.name}'")
        return data


    def byteorder(self) -> str:
        """The archive's byteorder record ('little' when absent, as in files before it existed)."""
        if not self.has("byteorder"):
            return "little"
        order = self.read_small("byteorder", 64).decode("ascii", "replace").strip()
        if order not in ("little", "big"):
            raise CheckpointFormatError(f"byteorder record says {order!r}")
        return order

    def load(self) -> tuple[Any, list[str]]:
        """The archive's object (tensors as lazily read TensorInfo) and the globals it names."""
        obj, globals_seen, _ = load_torch_pickle(self.read_small("data.pkl"),
                                                 storage_loader(self, "data", self.byteorder()),
                                                 what=f"{self.what} data.pkl" if self.what != "zip" else "data.pkl",
                                                 budget=self.budget)
        return obj, globals_seen


def opened_archive(checkpoint: Checkpoint, cls: type[ZipArchive] = ZipArchive, budget: Budget | None = None
                   ) -> ZipArchive:
    """The archive of an opened checkpoint, read again through the file map its open made (a file changed
    since is refused, never read in its place): for readers of its other records (code, programs), whose
    reads charge `budget`."""
    fmap = next((f for f in checkpoint.files if isinstance(f, FileMap) and f.path == checkpoint.path), None)
    if fmap is None:
        raise CheckpointFormatError(f"{checkpoint.path}: the archive is no longer open")
    return cls(checkpoint.path, fmap=fmap, budget=budget)


def load_embedded(fmap: FileMap, offset: int, length: int, what: str, budget: Budget | None = None
                  ) -> tuple[Any, list[str]]:
    """A torch.save archive stored inside a larger file (DCP chunks, .pt2 records): (object, globals); its
    reading charged to `budget` (the enclosing file's)."""
    try:
        return ZipArchive(fmap.path, offset, length, what, fmap=fmap, budget=budget).load()
    except NotACheckpointError as exc:  # inside a checkpoint this is a broken record, not another format
        raise CheckpointFormatError(f"record {what} is not a torch.save archive ({exc})") from None


def storage_loader(archive: ZipArchive, folder: str, byteorder: str) -> Any:
    """The persistent_load for ('storage', class, key, location, numel) ids; one Storage per key."""
    cache: dict[str, Storage] = {}
    infos, prefix = archive.infos, f"{archive.prefix}{folder}/"
    fmap = archive.fmap
    itemsize = dtypes.itemsize

    def load(pid: Any) -> Storage:  # called once per tensor: lean
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise CheckpointFormatError(f"unexpected persistent id {str(pid)[:80]}")
        storage_class, key, location, numel = pid[1], pid[2], pid[3], pid[4]
        if not isinstance(storage_class, StorageClass):
            raise CheckpointFormatError(f"unknown storage type {storage_class!r}")
        if not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise CheckpointFormatError("malformed storage record in data.pkl")
        storage = cache.get(key)
        if storage is not None:
            return storage
        dtype = storage_class.dtype
        record = f"{folder}/{key}"  # as messages name it: storage 'data/7' missing
        storage = cache[key] = Storage(record, dtype, numel, location if type(location) is str else str(location),
                                       None, byteorder)
        info = infos.get(prefix + key)
        if info is None:
            storage.broken = f"storage '{record}' missing"
            if archive.salvage is not None:  # not in the records read before the file ends
                storage.broken = (f"storage '{record}' cut off: the file ends at byte {archive.salvage.size:,}, "
                                  "before its record is whole")
            return storage
        nbytes = numel * itemsize(dtype)
        member = ZipMember(fmap, info)
        member.max_bytes = nbytes  # inflate no more than the storage accounts for
        storage.source = member
        if info.file_size < nbytes:
            storage.broken = f"storage '{record}' holds {info.file_size} bytes, needs {nbytes}"
        return storage

    return load


def open(source: Source, ctx: ReaderContext = DEFAULT) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read a zip archive (torch.save, TorchScript) into a Checkpoint: metadata only, no tensor bytes, nothing run."""
    path = source.path
    budget = ctx.budget_for(source)
    fmap = source.file_map()
    try:
        archive = ZipArchive(path, fmap=fmap, budget=budget)
    except TruncatedZip as exc:
        archive = salvaged_archive(path, fmap, exc, budget)
    byteorder = archive.byteorder()
    is_script = archive.has("constants.pkl") and any(
        n.startswith(archive.prefix + "code/") for n in archive.infos)
    data = archive.read_small("data.pkl")
    obj, globals_seen, _ = load_torch_pickle(data, storage_loader(archive, "data", byteorder), budget=budget)
    metadata: dict[str, Any] = {"archive_root": archive.root, "byteorder": byteorder}
    for record in ("version", ".data/version"):
        if archive.has(record):
            metadata["version"] = archive.read_small(record, 64).decode("ascii", "replace").strip()
            break
    version_warning = _version_problem(metadata.get("version"))
    fmt = NAME
    if is_script:
        fmt = "torchscript"
        constants = archive.read_small("constants.pkl")
        const_obj, const_globals, _ = load_torch_pickle(
            constants, storage_loader(archive, "constants", byteorder), what="constants.pkl", budget=budget)
        globals_seen = list(dict.fromkeys([*globals_seen, *const_globals]))
        if const_obj and isinstance(obj, StubObject):
            obj.items["__constants__"] = const_obj  # shown beside the module's own members
        metadata["code_files"] = sorted(n[len(archive.prefix) + 5:] for n in archive.infos
                                        if n.startswith(archive.prefix + "code/") and n.endswith(".py"))
        # torch.jit.load unpickles more than data.pkl and constants.pkl (traced_inputs.pkl, *.debug_pkl):
        # the run gate's census reads every one of them, and what it finds is listed like the rest.
        found = census(archive.fmap, torchscript=True, budget=budget)
        globals_seen = list(dict.fromkeys([*globals_seen, *found.globals]))
        unreadable = [f"native code: {n} (a compiled library; loading the file runs it)" for n in found.native]
        unreadable += [f"pickle {u} is unreadable: torch.jit.load would unpickle it unchecked"
                       for u in found.unreadable] + [f"not checked: {a}" for a in found.ambiguous]
        if found.native:
            metadata["native_code"] = found.native
    ckpt = make_checkpoint(path, fmt, source.size, obj, globals_seen, budget, files=[archive.fmap], **metadata)
    if archive.salvage is not None:
        ckpt.warnings.insert(0, salvage_warning(ckpt, archive))
    if is_script:
        ckpt.warnings += unreadable
    if byteorder == "big":
        ckpt.warnings.append("file was written on a big-endian machine; values are byte-swapped on read")
    if version_warning:
        ckpt.warnings.append(version_warning)
    _check_dtypes(ckpt)
    return ckpt


# The newest archive format torch reads (caffe2/serialize kMaxSupportedFileFormatVersion); torch.save writes 3.
MAX_KNOWN_VERSION = 10


def _version_problem(version: str | None) -> str | None:
    """A warning when the archive's `version` record is not a format version torch knows."""
    if version is None:
        return None
    if not version.isdigit():
        return f"archive version record {version!r} is not a number; read as format 3"
    if int(version) > MAX_KNOWN_VERSION:
        return (f"archive format version {int(version)} is newer than any torch writes (up to {MAX_KNOWN_VERSION}); "
                "read as format 3, names and values may be wrong")
    return None


def _check_dtypes(ckpt: Checkpoint) -> None:
    known: dict[str, bool] = {}  # a handful of dtypes, 100,000 tensors
    for entry in ckpt.tensors():
        dtype = entry.info.dtype
        ok = known.get(dtype)
        if ok is None:
            ok = known[dtype] = dtypes.is_known(dtype)
        if not ok:
            entry.info.broken = f"unknown dtype {dtype}"


def salvaged_archive(path: str, fmap: FileMap, truncated: TruncatedZip, budget: Budget) -> ZipArchive:
    """The archive of a zip whose end is missing, from the records before the cut (`zip_salvage`); data.pkl,
    the first, says how many bytes each storage record holds. Refused when data.pkl itself is not whole.
    Every byte looked at and every pickle op is charged to the open's `budget`."""
    sizes: dict[str, int] = {}
    walk = LocalRecords(fmap, budget, sizes.get)
    entries: list[ZipEntry] = []
    for entry in walk:
        entries.append(entry)
        root, _, leaf = entry.name.rpartition("/")
        if leaf == ZipArchive.MARKER and root.count("/") == 0 and not sizes:  # data.pkl: the storages' sizes
            sizes.update(_storage_sizes(ZipMember(fmap, entry), root + "/" if root else "", budget))
    stop = walk.result
    if not any(e.name.rpartition("/")[2] == ZipArchive.MARKER for e in entries):
        if stop.cut is not None:  # a record the file ends in, data.pkl not whole before it
            raise CheckpointFormatError(f"truncated zip (an incomplete download?): the file ends at {stop.size:,} "
                                        f"bytes, inside its record '{stop.cut[:80]}', before data.pkl is whole; "
                                        "nothing can be listed")
        raise CheckpointFormatError(f"{truncated}, and no whole data.pkl record before byte {stop.stopped_at:,} "
                                    "(an incomplete download?); nothing can be listed")
    archive = ZipArchive(path, fmap=fmap, budget=budget, salvaged=(entries, stop))
    data_pkl = next(e for e in entries if e.name.rpartition("/")[2] == ZipArchive.MARKER)
    archive.expected = data_pkl.header_offset + data_pkl.compress_size + sum(sizes.values())  # at least
    return archive


def _storage_sizes(member: ZipMember, prefix: str, budget: Budget) -> dict[str, int]:
    """record name -> bytes, for every storage data.pkl names (read with the safe reader, nothing runs)."""
    sizes: dict[str, int] = {}

    def note(pid: Any) -> Storage:
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and isinstance(pid[1], StorageClass) \
                and isinstance(pid[2], str) and isinstance(pid[4], int) and pid[4] >= 0:
            sizes[f"{prefix}data/{pid[2]}"] = pid[4] * dtypes.itemsize(pid[1].dtype)
            return Storage(f"data/{pid[2]}", pid[1].dtype, pid[4], "cpu", None)
        raise CheckpointFormatError(f"unexpected persistent id {str(pid)[:80]}")

    data = member.read_all(MAX_PICKLE_BYTES, budget)
    info = member.entry
    if info.crc != 0 and zlib.crc32(data) != info.crc:
        raise CheckpointFormatError(f"corrupt zip: CRC mismatch in record '{info.name}'")
    load_torch_pickle(data, note, budget=budget)
    return sizes


def salvage_warning(ckpt: Checkpoint, archive: ZipArchive) -> str:
    """The first warning of a salvaged listing: cut short, the size its records need, what was read."""
    stop = archive.salvage
    assert stop is not None
    tensors = ckpt.tensors()
    cut = sum(1 for e in tensors if e.info.storage is not None and e.info.storage.broken and "cut off" in
              e.info.storage.broken)
    expected = archive.expected
    need = (f"its records need at least {expected:,} bytes ({human_bytes(expected)})" if expected > stop.size
            else "its zip directory is missing")
    read = (f"all {plural(len(tensors), 'tensor')} read whole" if not cut else
            f"{len(tensors) - cut} of {plural(len(tensors), 'tensor')} read whole, {cut} cut off and marked broken")
    return (f"salvaged: the file is cut short (an incomplete download?): it ends at {stop.size:,} bytes and {need}; "
            f"listed from the records before the cut: {read}")

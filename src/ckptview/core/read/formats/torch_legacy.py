"""torch.save's legacy format (before PyTorch 1.6, or `_use_new_zipfile_serialization=False`).

Layout: pickled magic number, protocol version and sys_info; the main pickle with storages as
persistent ids; a pickle of the storage keys; then each storage as an int64 element count followed by
its raw bytes, in key order. We compute each storage's offset from the counts without reading data.
torch.load runs all five pickles, so every one is read (`PickleStream`) and its globals reported; the
magic number counts in whatever encoding the unpickler accepts (text, hex, LONG4, padded), and a file
whose first pickle is something else is read as a plain pickle stream.
"""

from __future__ import annotations

import struct
from typing import Any

from ckptview.core import dtypes
from ckptview.core.checkpoint import Checkpoint, Storage
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.bytes.files import FileMap
from ckptview.core.read.bytes.sources import FileSlice
from ckptview.core.read.context import DEFAULT, ReaderContext, Source
from ckptview.core.read.pickle.census import is_torch_tar
from ckptview.core.read.pickle.stream import PickleStream, stream_checkpoint
from ckptview.core.read.pickle.torch_globals import StorageClass
from ckptview.core.read.pickle.torch_tree import make_checkpoint
from ckptview.core.read.pickle.vm import StubObject
from ckptview.core.text import printable
from ckptview.core.units import plural

NAME = "torch-legacy"
PRIORITY = 80
MAGIC_LONG = bytes.fromhex("8a0a6cfc9c46f9206aa85019")  # LONG1 of 0x1950a86a20f9469cfc6c
MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
MAGIC_TEXT = b"L%dL\n" % MAGIC_NUMBER
PROTOCOL_VERSION = 1001
FIRST_PREFIX = 64 << 20  # the pickles of any real legacy file fit: one read, one parse (grown if not)


def sniff(source: Source) -> bool:
    """True when the source's first bytes look like torch.save's legacy format."""
    head = source.head
    # Protocols 2-5: a binary LONG1 after PROTO (and, from protocol 4, a FRAME header);
    # protocols 0-1 write the magic number as text.
    return MAGIC_LONG in head[:32] or head.startswith(MAGIC_TEXT)


def refuse_tar(fmap: FileMap) -> None:
    """Refuse a file torch.load would read as its oldest (tar) format: what ckptview lists is not what it loads."""
    if is_torch_tar(fmap):
        raise CheckpointFormatError("ambiguous file: torch.load reads it as a tar archive (torch's oldest format), "
                                    "not as the pickles ckptview reads; refusing to list what torch would not load")


def is_magic(value: Any) -> bool:
    """True for the value torch.load compares with its magic number (any encoding gives the same int)."""
    return type(value) is int and value == MAGIC_NUMBER


def open(source: Source, ctx: ReaderContext = DEFAULT) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read torch.save's legacy format into a Checkpoint: metadata only, no tensor bytes, nothing run."""
    path = source.path
    fmap = source.file_map()
    budget = ctx.budget_for(source)
    refuse_tar(fmap)
    # The pickles sit at the start, the storages after them: parse a prefix (never the whole file, and
    # never through a map that a shrinking file would turn into SIGBUS), longer until the pickles fit.
    length = min(fmap.size, FIRST_PREFIX)
    while True:  # bounded: the prefix grows fourfold to the file's size; each parse is charged
        stream = PickleStream(fmap.read(0, length), budget=budget)
        try:
            first = stream.read("legacy header")
            if not is_magic(first):  # the bytes looked like a legacy header but the value is not the magic
                whole = PickleStream(fmap.read_all(), budget=budget)  # read whole, as plain_pickle does
                return stream_checkpoint(path, fmap, whole, whole.read("pickle"))
            return read_after_magic(path, fmap, stream)
        except CheckpointFormatError as exc:
            if length >= fmap.size or "truncated" not in str(exc):
                raise
            length = min(fmap.size, length * 4)


def read_after_magic(path: str, fmap: FileMap, stream: PickleStream) -> Checkpoint:
    """The rest of a legacy file whose first pickle (read by `stream`, over a prefix of the file or all of
    it) is the magic number."""
    version = stream.read("legacy header")
    if version != PROTOCOL_VERSION and not isinstance(version, StubObject):
        # torch.load stops here; pickle.load in a loop would not: read the rest for its globals.
        stream.read_rest("pickle")
        raise stream.error(f"legacy torch file with unsupported protocol version {printable(repr(version)[:80])}")
    sys_info = stream.read("legacy sys_info")
    little = not (isinstance(sys_info, dict) and sys_info.get("little_endian") is False)
    byteorder = "little" if little else "big"

    storages: dict[str, Storage] = {}

    def persistent_load(pid: Any) -> Any:
        if not isinstance(pid, tuple) or not pid:
            raise CheckpointFormatError("malformed persistent id in legacy file")
        if pid[0] == "module":  # ('module', class, source file, source): the class is only recorded
            return pid[1] if len(pid) > 1 else None
        if pid[0] != "storage" or len(pid) < 5:
            raise CheckpointFormatError(f"unexpected persistent id {str(pid)[:80]}")
        storage_class, key, location, numel = pid[1], pid[2], pid[3], pid[4]
        view_metadata = pid[5] if len(pid) > 5 else None
        if not isinstance(storage_class, StorageClass) or not isinstance(numel, int) or numel < 0:
            raise CheckpointFormatError("malformed storage record in legacy file")
        key = str(key)
        if key not in storages:
            storages[key] = Storage(key=key, dtype=storage_class.dtype, numel=numel,
                                    device=str(location), byteorder=byteorder)
        if view_metadata is not None:  # very old storage views: (view_key, offset, size)
            raise CheckpointFormatError("legacy storage views (PyTorch < 0.4) are not supported")
        return storages[key]

    obj = stream.read("legacy pickle", persistent_load)
    keys = stream.read("legacy storage keys")
    # A layout torch would refuse still opens: its globals are what matters, and they are all read.
    lost: str | None = None
    if not isinstance(keys, list):
        lost = f"the storage key list is a {type(keys).__name__}, not a list: no storage could be located"
        keys = []
    pos = stream.pos
    size = fmap.size
    counts = _Window(fmap)
    for key in keys:
        storage = storages.get(str(key))
        if pos + 8 > size:
            if storage is not None:
                storage.broken = f"storage '{key}' missing (file truncated)"
            pos = size
            continue
        (numel,) = struct.unpack("<q", counts.read8(pos))
        pos += 8
        if storage is None:
            lost = f"storage '{printable(key)}' is listed but never used: the storages after it cannot be located"
            break
        nbytes = storage.nbytes
        if numel != storage.numel:
            storage.broken = f"storage '{key}' records {plural(numel, 'element')}, the pickle says {storage.numel}"
        elif pos + nbytes > size:
            storage.broken = f"storage '{key}' runs past the end of the file (truncated)"
        storage.source = FileSlice(fmap, pos, nbytes)
        pos += max(nbytes, 0)
    fmap.check()  # the counts came from the file as it was opened
    for key, storage in storages.items():
        if storage.source is None and storage.broken is None:
            storage.broken = f"storage '{key}' missing"
    # torch reads raw storages from here on; anything after them is read as pickles all the same (when it
    # is of a size a pickle could be: a huge tail is reported, not read).
    trailing = 0
    if lost is None and pos < size:
        if size - pos <= FIRST_PREFIX:
            stream.data, stream.pos = memoryview(fmap.read(pos, size - pos)), 0
            trailing = stream.read_rest("pickle after the storages")
        else:
            trailing = size - pos
    ckpt = make_checkpoint(path, NAME, size, obj, stream.globals, stream.budget,
                           byteorder=byteorder, pickles=stream.count, files=[fmap])
    if stream.count > 5:
        ckpt.warnings.append(f"{stream.count - 5} more pickles follow the storages (torch.load does not read "
                             "them); their globals are listed")
    if lost is not None:
        ckpt.warnings.append(lost)
    if trailing:
        ckpt.warnings.append(f"file continues after the storages end: {trailing} more bytes are not a pickle "
                             "and were not read")
    # Storages were created before their data was located: refresh the tensors they broke.
    for entry in ckpt.tensors():
        st = entry.info.storage
        if st is not None and st.broken and not entry.info.broken:
            entry.info.broken = st.broken
            ckpt.warnings.append(f"tensor '{entry.name}' is broken: {st.broken}")
        if not dtypes.is_known(entry.info.dtype):
            entry.info.broken = f"unknown dtype {entry.info.dtype}"
    return ckpt


class _Window:
    """8-byte reads at increasing offsets served from 1 MiB windows (small storages lie close together)."""

    SIZE = 1 << 20

    def __init__(self, fmap: FileMap) -> None:
        self.fmap, self.start, self.data = fmap, 0, b""

    def read8(self, pos: int) -> bytes:
        if not self.start <= pos <= self.start + len(self.data) - 8:
            length = max(8, min(self.SIZE, self.fmap.size - pos))
            buf = bytearray(length)
            self.fmap.readinto(pos, buf, check=False)
            self.start, self.data = pos, bytes(buf)
        return self.data[pos - self.start : pos - self.start + 8]

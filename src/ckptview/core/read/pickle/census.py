"""What torch would run from a file: every pickle it could unpickle and every program it would load.

The load gate (`core.run.load_gate`) refuses to hand a file to torch unless this census found nothing, or
the user trusted exactly what it found; `info` and the window list the same findings. No torch here: the
census reads the file through the byte layer (`core.read.files`, local or remote, never memory-mapped) and
reads archives the way torch's own archive reader (miniz, `PyTorchFileReader`) does:

- the zip directory with offsets as written (`zipdir`: an archive that `zipfile` would read otherwise, a
  zip written twice or behind other bytes, is refused), a record's bytes after its local header, stored
  records read for their declared size, no CRC check;
- record names found case-insensitively, as miniz's lookup finds them: the census picks records by
  lower-cased name, and two records one lookup could mean are refused;
- `torch.load`'s oldest format first: a file that opens as a tar archive is read by torch as one (its
  `storages`, `tensors` and `pickle` members), which the census does not follow: refused;
- programs: TorchScript code (`code/`), an exported program (`models/*.json`) and compiled libraries
  (`data/aotinductor/**`, `*.so`) are code from the file, whatever its pickles say.

A finding is one line naming what would run; what the census cannot establish is a finding too.
"""

from __future__ import annotations

import io
import json
import posixpath
import struct
import tarfile
import zlib
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.budget import Budget, BudgetExceeded, json_units
from ckptview.core.errors import CheckpointError
from ckptview.core.read.bytes.files import FileMap
from ckptview.core.read.bytes.fs import filesystem
from ckptview.core.read.bytes.zipdir import ByteSource, ZipEntry, read_central_directory
from ckptview.core.read.pickle.stream import PickleStream
from ckptview.core.read.pickle.torch_globals import is_safe_global
from ckptview.core.units import plural

# torch.load's legacy header: the pickled magic number, then protocol version, sys_info, the object and its
# storage keys (five pickles in a row, each run by torch), then raw storage bytes.
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PICKLES = 5
ZIP_MAGIC = b"PK\x03\x04"
MAX_PICKLE_BYTES = 512 << 20  # a pickle record larger than this is not checked, so not loaded untrusted
MAX_NESTING = 4  # torch.save archives inside archive records
MAX_PICKLES_PER_STREAM = 64
FIRST_PREFIX = 4 << 20  # a pickle stream is read from a prefix of the file, longer until its pickles fit
_PIECE = 1 << 20  # bytes inflated between two charges
NATIVE_SUFFIXES = (".so", ".dll", ".dylib", ".pyd")
AOTI_DIR = "data/aotinductor/"
_NOT_A_ZIP = "end of central directory not found"


@dataclass
class PickleCensus:
    """Everything torch could run from one file: programs, pickles and the globals they name."""

    pickles: int = 0
    globals: list[str] = field(default_factory=list)
    unsafe: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "record: why" of pickles the safe VM could not read
    programs: list[str] = field(default_factory=list)  # code torch would run: TorchScript, graphs, libraries
    native: list[str] = field(default_factory=list)  # the compiled libraries among them, by record name
    ambiguous: list[str] = field(default_factory=list)  # "what: why" the census cannot say what torch reads
    # The file's own archive (not nested ones): every record name below its root folder, and the CRC-32 of
    # the bytes read from each record the census checked. The worker compares them with torch's own reader.
    records: set[str] = field(default_factory=set)
    checked: dict[str, list[int]] = field(default_factory=dict)

    def findings(self) -> list[str]:
        """What consent must cover: programs, then unsafe globals, then what could not be checked."""
        return [*self.programs, *self.unsafe, *(f"unreadable pickle {u}" for u in self.unreadable),
                *(f"unchecked {a}" for a in self.ambiguous)]

    def _add(self, names: list[str], torchscript: bool) -> None:
        known, bad = set(self.globals), set(self.unsafe)  # sets: a pickle may name thousands
        for name in names:
            if name not in known:
                known.add(name)
                self.globals.append(name)
            if name not in bad and not is_safe_global(name, torchscript=torchscript):
                bad.add(name)
                self.unsafe.append(name)

    def _program(self, text: str) -> None:
        if text not in self.programs:
            self.programs.append(text)


class _Pid:
    """A persistent id (a storage reference) as an inert value: the census needs globals, not tensors."""

    def __init__(self, pid: Any) -> None:
        self.pid = pid


class _Bytes:
    """A record held in memory, read by position like a file of the byte layer."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self, offset: int, length: int) -> bytes:
        return self.data[max(offset, 0) : max(offset, 0) + max(length, 0)]


def census(source: str | FileMap, torchscript: bool | None = None, budget: Budget | None = None) -> PickleCensus:
    """Read everything torch.load / jit.load / export.load could run from `source` (a path, a URL, or a file of
    the byte layer already open), without torch: see the module's doc. Its work is charged to `budget` (one of
    the file's bytes when none is given): a record that inflates past it, or a pickle that costs more than
    the file pays for, is a finding (not checked), never hours of work."""
    result = PickleCensus()
    fmap = filesystem(source).file_map(source) if isinstance(source, str) else source  # local or remote: once
    try:
        if fmap.size == 0:
            return result
        budget = budget if budget is not None else Budget.for_stored(fmap.size, "the file")
        name = posixpath.basename(fmap.path.split("?", 1)[0].rstrip("/")) or "file"
        if is_torch_tar(fmap):
            result.ambiguous.append(f"{name}: torch.load reads it as a tar archive (torch's oldest format), "
                                    "not as the pickles ckptview reads")
        _scan_file(fmap, name, result, torchscript, 0, budget)
    finally:
        if isinstance(source, str):
            fmap.close()
    return result


def census_bytes(data: bytes, name: str = "file", torchscript: bool | None = None) -> PickleCensus:
    """`census` over bytes in memory (a record of another file, as torch.load reads it from a buffer)."""
    result = PickleCensus()
    _scan_file(_Bytes(data), name, result, torchscript, 0, Budget.for_stored(len(data), "the file"))
    return result


# ---------------------------------------------------------------------------------------------------
# torch.load's tar attempt


class _Reader(io.RawIOBase):
    """A read-only file object over a byte source (what tarfile reads)."""

    def __init__(self, source: ByteSource) -> None:
        self.source, self.pos = source, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = {0: pos, 1: self.pos + pos, 2: self.source.size + pos}[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        data = self.source.read(self.pos, len(buffer))
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def is_torch_tar(source: ByteSource) -> bool:
    """True when torch.load (from a file on disk) would take `source` for its legacy tar format.

    torch calls `tarfile.open(fileobj=f, mode="r:")` first and reads the file as a pickle stream only when that
    raises `tarfile.TarError`; this asks the same module the same question (it reads the first headers only).
    """
    if source.size < tarfile.BLOCKSIZE:
        return False
    try:
        with io.BufferedReader(_Reader(source)) as fileobj, tarfile.open(fileobj=fileobj, mode="r:",
                                                                          format=tarfile.PAX_FORMAT):
            return True
    except tarfile.TarError:
        return False
    except Exception:  # noqa: BLE001 - torch.load fails on it too: it reads nothing further
        return False


# ---------------------------------------------------------------------------------------------------
# Files, streams and archives


def _scan_file(source: ByteSource, name: str, result: PickleCensus, torchscript: bool | None, depth: int,
               budget: Budget) -> None:
    """A whole file or a torch.save record: zip members as torch reads them, else a pickle stream."""
    if depth > MAX_NESTING:
        result.unreadable.append(f"{name}: archives nested too deeply")
        return
    is_zip = source.read(0, 4) == ZIP_MAGIC
    try:
        entries: list[ZipEntry] | None = read_central_directory(name, source=source, budget=budget)
    except BudgetExceeded:
        raise
    except CheckpointError as exc:
        entries = None
        if is_zip or _NOT_A_ZIP not in str(exc):  # torch.jit.load / export.load would try it as a zip
            result.unreadable.append(f"{name}: unreadable zip ({str(exc)[:160]})")
    if entries is not None:
        _scan_zip(source, entries, name, result, torchscript, depth, budget)
    if not is_zip:  # torch.load reads a file that does not start as a zip as a pickle stream
        _scan_stream(source, name, result, bool(torchscript), budget)


def _scan_stream(source: ByteSource, name: str, result: PickleCensus, torchscript: bool, budget: Budget) -> None:
    """Consecutive pickles from the start, read by the same stream reader as `info`: the legacy header and
    its four followers, else one; a pickle torch would run that the safe VM cannot read is a finding."""
    length = min(source.size, FIRST_PREFIX)
    while True:  # bounded: the prefix grows eightfold to the record's size; each parse is charged
        stream = PickleStream(source.read(0, length), emulate=False, budget=budget)
        required, failure = 1, None
        while not stream.at_end() and stream.count < MAX_PICKLES_PER_STREAM:  # each pickle begun is charged
            try:
                obj = stream.read(name, _Pid)
            except BudgetExceeded:
                raise
            except CheckpointError as exc:  # any failure of the safe VM on hostile bytes is "not checked"
                if stream.count < required:  # torch would unpickle this one: not readable means not checked
                    failure = str(exc)
                break
            if stream.count == 1 and (obj == LEGACY_MAGIC or stream.globals):
                # torch.load goes on after a magic number (in any encoding: it compares the value), and may after
                # anything the safe VM did not evaluate (a call can be code that returns the magic number).
                required = LEGACY_PICKLES
            if required == LEGACY_PICKLES and stream.count >= LEGACY_PICKLES:
                break  # raw storage bytes follow
        if failure is not None and length < source.size and "truncated" in failure:
            length = min(source.size, length * 8)  # the prefix cut a pickle torch reads whole: read further
            continue
        if failure is not None:
            result.unreadable.append(f"{name} (pickle {stream.count + 1}): {failure[:120]}")
        result.pickles += stream.count
        result._add(stream.globals, torchscript)
        return


def _fold(member: str) -> str:
    """A record name as miniz compares names: ASCII letters in any case are the same."""
    return member.lower()


def _tail(member: str) -> str:
    return member.split("/", 1)[1] if "/" in member else member


def _scan_zip(source: ByteSource, entries: list[ZipEntry], name: str, result: PickleCensus,
              torchscript: bool | None, depth: int, budget: Budget) -> None:
    by_fold: dict[str, ZipEntry] = {}
    for entry in entries:
        other = by_fold.setdefault(_fold(entry.name), entry)
        if other is not entry:
            result.ambiguous.append(f"{name}: records '{other.name[:80]}' and '{entry.name[:80]}' have one name "
                                    "to torch's reader (it finds names in any case), which one it reads is unknown")
            return
    if depth == 0:
        result.records.update(_tail(e.name) for e in entries)
    tails = [_fold(_tail(e.name)) for e in entries]
    code = sum(1 for t in tails if t.startswith("code/"))
    if torchscript is None:  # TorchScript archives carry code/ and constants.pkl
        torchscript = bool(code) and "constants.pkl" in tails
    if code:  # torch.jit.load compiles and runs these (torch.load hands such an archive to torch.jit.load)
        result._program(f"TorchScript code ({plural(code, 'record')} in {name}:code/)" if depth else
                        f"TorchScript code ({plural(code, 'record')} in code/)")
    _programs(entries, name, result, depth)
    referenced = _pt2_pickled_records(source, entries, by_fold, name, result, depth, budget)
    for entry, tail in zip(entries, tails, strict=True):
        kind = referenced.get(entry.name)
        if kind is None:
            if tail.endswith((".pkl", ".debug_pkl")):
                kind = "pickle"
            elif tail.endswith(".pt"):  # sample inputs, legacy weights/constants, serialized_*.pt
                kind = "torch.load"
            elif posixpath.basename(tail).startswith("serialized_") and not tail.endswith("exported_program.json"):
                # torch.export.load's fallback for older archives (Python's zipfile) passes serialized_state_dict
                # .json / serialized_constants.json to torch.load, then again with weights_only=False
                kind = "torch.load"
        if kind is None:
            continue
        where = f"{name}:{entry.name}"
        raw = _read_member(source, entry, where, result, budget)
        if raw is None:
            continue
        if depth == 0:
            result.checked.setdefault(_tail(entry.name), []).append(zlib.crc32(raw))
        if kind == "torch.load":  # an archive inside decides for itself (torch.load hands TorchScript to jit.load)
            _scan_file(_Bytes(raw), where, result, None if raw[:4] == ZIP_MAGIC else torchscript, depth + 1, budget)
        else:
            _scan_stream(_Bytes(raw), where, result, bool(torchscript), budget)


def _programs(entries: list[ZipEntry], name: str, result: PickleCensus, depth: int) -> None:
    """Exported programs and compiled libraries among the records (torch.export.load runs both)."""
    where = f"{name}:" if depth else ""
    aoti: dict[str, list[str]] = {}
    for entry in entries:
        tail = _tail(entry.name)
        folded = _fold(tail)
        if folded.startswith("models/") and folded.endswith(".json"):
            result._program(f"exported program {where}{tail}")
        if folded.startswith(AOTI_DIR):
            model = folded[len(AOTI_DIR):].split("/", 1)[0]
            aoti.setdefault(model, [])
        if folded.endswith(NATIVE_SUFFIXES):
            library = f"{where}{tail}"
            result.native.append(library)
            if folded.startswith(AOTI_DIR):
                aoti[folded[len(AOTI_DIR):].split("/", 1)[0]].append(library)
            else:
                result._program(f"native library {library}")
    for model, libraries in aoti.items():
        for library in libraries:  # bounded: each library is one record of the (charged) directory
            result._program(f"native library {library}")  # torch.export.load dlopens it: its constructors run
        if not libraries:
            result._program(f"AOTInductor package {where}{AOTI_DIR}{model}/ (compiled code)")


def _read_member(source: ByteSource, entry: ZipEntry, where: str, result: PickleCensus, budget: Budget
                 ) -> bytes | None:
    """A record's bytes as miniz extracts them: after its local header, stored ones for their declared size;
    charged to `budget` as they are read or inflated (a record that inflates past it is not checked)."""
    if entry.file_size > MAX_PICKLE_BYTES:
        result.unreadable.append(f"{where}: {entry.file_size} bytes, too large to check")
        return None
    head = source.read(entry.header_offset, 30)
    if len(head) < 30 or head[:4] != ZIP_MAGIC:
        result.unreadable.append(f"{where}: local header missing")
        return None
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    start = entry.header_offset + 30 + name_len + extra_len
    if start + entry.compress_size > source.size:
        result.unreadable.append(f"{where}: runs past the end of the archive")
        return None
    if entry.compress_type == 0:
        if entry.compress_size != entry.file_size:  # miniz reads file_size bytes, zipfile compress_size
            result.ambiguous.append(f"{where}: stored record declares {entry.file_size} and {entry.compress_size} "
                                    "bytes; torch and zipfile would read different bytes")
            return None
        budget.charge(entry.file_size, "bytes of records read")
        return source.read(start, entry.file_size)
    if entry.compress_type != 8:
        result.unreadable.append(f"{where}: zip compression {entry.compress_type}, which torch cannot read either")
        return None
    inflater = zlib.decompressobj(-15)
    compressed = source.read(start, entry.compress_size)
    out = bytearray()
    try:
        while True:  # charged: each piece inflated, before the next
            piece = inflater.decompress(compressed, _PIECE)
            compressed = inflater.unconsumed_tail
            if not piece:
                break
            if len(out) + len(piece) > MAX_PICKLE_BYTES:
                result.unreadable.append(f"{where}: inflates past {MAX_PICKLE_BYTES} bytes, too large to check")
                return None
            budget.charge(len(piece), "bytes of records inflated")
            out += piece
    except zlib.error as exc:
        result.unreadable.append(f"{where}: {str(exc)[:80]}")
        return None
    return bytes(out)


def _pt2_pickled_records(source: ByteSource, entries: list[ZipEntry], by_fold: dict[str, ZipEntry], name: str,
                         result: PickleCensus, depth: int, budget: Budget) -> dict[str, str]:
    """Members a .pt2 payload config names as pickled: {member: 'torch.load' | 'pickle'} (as torch reads them).

    torch joins its folder ('data/weights/') and `path_name` with os.path.join (an absolute `path_name`
    replaces the folder), prefixes the archive's root and finds the record in any case: so does this."""
    found: dict[str, str] = {}
    for entry in entries:
        if not _fold(entry.name).endswith("_config.json"):
            continue
        raw = _read_member(source, entry, f"{name}:{entry.name}", PickleCensus(), budget)
        if raw is None:
            continue
        if depth == 0:  # what it names decides what torch unpickles: the same bytes must reach torch
            result.checked.setdefault(_tail(entry.name), []).append(zlib.crc32(raw))
        budget.charge(json_units(raw), f"JSON of record '{entry.name[:120]}'")
        try:
            config = json.loads(raw)
        except Exception:  # noqa: BLE001 - torch fails on it too; its records are still read by suffix
            continue
        entries_of = config.get("config") if isinstance(config, dict) else None
        if not isinstance(entries_of, dict):
            continue
        folder = posixpath.dirname(entry.name)
        root, _, below = folder.partition("/")
        for item in entries_of.values():  # charged: parsed from the JSON just charged
            if not isinstance(item, dict):
                continue
            path_name = str(item.get("path_name", ""))
            candidates = (posixpath.join(folder, path_name), f"{root}/{posixpath.join(below + '/', path_name)}")
            member = next((m for c in candidates if (m := by_fold.get(_fold(c))) is not None), None)
            if member is None:
                continue
            if _fold(path_name).startswith(("custom_obj_", "opaque_obj_")):
                found[member.name] = "pickle"  # torch._C._pickle_load_obj / pickle.loads
            elif item.get("use_pickle"):
                found[member.name] = "torch.load"
    return found

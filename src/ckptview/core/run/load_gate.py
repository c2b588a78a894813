"""The one door to torch: a file reaches `torch.load`, `torch.jit.load`, `torch.export.load` or `pickle.loads`
only through `load_with_torch`, after every pickle in it was read by the safe VM.

The rule (SECURITY.md): a file is loaded by torch only when the safe reader has read every pickle torch
would unpickle from it and found only globals in the safe set, or when the user trusted that file after
being shown exactly these findings. What was checked is what is loaded: the file is first copied into the
worker's private folder (mode 0700), the copy is checked, and the same copy is handed to torch; nothing
re-opens the user's path in between. A trusted file must show no finding beyond those the user accepted,
else it changed since it was trusted and is refused.

`census` is plain Python (no torch); `load_with_torch` imports torch and runs only in the worker process.
"""

from __future__ import annotations

import contextlib
import io
import json
import mmap
import os
import posixpath
import shutil
import zipfile
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.errors import CheckpointError, FileChangedError
from ckptview.core.read.pickle_stream import PickleStream
from ckptview.core.read.torch_globals import is_safe_global

# torch.load's legacy header: the pickled magic number, then protocol version, sys_info, the object and its
# storage keys (five pickles in a row, each run by torch), then raw storage bytes.
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PICKLES = 5
ZIP_MAGIC = b"PK\x03\x04"
# TorchScript's C++ unpickler resolves these helpers itself; they are safe inside a TorchScript archive only.
MAX_PICKLE_BYTES = 512 << 20  # a pickle record larger than this is not checked, so not loaded untrusted
MAX_NESTING = 4  # torch.save archives inside archive records
MAX_PICKLES_PER_STREAM = 64
# How torch reads a file, by the source kinds of the runner.
HOW = ("torchscript", "export", "pickle", "weights")


class LoadRefused(CheckpointError):
    """torch would run something from the file that the user has not accepted."""


@dataclass
class PickleCensus:
    """Every pickle torch could unpickle from one file: how many, the globals they name, what is not safe."""

    pickles: int = 0
    globals: list[str] = field(default_factory=list)
    unsafe: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "record: why" of pickles the safe VM could not read

    def findings(self) -> list[str]:
        """What consent must cover: unsafe globals, then pickles that could not be checked."""
        return [*self.unsafe, *(f"unreadable pickle {u}" for u in self.unreadable)]

    def _add(self, names: list[str], torchscript: bool) -> None:
        for name in names:
            if name not in self.globals:
                self.globals.append(name)
            if not is_safe_global(name, torchscript=torchscript) and name not in self.unsafe:
                self.unsafe.append(name)


class _Pid:
    """A persistent id (a storage reference) as an inert value: the census needs globals, not tensors."""

    def __init__(self, pid: Any) -> None:
        self.pid = pid


# ---------------------------------------------------------------------------------------------------
# Census (no torch)


def census(path: str, torchscript: bool | None = None) -> PickleCensus:
    """Read every pickle that torch.load / jit.load / export.load could unpickle from `path` with the safe VM."""
    result = PickleCensus()
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return result
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            _scan_file(memoryview(mapped), fh, os.path.basename(path), result, torchscript, depth=0)
        finally:
            with contextlib.suppress(BufferError):  # values of the VM may still view it: closed when collected
                mapped.close()
    return result


def census_bytes(data: bytes, name: str = "file", torchscript: bool | None = None) -> PickleCensus:
    """`census` over bytes in memory (a record of another file)."""
    result = PickleCensus()
    _scan_file(memoryview(data), io.BytesIO(data), name, result, torchscript, depth=0)
    return result


def _scan_file(data: memoryview, fileobj: Any, name: str, result: PickleCensus, torchscript: bool | None,
               depth: int) -> None:
    """A whole file or a torch.save record: zip members as torch reads them, else a pickle stream."""
    if depth > MAX_NESTING:
        result.unreadable.append(f"{name}: archives nested too deeply")
        return
    is_zip = bytes(data[:4]) == ZIP_MAGIC
    if is_zip or _has_zip_directory(fileobj):
        _scan_zip(fileobj, name, result, torchscript, depth)
    if not is_zip:  # torch.load reads a file that does not start as a zip as a pickle stream
        _scan_stream(data, name, result, bool(torchscript))


def _has_zip_directory(fileobj: Any) -> bool:
    try:
        return zipfile.is_zipfile(fileobj)
    except Exception:  # noqa: BLE001
        return False


def _scan_stream(data: memoryview, name: str, result: PickleCensus, torchscript: bool) -> None:
    """Consecutive pickles from the start, read by the same stream reader as `info`: the legacy header and
    its four followers, else one or more; a pickle torch would run that the safe VM cannot read is a finding."""
    stream = PickleStream(data, emulate=False)
    required = 1
    while not stream.at_end() and stream.count < MAX_PICKLES_PER_STREAM:
        try:
            obj = stream.read(name, _Pid)
        except CheckpointError as exc:  # any failure of the safe VM on hostile bytes is "not checked"
            if stream.count < required:  # torch would unpickle this one: not readable means not checked
                result.unreadable.append(f"{name} (pickle {stream.count + 1}): {str(exc)[:120]}")
            break
        if stream.count == 1 and (obj == LEGACY_MAGIC or stream.globals):
            # torch.load goes on after a magic number (in any encoding: it compares the value), and may after
            # anything the safe VM did not evaluate (a call can be code that returns the magic number).
            required = LEGACY_PICKLES
        if required == LEGACY_PICKLES and stream.count >= LEGACY_PICKLES:
            break  # raw storage bytes follow
    result.pickles += stream.count
    result._add(stream.globals, torchscript)


def _scan_zip(fileobj: Any, name: str, result: PickleCensus, torchscript: bool | None, depth: int) -> None:
    try:
        fileobj.seek(0)
        archive = zipfile.ZipFile(fileobj)
        infos = archive.infolist()
    except Exception as exc:  # noqa: BLE001 - a hostile central directory
        result.unreadable.append(f"{name}: unreadable zip ({str(exc)[:80]})")
        return
    names = [info.filename for info in infos]
    if torchscript is None:  # TorchScript archives carry code/ and constants.pkl
        torchscript = any(_tail(n).startswith("code/") for n in names) and any(
            _tail(n) == "constants.pkl" for n in names)
    referenced = _pt2_pickled_records(archive, infos)
    for info in infos:
        tail = _tail(info.filename)
        kind = referenced.get(info.filename)
        if kind is None:
            if tail.endswith((".pkl", ".debug_pkl")):
                kind = "pickle"
            elif tail.endswith(".pt"):  # sample inputs, legacy weights/constants, serialized_*.pt
                kind = "torch.load"
        if kind is None:
            continue
        where = f"{name}:{info.filename}"
        raw = _read_member(archive, info, where, result)
        if raw is None:
            continue
        if kind == "torch.load":
            _scan_file(memoryview(raw), io.BytesIO(raw), where, result, torchscript, depth + 1)
        else:
            _scan_stream(memoryview(raw), where, result, bool(torchscript))


def _tail(member: str) -> str:
    return member.split("/", 1)[1] if "/" in member else member


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, result: PickleCensus) -> bytes | None:
    if info.file_size > MAX_PICKLE_BYTES:
        result.unreadable.append(f"{where}: {info.file_size} bytes, too large to check")
        return None
    try:
        with archive.open(info) as fh:
            raw = fh.read(MAX_PICKLE_BYTES + 1)
    except Exception as exc:  # noqa: BLE001 - bad CRC, zlib errors, encrypted or truncated members
        result.unreadable.append(f"{where}: {str(exc)[:80]}")
        return None
    if len(raw) > MAX_PICKLE_BYTES:
        result.unreadable.append(f"{where}: inflates past {MAX_PICKLE_BYTES} bytes, too large to check")
        return None
    return raw


def _pt2_pickled_records(archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> dict[str, str]:
    """Members a .pt2 payload config names as pickled: {member: 'torch.load' | 'pickle'} (as torch reads them)."""
    found: dict[str, str] = {}
    by_name = {info.filename: info for info in infos}
    for info in infos:
        if not info.filename.endswith("_config.json") or info.file_size > MAX_PICKLE_BYTES:
            continue
        folder = posixpath.dirname(info.filename)
        try:
            config = json.loads(archive.read(info))
        except Exception:  # noqa: BLE001 - torch fails on it too; its records are still read by suffix
            continue
        entries = config.get("config") if isinstance(config, dict) else None
        if not isinstance(entries, dict):
            continue
        for entry in entries.values():
            if not isinstance(entry, dict):
                continue
            path_name = str(entry.get("path_name", ""))
            member = posixpath.join(folder, path_name)  # os.path.join, as torch joins them
            if member not in by_name:
                continue
            if path_name.startswith(("custom_obj_", "opaque_obj_")):
                found[member] = "pickle"  # torch._C._pickle_load_obj / pickle.loads
            elif entry.get("use_pickle"):
                found[member] = "torch.load"
    return found


# ---------------------------------------------------------------------------------------------------
# The gate


def check(census_result: PickleCensus, path: str, consent: list[str] | None) -> None:
    """Refuse (LoadRefused) unless nothing unsafe was found, or every finding is one the user accepted."""
    found = census_result.findings()
    if not found:
        return
    if consent is None:
        names = ", ".join(found[:6]) + (" ..." if len(found) > 6 else "")
        raise LoadRefused(f"refusing to load {os.path.basename(path)} with torch without trust: it would "
                          f"import and run {names}")
    new = [f for f in found if f not in consent]
    if new:
        raise FileChangedError(path, "it now also names " + ", ".join(new[:6]) + ", which was not trusted")


def private_copy(path: str, folder: str) -> str:
    """Copy `path` into the private `folder` (created 0700 when missing): the bytes that are checked and loaded."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    base = os.path.basename(path) or "file"
    target = os.path.join(folder, f"{len(os.listdir(folder))}-{base}")
    with open(path, "rb") as src, open(target, "xb") as dst:
        if hasattr(os, "fchmod"):  # POSIX; elsewhere the private folder is what keeps it private
            os.fchmod(dst.fileno(), 0o600)
        shutil.copyfileobj(src, dst, 1 << 20)
    return target


def load_with_torch(path: str, how: str, *, device: str, consent: list[str] | None, folder: str) -> Any:
    """THE place ckptview hands a file to torch: private copy, census of the copy, consent, then load the copy.

    `how`: 'torchscript' (torch.jit.load), 'export' (torch.export.load -> ExportedProgram), 'pickle'
    (torch.load, weights_only=False) or 'weights' (torch.load, weights_only=True).
    """
    if how not in HOW:
        raise ValueError(f"unknown load kind {how!r}")
    copy = private_copy(path, folder)
    try:
        result = census(copy, torchscript=True if how == "torchscript" else None)
        check(result, path, consent)
        import torch

        if how == "torchscript":
            # torch.jit.load has no annotations: strict mode refuses the call without this.
            return torch.jit.load(copy, map_location=device, _restore_shapes=True)  # type: ignore[no-untyped-call]
        if how == "export":
            return torch.export.load(copy)
        return torch.load(copy, map_location=device, weights_only=(how == "weights"))
    finally:
        os.unlink(copy)  # torch has read what it needs (a 'weights' mmap is not used: loaded whole)

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

import os
import shutil
import zlib
from typing import Any

from ckptview.core.errors import CheckpointError, FileChangedError
from ckptview.core.read.bytes.files import open_regular
from ckptview.core.read.pickle.census import PickleCensus, census

__all__ = ["HOW", "LoadRefused", "check", "load_with_torch",
           "private_copy", "same_records_as_torch"]

# How torch reads a file, by the source kinds of the runner.
HOW = ("torchscript", "export", "pickle", "weights")
# What these loads run whatever the pickles say: the file's own program.
PROGRAM_LOADS = {"torchscript": "its TorchScript code", "export": "its exported program"}


class LoadRefused(CheckpointError):
    """torch would run something from the file that the user has not accepted."""


# ---------------------------------------------------------------------------------------------------
# The gate


def check(census_result: PickleCensus, path: str, consent: list[str] | None, how: str = "weights") -> None:
    """Refuse (LoadRefused) unless nothing unsafe was found, or every finding is one the user accepted.

    Loading a program (`how` 'torchscript' or 'export') runs the file's code: it always needs consent."""
    found = census_result.findings()
    if consent is None and how in PROGRAM_LOADS and not found:
        found = [PROGRAM_LOADS[how]]
    if not found:
        return
    if consent is None:
        names = ", ".join(found[:6]) + (" ..." if len(found) > 6 else "")
        raise LoadRefused(f"refusing to load {os.path.basename(path)} with torch without trust: it would "
                          f"import and run {names}")
    new = [f for f in found if f not in consent]
    if new:
        raise FileChangedError(path, "it now also names " + ", ".join(new[:6]) + ", which was not trusted")


def same_records_as_torch(copy: str, result: PickleCensus, path: str) -> None:
    """Refuse unless torch's own archive reader lists the records the census saw and returns, for each record it
    checked, the bytes it checked (reading bytes only: nothing is unpickled). Worker only: it imports torch."""
    if not result.records:
        return  # not read as an archive: a pickle stream, read as torch.load reads it
    import torch

    try:
        reader = torch._C.PyTorchFileReader(copy)
    except Exception:  # noqa: BLE001 - torch cannot open it as an archive either: its loads fail alike
        return
    name = os.path.basename(path)
    try:
        listed = list(reader.get_all_records())
    except Exception:  # noqa: BLE001 - a record outside its root folder: records are still read by name
        listed = []
    unseen = [r for r in listed if r not in result.records]
    if unseen:
        raise LoadRefused(f"refusing to load {name} with torch: its archive reader lists records ckptview's check "
                          f"did not see ({', '.join(unseen[:3])[:200]})")
    for record, crcs in result.checked.items():
        try:
            data = reader.get_record(record)
        except Exception:  # noqa: BLE001 - not below torch's root folder: torch never reads it
            continue
        if zlib.crc32(data) not in crcs:
            raise LoadRefused(f"refusing to load {name} with torch: its archive reader returns other bytes for "
                              f"record '{record[:120]}' than ckptview checked")


def private_copy(path: str, folder: str) -> str:
    """Copy `path` into the private `folder` (created 0700 when missing): the bytes that are checked and loaded."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    base = os.path.basename(path) or "file"
    target = os.path.join(folder, f"{len(os.listdir(folder))}-{base}")
    with open_regular(path) as src, open(target, "xb") as dst:  # the bytes the gate read, through the byte layer
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
        check(result, path, consent, how)
        import torch

        same_records_as_torch(copy, result, path)

        if how == "torchscript":
            # torch.jit.load has no annotations: strict mode refuses the call without this.
            return torch.jit.load(copy, map_location=device, _restore_shapes=True)  # type: ignore[no-untyped-call]
        if how == "export":
            return torch.export.load(copy)
        return torch.load(copy, map_location=device, weights_only=(how == "weights"))
    finally:
        os.unlink(copy)  # torch has read what it needs (loaded whole, nothing maps it)

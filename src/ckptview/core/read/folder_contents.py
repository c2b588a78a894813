"""What a local folder holds, for messages that say what to do with it (Qt-free, no torch).

A folder of several checkpoints (a training run) is no checkpoint: opening it says how many it holds and
that `ckptview series` shows them as a timeline. A folder that opens as one checkpoint (a Hub folder) but
also holds other checkpoint files says which.
"""

from __future__ import annotations

import os

from ckptview.core.errors import FolderOfCheckpoints
from ckptview.core.message import Fix, Hint, Message
from ckptview.core.read.bytes import files
from ckptview.core.read.context import Source
from ckptview.core.read.formats import readers
from ckptview.core.units import natural_key, plural

MAX_SNIFFED = 200  # entries of a folder looked at; a bigger folder is described by its first ones
_HEAD_BYTES = 4096


def sniffs(path: str) -> bool:
    """True when some reader recognises ``path`` (a file's first bytes, or a folder's content)."""
    head = b""
    is_dir = False
    try:
        if os.path.isfile(path):
            with files.open_regular(path) as fh:
                head = fh.read(_HEAD_BYTES)
        elif not (is_dir := os.path.isdir(path)):
            return False
    except Exception:  # noqa: BLE001 - a file that cannot be read (a FIFO, no permission) is not listed
        return False
    source = Source(path, head, is_dir)
    for reader in readers():
        try:
            if reader.sniff(source):
                return True
        except Exception:  # noqa: BLE001 - a sniffer that chokes on odd bytes does not claim the file
            continue
    return False


def checkpoint_names(folder: str, skip: set[str] | None = None) -> list[str]:
    """The names of the entries of a local ``folder`` that some reader recognises (not ``skip``), in natural
    order (`step9` before `step10`: a run's order, its latest last)."""
    try:
        names = sorted((n for n in os.listdir(folder) if not n.startswith(".")), key=natural_key)
    except OSError:
        return []
    skip = skip or set()
    return [n for n in names[:MAX_SNIFFED]
            if n not in skip and not n.endswith(".json") and sniffs(os.path.join(folder, n))]


def listed(names: list[str], limit: int = 4) -> str:
    """'a.pth, b.pth, c.pth and 3 more'."""
    head = ", ".join(names[:limit])
    return head + (f" and {len(names) - limit} more" if len(names) > limit else "")


def run_folder_error(folder: str) -> FolderOfCheckpoints | None:
    """The error of a folder that holds checkpoints but is none ('not a checkpoint: folder X holds 6
    checkpoints (...), not one: ...'), naming them; None when it holds none, or when the folder is one
    checkpoint itself (a training step's files, as DeepSpeed's `global_stepN/`). A local folder: the open
    asks only for one."""
    if sniffs(folder):
        return None
    names = checkpoint_names(folder)
    return folder_error(folder, names) if names else None


def folder_error(folder: str, names: list[str]) -> FolderOfCheckpoints:
    """The error of a folder that is no checkpoint but holds `names` (in natural order): how many, and what
    opens each, two of them and all of them."""
    if len(names) == 1:
        return FolderOfCheckpoints(Message(f"not a checkpoint: folder {folder} is none itself, but it holds one",
                                           Hint(Fix.OPEN, (os.path.join(folder, names[0]),))), folder, names)
    first, latest = os.path.join(folder, names[0]), os.path.join(folder, names[-1])
    return FolderOfCheckpoints(Message(
        f"not a checkpoint: folder {folder} holds {plural(len(names), 'checkpoint')} ({listed(names)}), not one",
        Hint(Fix.OPEN, (latest,)), Hint(Fix.COMPARE, (first, latest)), Hint(Fix.SERIES, (folder,))), folder, names)


def other_checkpoints(folder: str, used: set[str], warnings: list[str] | None = None) -> list[str]:
    """The names of the checkpoints of ``folder`` that are no part of the one opened (nor named by one of
    its ``warnings`` already, as a Hub folder's variants are); none for a folder that is not local."""
    if not os.path.isdir(folder):
        return []
    return [n for n in checkpoint_names(folder, used) if not any(n in w for w in warnings or ())]


def others_note(folder: str, names: list[str]) -> str | None:
    """A warning naming `names`, the other checkpoints of ``folder`` (`other_checkpoints`), or None."""
    if not names:
        return None
    what = plural(len(names), "other checkpoint")
    return Message(f"the folder also holds {what}, not part of this one: {listed(names)} (open them by name)",
                   Hint(Fix.SERIES, (folder,)))

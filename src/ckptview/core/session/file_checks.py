"""What the window checks about a path before and after opening it (plain Python, cheap, no reading).

`special_file_reason` refuses at once what would block a worker (a FIFO waits for a writer forever) or lie
about its size (/proc, /sys); `signature` and `describe_change` notice a file re-saved, replaced, truncated
or deleted while its tab is open; `safetensors_header_size` lets the window ask before a huge header.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import Any

from ckptview.core.errors import CheckpointError
from ckptview.core.read.bytes.files import open_regular, special_kind
from ckptview.core.text import printable

PSEUDO_FILESYSTEMS = ("/proc", "/sys")
FOLDER_ENTRIES_WATCHED = 512  # a folder checkpoint's files whose size/mtime/inode are compared
Signature = tuple[Any, ...]  # (dev, ino, size, mtime_ns), or for a folder ((dev, ino), its files)



def special_file_reason(path: str) -> str | None:
    """One line saying why `path` is not opened (not a regular file or folder), or None to go ahead.

    A path that cannot be stat'ed returns None: the reader then reports the missing file itself.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    kind = special_kind(st.st_mode)  # the byte layer's own test: one list of what is not opened
    if kind == "not a regular file":
        return f"not a regular file: {printable(path)}; ckptview opens regular files and folders only"
    if kind is not None:
        return f"not a regular file: {printable(path)} is {kind}; ckptview opens regular files and folders only"
    real = os.path.realpath(path)
    for root in PSEUDO_FILESYSTEMS:
        if real == root or real.startswith(root + os.sep):
            return (f"not a regular file: {printable(path)} is a kernel pseudo-file under {root} (its size and "
                    "contents are made up as it is read); copy it to a regular file to open it")
    return None


def signature(path: str) -> Signature | None:
    """Device, inode, size and mtime of `path` (and of a folder's files); None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    own = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if not stat.S_ISDIR(st.st_mode):
        return own
    entries: list[tuple[str, int, int, int]] = []
    try:
        with os.scandir(path) as it:
            for entry in it:
                if len(entries) >= FOLDER_ENTRIES_WATCHED:
                    break
                try:
                    est = entry.stat()
                except OSError:
                    continue
                if stat.S_ISREG(est.st_mode):
                    entries.append((entry.name, est.st_ino, est.st_size, est.st_mtime_ns))
    except OSError:
        return own
    return (own[:2], tuple(sorted(entries)))


def describe_change(old: Signature | None, new: Signature | None) -> str:
    """A few words on how `new` differs from `old` ('' when they are the same)."""
    if old == new:
        return ""
    if new is None:
        return "it was deleted or moved away"
    if old is None or len(old) != len(new):
        return "it was replaced"
    if len(new) == 2:  # a folder: (dev, inode), files
        if old[0] != new[0]:
            return "the folder was replaced"
        before, after = {e[0]: e for e in old[1]}, {e[0]: e for e in new[1]}
        changed = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
        listed = ", ".join(printable(n) for n in changed[:3]) + (", ..." if len(changed) > 3 else "")
        return f"{len(changed)} file{'s' if len(changed) != 1 else ''} in it changed: {listed}"
    if old[:2] != new[:2]:
        return "it was replaced by another file"
    if old[2] != new[2]:
        return f"its size went from {old[2]:,} to {new[2]:,} bytes"
    return "it was rewritten"


def safetensors_header_size(path: str) -> int | None:
    """The JSON header length a safetensors file declares (first 8 bytes) when the file holds that many
    bytes; None for anything else (a length past the end is the reader's error to report)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        with open_regular(path) as fh:  # never blocks on a FIFO swapped in after the stat
            head = fh.read(9)
    except (OSError, CheckpointError):
        return None
    if len(head) < 9 or head[8:9] != b"{":
        return None
    size = struct.unpack("<Q", head[:8])[0]
    return size if 8 + size <= st.st_size else None

"""The checkpoint a task reads, opened by the task itself where it runs (Qt-free).

A task carries the path or URL as the user gave it and the options of remote reads, never bytes: each
worker opens the file itself, so the values go from storage to the worker. A local path is read where
the task runs, so every worker must share the file system it lies on. The caller's open and the task's
must be of the same file: both take a fingerprint of the tensors the task reads (names, dtypes, shapes,
strides, where their bytes lie, and the size, modification time or validator of those files); a task
that finds another one raises `FileChangedError`.

Errors cross the process boundary as `TaskFailed`, one line and whether the file changed: the errors of
the readers keep fields of their own that do not survive pickling.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from ckptview.core import dtypes
from ckptview.core.checkpoint import ByteSource, Checkpoint, TensorInfo
from ckptview.core.errors import CheckpointError, FileChangedError
from ckptview.core.read.bytes.files import FileMap
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.fs import RemoteFileMap
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.bytes.sources import FileSlice, ZipMember
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.open import open_checkpoint
from ckptview.core.redaction import redact

R = TypeVar("R")


class TaskFailed(CheckpointError):
    """A task's error, as one line (`changed`: the file changed on disk since the caller opened it)."""

    def __init__(self, message: str, changed: bool = False) -> None:
        super().__init__(message)
        self.changed = changed

    def __reduce__(self) -> tuple[Any, ...]:
        return TaskFailed, (str(self), self.changed)


def task_path(path: str) -> str:
    """The path a task opens: a URL as the user gave it (a shown one mapped back: its query string may be its
    credential), a local path made absolute (the workers do not share the caller's working folder)."""
    location = locate(path)
    return location.reach if location.is_remote else os.path.abspath(path)


def _file(fmap: FileMap) -> list[Any]:
    """A file as two opens of it agree on: its name, size, modification time or validator (no read)."""
    remote = getattr(fmap, "remote", None)
    return [os.path.basename(fmap.path), fmap.size, fmap.identity.mtime_ns, getattr(remote, "validator", None)]


def _where(source: ByteSource | None) -> list[Any]:
    """Where a storage's bytes lie, from the open's metadata alone (a zip member's local header unread)."""
    if isinstance(source, FileSlice):
        return ["slice", *_file(source.fmap), source.offset, source.length]
    if isinstance(source, ZipMember):
        return ["member", *_file(source.fmap), source.name, source.header_offset, source.compress_type,
                source.compress_size, source.file_size]
    return [type(source).__name__, source.describe() if source is not None else None]


def fingerprint(infos: Sequence[tuple[str, TensorInfo]]) -> str:
    """What the tensors a task reads are, in the file: equal in the caller's open and the task's, or the
    file changed between them. Reads nothing: a caller planning a thousand tasks of a remote file makes no
    request for them."""
    rows: list[Any] = []
    for name, info in infos:
        storage = info.storage
        row: list[Any] = [name, info.dtype, list(info.shape), list(info.stride), info.offset, info.layout,
                          info.broken]
        if storage is not None:
            row += [storage.key, storage.nbytes, storage.byteorder, *_where(storage.source)]
        rows.append(row)
    return hashlib.blake2b(json.dumps(rows, default=str).encode(), digest_size=16).hexdigest()


def stored_plainly(info: TensorInfo) -> bool:
    """Whether `info`'s values lie plainly in one file, in C order and little-endian (a safetensors tensor,
    a stored zip record), decided from metadata alone: such a tensor may be read in blocks of its own."""
    storage = info.storage
    if (info.broken or info.layout != "strided" or storage is None or storage.broken or info.numel == 0
            or storage.byteorder != "little" or not dtypes.is_known(info.dtype)):
        return False
    source = storage.source
    if not (isinstance(source, FileSlice) or isinstance(source, ZipMember) and source.compress_type == 0):
        return False
    expected, step = [], 1
    for size in reversed(info.shape):
        expected.append(step)
        step *= size
    return tuple(reversed(expected)) == tuple(info.stride)


@contextmanager
def opened(path: str, remote: RemoteOptions) -> Iterator[Checkpoint]:
    """The checkpoint at `path` opened here (metadata only), closed after."""
    if not locate(path).is_remote and not os.path.lexists(path):  # the caller opened it: it is not where this task runs
        raise TaskFailed(f"cannot read {path} on {socket.gethostname()}: a local path must lie on a file "
                         "system every worker shares (or give a URL)")
    ckpt = open_checkpoint(path, ReaderContext(remote=remote))
    try:
        yield ckpt
    finally:
        ckpt.close()
        _end_sessions(ckpt)


def _end_sessions(ckpt: Checkpoint) -> None:
    """Close the remote sessions of a task's open: their pooled connections, now. A worker runs many tasks,
    each opening its own; left to the collector, every one would keep a server's connections open until a
    collection closes their sockets from a finalizer, on whichever thread it runs (on Python 3.11 before
    3.11.9 that can deadlock a Dask worker whose profiler is sampling: CPython gh-106883)."""
    sessions = {id(f.remote.session): f.remote.session for f in ckpt.files if isinstance(f, RemoteFileMap)}
    for session in sessions.values():
        session.close()


def pick(ckpt: Checkpoint, indexes: Sequence[int], names: Sequence[str], expected: str,
         with_parts: bool = False) -> list[TensorInfo]:
    """The tensors at `indexes` of `ckpt.tensors(with_parts)`, checked to be the ones the caller planned with."""
    entries = ckpt.tensors(with_parts)
    if any(i >= len(entries) or entries[i].name != name for i, name in zip(indexes, names, strict=True)):
        raise FileChangedError(ckpt.path, "its tensors are not the ones it had")
    infos = [entries[i].info for i in indexes]
    if fingerprint(list(zip(names, infos, strict=True))) != expected:
        raise FileChangedError(ckpt.path, "its tensors are not where they were")
    return infos


def guarded(fn: Callable[[], R]) -> R:
    """`fn()`, its failures raised as `TaskFailed` (redacted: a URL's token never leaves in a message)."""
    try:
        return fn()
    except TaskFailed:
        raise
    except FileChangedError as exc:
        raise TaskFailed(redact(str(exc)), changed=True) from None
    except CheckpointError as exc:
        raise TaskFailed(redact(str(exc))) from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise TaskFailed(redact(f"{where}{exc.strerror or exc}")) from None

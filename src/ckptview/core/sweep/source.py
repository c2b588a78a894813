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

from ckptview.core.checkpoint import Checkpoint, TensorInfo
from ckptview.core.errors import CheckpointError, FileChangedError
from ckptview.core.read.bytes.files import is_url
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.capabilities import has_file_span
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
    """The path a task opens: a URL as given (its query string is its credential), a local path made
    absolute (the workers do not share the caller's working folder)."""
    return path if is_url(path) else os.path.abspath(path)


def fingerprint(infos: Sequence[tuple[str, TensorInfo]]) -> str:
    """What the tensors a task reads are, in the file: equal in the caller's open and the task's, or the
    file changed between them."""
    rows: list[Any] = []
    for name, info in infos:
        storage = info.storage
        row: list[Any] = [name, info.dtype, list(info.shape), list(info.stride), info.offset, info.layout,
                          info.broken]
        if storage is not None:
            row += [storage.key, storage.nbytes, storage.byteorder]
            source = storage.source
            span = source.file_span(None) if source is not None and has_file_span(source) else None
            if span is not None:
                fmap, offset, length = span
                remote = getattr(fmap, "remote", None)
                row += [os.path.basename(fmap.path), offset, length, fmap.size, fmap.identity.mtime_ns,
                        getattr(remote, "validator", None)]
        rows.append(row)
    return hashlib.blake2b(json.dumps(rows, default=str).encode(), digest_size=16).hexdigest()


@contextmanager
def opened(path: str, remote: RemoteOptions) -> Iterator[Checkpoint]:
    """The checkpoint at `path` opened here (metadata only), closed after."""
    if not is_url(path) and not os.path.lexists(path):  # the caller opened it: it is not where this task runs
        raise TaskFailed(f"cannot read {path} on {socket.gethostname()}: a local path must lie on a file "
                         "system every worker shares (or give a URL)")
    ckpt = open_checkpoint(path, ReaderContext(remote=remote))
    try:
        yield ckpt
    finally:
        ckpt.close()


def pick(ckpt: Checkpoint, indexes: Sequence[int], names: Sequence[str], expected: str) -> list[TensorInfo]:
    """The tensors at `indexes` of `ckpt.tensors()`, checked to be the ones the caller planned with."""
    entries = ckpt.tensors()
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

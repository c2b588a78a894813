"""Where a `Source`'s files are: this machine's (`LOCAL`) or a remote session's (`RemoteFS`), chosen once.

A path was a string that every function of the byte layer tested again for being a URL (`isdir`, `getsize`,
`listdir`, `join`, ... and `FileMap` itself). Now the open decides once, when it builds its `Source`
(`filesystem`), and the readers ask the source's file system for what lies beside it: safetensors' and
fsspec's way (a backend chosen once, `url_to_fs`). Code outside an open that is given a path chooses the
same way, once, with `filesystem`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO, Protocol

from ckptview.core.read.bytes.files import FileIdentity, FileMap, folder_identities, is_url, open_regular
from ckptview.core.read.bytes.remote.fs import RemoteFS, opening
from ckptview.core.read.bytes.remote.options import RemoteOptions

if TYPE_CHECKING:
    from ckptview.core.read.bytes.remote.file import Session


class FileSystem(Protocol):
    """What the readers ask of the paths beside the one they opened."""

    @property
    def remote(self) -> bool:
        """True for a remote session's files (URLs)."""
        ...

    def isdir(self, path: str) -> bool: ...

    def isfile(self, path: str) -> bool: ...

    def getsize(self, path: str) -> int: ...

    def listdir(self, path: str) -> list[str]:
        """The names in a folder."""
        ...

    def list_files(self, folder: str, special: bool = False) -> list[str]:
        """Names of the files (not folders) directly in `folder` (`special`: keep local FIFOs, sockets and
        devices, to be refused when read, not skipped)."""
        ...

    def abspath(self, path: str) -> str: ...

    def join(self, path: str, *names: str) -> str: ...

    def dirname(self, path: str) -> str:
        """The folder of the absolute path."""
        ...

    def inside(self, path: str, folder: str) -> bool:
        """True when `path` (absolute) lies within `folder` (absolute): a hostile '../' must not read elsewhere."""
        ...

    def open_regular(self, path: str, expected: FileIdentity | None = None) -> BinaryIO:
        """The file opened for reading (never blocking), refused when it is not `expected` (if given)."""
        ...

    def file_map(self, path: str, expected: FileIdentity | None = None) -> FileMap:
        """The file for positioned reads, refused when it is not `expected` (if given)."""
        ...

    def folder_identities(self, folder: str) -> dict[str, FileIdentity]:
        """The identity of each checkpoint file directly in `folder` (none for a remote one)."""
        ...


class LocalFS:
    """This machine's files (`os`, through the byte layer's checks)."""

    remote = False

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def isfile(self, path: str) -> bool:
        return os.path.isfile(path)

    def getsize(self, path: str) -> int:
        return os.path.getsize(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def list_files(self, folder: str, special: bool = False) -> list[str]:
        if special:
            return [n for n in os.listdir(folder) if not os.path.isdir(os.path.join(folder, n))]
        return [n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n))]

    def abspath(self, path: str) -> str:
        return os.path.abspath(path)

    def join(self, path: str, *names: str) -> str:
        return os.path.join(path, *names)

    def dirname(self, path: str) -> str:
        return os.path.dirname(os.path.abspath(path))

    def inside(self, path: str, folder: str) -> bool:
        return os.path.commonpath([path, folder]) == folder

    def open_regular(self, path: str, expected: FileIdentity | None = None) -> BinaryIO:
        return open_regular(path, expected)

    def file_map(self, path: str, expected: FileIdentity | None = None) -> FileMap:
        return FileMap(path, expected)

    def folder_identities(self, folder: str) -> dict[str, FileIdentity]:
        return folder_identities(folder)


LOCAL = LocalFS()
"""The local file system (stateless: one for every local source)."""


def filesystem(path: str, session: Session | None = None, options: RemoteOptions | None = None) -> FileSystem:
    """The file system `path` is read through: `LOCAL` for a local path; for a URL the remote session of
    the enclosing open (`session`) when the URL lies below its root, else a new one with `options`."""
    if not is_url(path):
        return LOCAL
    return RemoteFS(opening(path, session, options))

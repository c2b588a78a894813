"""Questions about URLs the readers ask of paths: is it a file or a folder, its size, its names."""

from __future__ import annotations

from ckptview.core.errors import NotACheckpointError, RemoteError
from ckptview.core.read.bytes.remote.causes import is_missing
from ckptview.core.read.bytes.remote.file import FIRST
from ckptview.core.read.bytes.remote.sessions import remote_file, session_for
from ckptview.core.read.bytes.remote.urls import folder_url, real_url, shown

METADATA_NAMES = (".metadata", ".json")  # read whole right after their size is asked for


def _known(url: str) -> tuple[bool, int | None] | None:
    session, real = session_for(url), real_url(url)
    with session.lock:
        return session.known.get(real.rstrip("/"))


def size_of(url: str) -> int:
    """The size of the file at `url`: from a folder listing when one said it, else a 1-byte request."""
    known = _known(url)
    if known is not None and not known[0] and known[1] is not None:
        return known[1]
    # A metadata file's size is asked for just before it is read whole: fetch its start with it.
    return remote_file(url, first=FIRST if url.endswith(METADATA_NAMES) else 1).size


def exists_kind(url: str) -> str | None:
    """'file', 'dir' or None (not there) for a URL; network errors other than 'not found' raise."""
    known = _known(url)
    if known is not None:
        return "dir" if known[0] else "file"
    try:
        f = remote_file(url, first=1)
    except RemoteError as exc:
        if is_missing(exc):
            return None
        raise
    return "dir" if f.is_dir else "file"


def listdir(url: str) -> list[str]:
    """The names in a folder URL (without the trailing '/' of sub-folders)."""
    return [n.rstrip("/") for n in remote_file(folder_url(url)).listdir()]


def not_found(url: str) -> NotACheckpointError:
    """'no such file: URL'."""
    return NotACheckpointError(f"no such file: {shown(url)}")

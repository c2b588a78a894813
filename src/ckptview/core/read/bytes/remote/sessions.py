"""Sessions: the remote files one opened checkpoint reads, and the transfer that counts them."""

from __future__ import annotations

import threading
from collections import OrderedDict

from ckptview.core.read.bytes.remote.cache import CACHE, Transfer
from ckptview.core.read.bytes.remote.file import FIRST, RemoteFile
from ckptview.core.read.bytes.remote.urls import dirname, real_url, remember, require_extra, strip_userinfo

MAX_SESSIONS = 32  # sessions remembered for files first read after the open (DCP shards)


class Session:
    """The remote files one opened checkpoint reads, their shared cache and transfer counters."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.transfer = Transfer()
        self.cache = CACHE
        self.files: dict[str, RemoteFile] = {}
        # What folder listings said: URL -> (is a folder, size or None); spares a request per file.
        self.known: dict[str, tuple[bool, int | None]] = {}
        self.lock = threading.Lock()

    def file(self, url: str, first: int = 0) -> RemoteFile:
        """The RemoteFile of `url` in this session (opened, i.e. stat'ed, on first use).

        The first request also fetches the first `first` bytes (default FIRST: a file about to be read);
        a size or existence check asks for one byte.
        """
        with self.lock:
            found = self.files.get(url)
        if found is None:
            found = RemoteFile(url, self, first or FIRST)
            with self.lock:
                found = self.files.setdefault(url, found)
        return found

    def close(self) -> None:
        """Forget cached blocks and any downloaded copies."""
        for f in list(self.files.values()):
            f.close()


_SESSIONS: OrderedDict[str, Session] = OrderedDict()
_REG_LOCK = threading.Lock()
def opening(url: str, outer: Session | None = None) -> Session:
    """The session an `open_checkpoint(url)` reads through: the enclosing open's (`outer`, from the
    reader's context) when `url` lies below its root (the shards of an index, the parts of a folder), so
    one transfer counts them all; else a new one."""
    if outer is not None and strip_userinfo(url).startswith(outer.root):
        return outer
    return begin_session(url)


def begin_session(url: str) -> Session:
    """A fresh session for opening `url` (a file or a folder); files below it are read through it."""
    url = real_url(url)
    root = url if url.endswith("/") else dirname(url.split("?", 1)[0]) + "/"
    session = Session(root)
    with _REG_LOCK:
        _SESSIONS.pop(session.root, None)
        _SESSIONS[session.root] = session
        while len(_SESSIONS) > MAX_SESSIONS:
            _SESSIONS.popitem(last=False)
    remember(url)
    return session


def session_for(url: str) -> Session:
    """The session whose root holds `url` (the newest open of that folder), else a new one."""
    url = real_url(url)
    with _REG_LOCK:
        best = max((r for r in _SESSIONS if url.startswith(r)), key=len, default=None)
        if best is not None:
            return _SESSIONS[best]
    return begin_session(url)


def remote_file(url: str, first: int = 0) -> RemoteFile:
    """The RemoteFile of `url` (through the session of the checkpoint being opened or read)."""
    require_extra(url)
    return session_for(url).file(real_url(url), first)

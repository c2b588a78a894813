"""Which session a URL is read through: the enclosing open's, the newest open of its folder, or a new one."""

from __future__ import annotations

import threading
from collections import OrderedDict

from ckptview.core.read.bytes.remote.file import RemoteFile, Session
from ckptview.core.read.bytes.remote.urls import dirname, real_url, remember, require_extra, strip_userinfo

MAX_SESSIONS = 32  # sessions remembered for files first read after the open (DCP shards)

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

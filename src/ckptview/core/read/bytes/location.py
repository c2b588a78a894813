"""Where a checkpoint is: a `Location`, a local path or a URL whose token it keeps to itself (issue 47).

A URL may carry its credential in its query string (a presigned `?X-Amz-Signature=...`). What is shown,
logged and handed around is `Location.shown` (no userinfo, no query string); the URL with its token stays
inside the `Location`, and `str()` and `repr()` say only the shown form. Whoever holds the Location (the
open checkpoint's remote session and its files, a window's tab) holds the token; once the last holder
drops it, the token is gone: `locate(shown)` finds a URL's token only while a Location given it is held
(the lookup keeps the Locations weakly, by no strong reference), never for the rest of the process.

`locate(text)` is the one way to make one; `Location.is_remote` is how code outside the byte layer asks
whether a path is a URL (`files.is_url` is the byte layer's own test).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field

from ckptview.core.read.bytes.files import is_url
from ckptview.core.read.bytes.remote.urls import shown, strip_userinfo


@dataclass(frozen=True)
class Location:
    """A local path (`shown` is the path) or a URL (`shown` without credentials or tokens; the URL to
    request, tokens included, kept private: `reach`)."""

    shown: str
    _real: str = field(repr=False)
    remote: bool = False

    @property
    def is_remote(self) -> bool:
        """True for a URL (read through the remote layer), False for a local path."""
        return self.remote

    @property
    def reach(self) -> str:
        """What the byte layer requests: the path, or the URL as the user gave it (its token included).
        Never shown, logged or stored: only for the request itself."""
        return self._real

    def __str__(self) -> str:
        return self.shown


_HELD: weakref.WeakValueDictionary[int, Location] = weakref.WeakValueDictionary()
_SERIALS = itertools.count()
_LOCK = threading.Lock()


def locate(text: str) -> Location:
    """The Location `text` names: a local path as it is; a URL with its userinfo dropped, shown without its
    query string. A shown URL (no token) finds the token of a Location of that URL still held somewhere
    (the latest given), so a tab, a sweep or a reload reaches what the user gave; else it is requested as it is."""
    if not is_url(text):
        return Location(text, text)
    url = strip_userinfo(text)
    seen = shown(url)
    if url != seen:  # it carries a token: this Location holds it, and lends it while it is held
        location = Location(seen, url, remote=True)
        with _LOCK:
            _HELD[next(_SERIALS)] = location
        return location
    with _LOCK:
        held = [loc for loc in _HELD.values() if loc.shown == seen]
    return held[-1] if held else Location(seen, url, remote=True)


def held_tokens() -> list[str]:
    """The shown URLs whose token some held Location keeps (for tests: none once every holder let go)."""
    with _LOCK:
        return [loc.shown for loc in _HELD.values()]

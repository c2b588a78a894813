"""URLs: which paths are URLs, how they are shown (no credentials, no tokens), which extra they need."""

from __future__ import annotations

import importlib.util
import os
import posixpath
import re
import threading
from urllib.parse import urlsplit, urlunsplit

from ckptview.core.errors import RemoteError

EXTRA_HINT = "pip install 'ckptview[remote]'"
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_URL_ANYWHERE = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]*@")
_QUERY_ANYWHERE = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?#]*)[?#]\S*")
_REAL: dict[str, str] = {}  # shown URL -> URL with its query string (presigned tokens stay in here)
_LOCK = threading.Lock()


def download_allowed() -> bool:
    """True when `--download` (CKPTVIEW_DOWNLOAD=1) lets a server that ignores Range send the whole file."""
    return os.environ.get("CKPTVIEW_DOWNLOAD", "") not in ("", "0")


def timeout() -> float:
    """Seconds any one request may wait for the server (CKPTVIEW_TIMEOUT, default 30)."""
    try:
        return max(0.01, float(os.environ.get("CKPTVIEW_TIMEOUT", "30")))
    except ValueError:
        return 30.0


def is_url(path: object) -> bool:
    """True for 'scheme://...' (https, hf, s3, any fsspec protocol); False for local paths and file://."""
    return isinstance(path, str) and bool(_URL.match(path)) and not path.lower().startswith("file://")


def shown(url: str) -> str:
    """The URL as a person may see it: no user:password, no query string or fragment (tokens)."""
    if not is_url(url):
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def redact(text: str) -> str:
    """`text` with every URL in it shown as `shown` shows it (error messages, logs)."""
    return _QUERY_ANYWHERE.sub(r"\1", _URL_ANYWHERE.sub(r"\1", text))


def strip_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, parts.fragment))


def protocol(url: str) -> str:
    return url.split("://", 1)[0].lower()


def require_extra(url: str) -> None:
    """One line naming the extra to install when the libraries for `url`'s protocol are missing."""
    proto = protocol(url)
    needed = {"http": "requests", "https": "requests", "hf": "huggingface_hub", "s3": "s3fs"}.get(proto)
    for module in ("fsspec", needed):
        if module and importlib.util.find_spec(module) is None:
            raise RemoteError(f"cannot open {shown(url)}: URLs need the remote extra ({module} is missing): "
                              f"{EXTRA_HINT}")


def remember(url: str) -> str:
    """The shown form of `url`, to hand around in its place (tabs, logs); reads map it back to `url`."""
    url = strip_userinfo(url)
    with _LOCK:
        if shown(url) != url:  # never map a URL's token away by a later mention without it
            _REAL[shown(url)] = url
    return shown(url)


def real_url(url: str) -> str:
    """The URL to request for `url` (a shown URL maps back to the one the user gave, tokens included)."""
    url = strip_userinfo(url)
    with _LOCK:
        return _REAL.get(url, url)


def folder_url(url: str) -> str:
    """`url` with one trailing '/' (how a folder is requested)."""
    return url if url.endswith("/") else url + "/"


def join(url: str, *names: str) -> str:
    """`url` with names appended as path components."""
    base = url.rstrip("/")
    for name in names:
        base = base + "/" + name.lstrip("/")
    return base


def dirname(url: str) -> str:
    """The folder URL of a file URL."""
    return url.rstrip("/").rsplit("/", 1)[0] if url.count("/") > 2 else url


def normalize(url: str) -> str:
    """`url` with '.' and '..' resolved in its path (never above the host/bucket)."""
    parts = urlsplit(url)
    path = posixpath.normpath(parts.path) if parts.path else ""
    if path == ".":
        path = ""
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))

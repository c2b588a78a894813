"""URLs: which paths are URLs, how they are shown (no credentials, no tokens), which extra they need."""

from __future__ import annotations

import importlib.util
import posixpath
import re
from urllib.parse import urlsplit, urlunsplit

from ckptview.core.errors import RemoteError
from ckptview.core.read.bytes.files import is_url

EXTRA_HINT = "pip install 'ckptview[remote]'"
_IPV6_HOST = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://(?:[^/@]*@)?\[[0-9a-fA-F:.%A-Za-z]*\]")
# Protocols meant for remote storage: what a URL may name. Not accepted: file:// and local:// (a local
# file is given by its path, and goes through the local checks: FIFOs, devices, ...), reference:// (its
# JSON decides which files are opened, local ones too), '::' chains and the wrappers they need (tar://,
# zip://, simplecache::, ...: they put another protocol, maybe a local one, behind the first), dir://,
# git://, dask://. memory:// is accepted: it is this process's own memory and reaches no file.
REMOTE_PROTOCOLS = frozenset({
    "http", "https", "hf", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oci", "ocilake", "oss",
    "webhdfs", "hdfs", "dbfs", "sftp", "ssh", "ftp", "smb", "github", "box", "dropbox", "lakefs", "memory",
})


_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'500M' -> 524288000: bytes, or K, M, G, T, P (powers of 1024; 'MB', 'MiB' the same); ValueError else."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (say 500M, 2G or a number of bytes)")
    return int(float(m.group(1)) * 1024 ** "bkmgtp".index((m.group(2) or "b").lower()))


def shown(url: str) -> str:
    """The URL as a person may see it: no user:password, no query string or fragment (tokens)."""
    if not is_url(url):
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def strip_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, parts.fragment))


def protocol(url: str) -> str:
    return url.split("://", 1)[0].lower()


def check_accepted(url: str) -> None:
    """Refuse, in one line, a URL of a protocol not meant for remote storage or a chain of protocols."""
    proto = protocol(url)
    rest = _IPV6_HOST.sub("", url, count=1)  # 'http://[::1]:8000/m.pt': an IPv6 host is not a chain
    if "::" in rest:
        why = "'::' chains of protocols are not accepted"
    elif proto not in REMOTE_PROTOCOLS:
        why = f"the protocol {proto}:// is not accepted"
    else:
        return
    raise RemoteError(f"cannot open {shown(url)}: {why}: a URL names remote storage (https://, hf://, s3://, "
                      "gs://, ...; see docs/guide/remote.md), a local file is given by its path")


def require_extra(url: str) -> None:
    """Refuse URLs that are not accepted (`check_accepted`); one line naming the extra to install when
    the libraries for `url`'s protocol are missing."""
    check_accepted(url)
    proto = protocol(url)
    needed = {"http": "requests", "https": "requests", "hf": "huggingface_hub", "s3": "s3fs"}.get(proto)
    for module in ("fsspec", needed):
        if module and importlib.util.find_spec(module) is None:
            raise RemoteError(f"cannot open {shown(url)}: URLs need the remote extra ({module} is missing): "
                              f"{EXTRA_HINT}")


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

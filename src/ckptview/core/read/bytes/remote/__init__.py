"""Remote checkpoint files (https://, hf://, s3://, any fsspec protocol), read by range requests.

This is the second implementation of the file layer of `ckptview.core.read.bytes.files`: a `RemoteFile` gives
the readers the same positioned reads as a local file, fetched as HTTP range requests (or the fsspec
protocol's ranged reads) through a bounded block cache. Small reads (headers, directories, pickles)
fetch whole aligned blocks (read-ahead) and merge neighbouring missing blocks into one request; large
reads (tensor values) go out as large requests of their own. Every request has a timeout, and every
response is checked against the file's validator (ETag / Last-Modified / size) recorded at open: a
file that changed between two requests raises `FileChangedError`.

Credentials come only from each library's standard places (HF_TOKEN and the hub's token file, AWS
environment and profiles, ~/.netrc); user:password in a URL is dropped, never sent, never shown.
URLs shown to a person (`shown`) carry neither userinfo nor query strings (presigned tokens), and
every error text passes through the one redaction (`ckptview.core.redaction.redact`).

Only protocols meant for remote storage are accepted (`urls.check_accepted`): no file://, local://,
reference:// or '::' chains. Every request has an overall deadline (`deadline`: connect, first byte,
whole body), every 206 answer's Content-Range must be the range asked for, and `--download` writes at
most the announced size (or `--max-download`): the options the entry point gives (`RemoteOptions`, in the
open's `ReaderContext`).

The package: `urls` (what a URL is, how it is shown), `options` (what the user allowed: `RemoteOptions`),
`file` (a remote file's positioned reads through the block cache of `cache`, and the `Session` of the
files one checkpoint reads, with their transfer), `http` and `fsspec_backend` (the requests), `causes`
(failures in words), `fs` (a session as the file system a URL's `Source` reads through).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.read.bytes.remote.cache import Transfer
    from ckptview.core.read.bytes.remote.file import RemoteFile, Session
    from ckptview.core.read.bytes.remote.fs import RemoteFileMap, RemoteFS, begin_session, not_found, opening
    from ckptview.core.read.bytes.remote.options import RemoteOptions
    from ckptview.core.read.bytes.remote.urls import (
        EXTRA_HINT,
        folder_url,
        parse_size,
        require_extra,
        shown,
)

__all__ = ["EXTRA_HINT", "RemoteFS", "RemoteFile", "RemoteFileMap", "RemoteOptions", "Session", "Transfer",
           "begin_session", "folder_url", "not_found", "opening", "parse_size", "require_extra",
           "shown"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "cache": ["Transfer"],
    "file": ["RemoteFile", "Session"],
    "fs": ["RemoteFileMap", "RemoteFS", "begin_session", "not_found", "opening"],
    "options": ["RemoteOptions"],
    "urls": ["EXTRA_HINT", "folder_url", "parse_size", "require_extra", "shown"],
})

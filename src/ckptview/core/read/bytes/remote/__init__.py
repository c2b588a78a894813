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
most the announced size (or `--max-download`).

The package: `urls` (what a URL is, how it is shown), `sessions` (the files one checkpoint reads and
their transfer), `file` (positioned reads through the block cache of `cache`), `http` and
`fsspec_backend` (the requests), `causes` (failures in words), `paths` (file or folder, size, names).
"""

from ckptview.core.errors import RemoteError
from ckptview.core.read.bytes.remote.cache import BlockCache, Transfer
from ckptview.core.read.bytes.remote.causes import is_missing
from ckptview.core.read.bytes.remote.file import BLOCK, FIRST, RemoteFile, Session
from ckptview.core.read.bytes.remote.paths import exists_kind, listdir, not_found, size_of
from ckptview.core.read.bytes.remote.sessions import begin_session, opening, remote_file, session_for
from ckptview.core.read.bytes.remote.urls import (
    EXTRA_HINT,
    dirname,
    download_allowed,
    folder_url,
    is_url,
    join,
    normalize,
    real_url,
    remember,
    require_extra,
    shown,
    timeout,
)
from ckptview.core.redaction import redact

__all__ = ["BLOCK", "EXTRA_HINT", "FIRST", "BlockCache", "RemoteError", "RemoteFile", "Session", "Transfer",
           "begin_session", "dirname", "download_allowed", "exists_kind", "folder_url", "is_missing", "is_url",
           "join", "listdir", "normalize", "not_found", "opening", "real_url", "redact", "remember",
           "remote_file", "require_extra", "session_for", "shown", "size_of", "timeout"]

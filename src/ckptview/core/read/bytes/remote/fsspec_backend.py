"""Any other protocol (hf://, s3://, gs://, memory://, ...) through fsspec's ranged reads."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from typing import Any

from ckptview.core.errors import CheckpointError, FileChangedError, RemoteError
from ckptview.core.read.bytes.remote.cache import Transfer
from ckptview.core.read.bytes.remote.causes import missing_error, network_cause, status_cause
from ckptview.core.read.bytes.remote.deadline import DeadlinePassed, allowance, call_within, late
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.bytes.remote.urls import EXTRA_HINT, protocol, shown
from ckptview.core.redaction import redact


class FsspecBackend:
    """Any other protocol (hf://, s3://, gs://, memory://, ...) through fsspec's ranged reads."""

    lists_everything = True  # a bucket's or a repository's listing names every object in the folder

    def __init__(self, url: str, transfer: Transfer, options: RemoteOptions) -> None:
        import fsspec

        self.transfer, self.options = transfer, options
        timeout = options.timeout
        kwargs: dict[str, Any] = {}
        proto = protocol(url)
        if proto == "s3":  # as many connections kept as requests may be in flight (botocore keeps 10)
            kwargs = {"config_kwargs": {"connect_timeout": timeout, "read_timeout": timeout,
                                        "retries": {"max_attempts": 2},
                                        "max_pool_connections": options.concurrency}}
        if proto == "hf":  # the hub reads its timeouts at import: set them where it looks for them
            from huggingface_hub import constants

            # The hub declares these int but only passes them on as requests' timeout, which takes a float.
            constants.HF_HUB_ETAG_TIMEOUT = constants.HF_HUB_DOWNLOAD_TIMEOUT = timeout  # type: ignore[assignment]
        self.url = url
        try:
            self.fs, self.path = fsspec.core.url_to_fs(url, **kwargs)
        except (ImportError, ValueError) as exc:
            raise RemoteError(f"cannot open {shown(url)}: {redact(str(exc))[:160]} ({EXTRA_HINT})") from None

    def _call(self, what: str, fn: Any, *args: Any, nbytes: int = 0, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` within the deadline of a request carrying `nbytes`; errors in one line."""
        import fsspec.exceptions

        self.transfer.add(0)  # one call (the protocol may make more requests; not seen from here)
        seconds = allowance(self.options.deadline, nbytes)
        started = time.monotonic()
        try:
            if getattr(self.fs, "async_impl", False):  # fsspec cancels the request itself at its timeout
                return fn(*args, timeout=seconds, **kwargs)
            return call_within(seconds, fn, *args, **kwargs)
        except DeadlinePassed:
            raise late(shown(self.url), seconds) from None
        except fsspec.exceptions.FSTimeoutError as exc:  # the deadline, or a library's own read timeout
            if time.monotonic() - started < seconds:
                raise RemoteError(f"cannot {what} {shown(self.url)}: {network_cause(exc, self.options.timeout)}") from None
            raise late(shown(self.url), seconds) from None
        except FileNotFoundError:
            raise missing_error(f"cannot {what} {shown(self.url)}: not found") from None
        except PermissionError:
            raise RemoteError(f"cannot {what} {shown(self.url)}: {status_cause(403)}") from None
        except CheckpointError:
            raise
        except Exception as exc:
            status = getattr(getattr(exc, "response", None), "status_code", None)
            cause = status_cause(status) if isinstance(status, int) else network_cause(exc, self.options.timeout)
            raise RemoteError(f"cannot {what} {shown(self.url)}: {cause}") from None

    def info(self) -> dict[str, Any]:
        """fsspec's info() of the path."""
        info: dict[str, Any] = self._call("open", self.fs.info, self.path)
        return info

    @staticmethod
    def validator(info: dict[str, Any]) -> str:
        for key in ("ETag", "etag", "sha", "blob_id", "LastModified", "last_modified", "mtime", "created"):
            if info.get(key):
                return str(info[key])
        return ""

    def stat(self, first: int) -> tuple[int, str, bytes, bool]:
        info = self.info()
        if info.get("type") == "directory":
            return 0, "", b"", True
        size = int(info.get("size") or 0)
        data = self.fetch(0, min(first, size), size, "") if size else b""
        return size, self.validator(info), data, False

    def fetch(self, start: int, end: int, size: int, validator: str) -> bytes:
        import fsspec

        # The generic cat_file opens a buffered file whose default cache reads ahead by megabytes
        # (HfFileSystem among others): ask for exactly the range. Protocols with their own ranged
        # cat_file (s3fs, http) read exactly what is asked already.
        generic = type(self.fs).cat_file is fsspec.AbstractFileSystem.cat_file and not getattr(self.fs, "async_impl", False)
        exact = {"cache_type": "none"} if generic else {}
        data = self._call("read", self.fs.cat_file, self.path, start=start, end=end, nbytes=end - start, **exact)
        self.transfer.add(len(data), 0)
        if len(data) != end - start:
            raise FileChangedError(shown(self.url), f"ends before byte {end}, was {size} bytes")
        return bytes(data)

    def download(self, into: Any, limit: int, announced: bool,
                 progress: Callable[[int], None] | None = None) -> None:
        """The whole file into `into` (unused: fsspec protocols read ranges; kept for the backend's shape)."""
        data = self._call("read", self.fs.cat_file, self.path, start=0, end=limit + 1, nbytes=limit)
        if len(data) > limit:
            raise RemoteError(f"cannot read {shown(self.url)}: more than {limit} bytes; download stopped")
        self.transfer.add(len(data), 0)
        into.write(data)
        if progress is not None:
            progress(len(data))

    def listdir(self) -> list[tuple[str, bool, int | None]]:
        entries = self._call("list", self.fs.ls, self.path, detail=True)
        return [(posixpath.basename(e["name"].rstrip("/")), e.get("type") == "directory",
                 int(e["size"]) if isinstance(e.get("size"), int) and e.get("type") != "directory" else None)
                for e in entries]

    def close(self) -> None:
        """Nothing to close: fsspec keeps its filesystems."""

    def exists_file(self) -> bool:
        try:
            return bool(self.fs.isfile(self.path))
        except Exception:
            return False

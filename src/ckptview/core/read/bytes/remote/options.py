"""How remote files may be read: what the user allowed (`--download`, `--max-download`, `--deadline`), how
long one wait may take, and how many requests go at once (`--concurrency`). One `RemoteOptions` object,
built once by the entry point (cli.py, from the command line and the environment) and handed down in the
`ReaderContext`: the core reads no environment variable, and two opens in one process may read with
different options."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TIMEOUT = 30.0
DEFAULT_DEADLINE = 120.0
DEFAULT_CONCURRENCY = 32
MAX_CONCURRENCY = 64  # a host is asked for at most this many files at once, whatever the user says


@dataclass(frozen=True)
class RemoteOptions:
    """What the user allowed for remote reads."""

    download: bool = False
    """A server that ignores Range may send the whole file (written to a private temporary file)."""
    max_download: int | None = None
    """The most bytes a download may write when the server announces no size (None: refuse such a file)."""
    deadline: float = DEFAULT_DEADLINE
    """Seconds a whole request may take, connect to last byte, before its size's allowance is added."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds any one wait on the server may take: to connect, for each read."""
    concurrency: int = DEFAULT_CONCURRENCY
    """Requests in flight at once when many files are read (the shards of a folder), and the connections
    kept open for them (1 to MAX_CONCURRENCY)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "concurrency", max(1, min(MAX_CONCURRENCY, int(self.concurrency))))


DEFAULT = RemoteOptions()

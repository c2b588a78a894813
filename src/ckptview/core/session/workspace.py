"""The window's open checkpoints: each file opened once, shared by every tab, comparison and run (Qt-free).

A :class:`Workspace` hands out :class:`Lease` objects. ``acquire(path)`` gives the checkpoint already open
for ``path`` when the file is still the one that was opened (the byte layer's identity of the file, or of
a folder and its checkpoint files, and every file the reader opened), and opens it otherwise; a changed
file is never served from here. With each checkpoint goes one :class:`~ckptview.core.figures.analysis.Analysis`,
so a tensor's figures are computed once whichever panel, tab or comparison asks. Each holder releases
its lease when done; the last release closes the checkpoint and forgets it, so what is kept is what is
shown, never every file ever opened.

Threads: workers call ``acquire`` (opening reads a file); two asking for the same path at once share one
open. Remote URLs are not shared: whether a remote file changed is only known from a server's answer,
so reusing an open one could serve stale metadata; each ``acquire`` of a URL opens it anew.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from ckptview.core.errors import Cancelled
from ckptview.core.figures.analysis import Analysis
from ckptview.core.inspect.order_cache import ParamOrderCache
from ckptview.core.read import open as opening
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.context import ReaderContext
from ckptview.core.session.file_checks import Signature, signature

if TYPE_CHECKING:
    from ckptview.core.checkpoint import Checkpoint

Opener = Callable[[str], "Checkpoint"]

@dataclass(eq=False)
class _Entry:
    """One open checkpoint of a workspace (or one being opened) and how many leases hold it."""

    key: str
    signature: Signature | None  # the path as it was before the open began
    count: int = 0
    checkpoint: Checkpoint | None = None
    analysis: Analysis = field(default_factory=Analysis)
    ready: threading.Event = field(default_factory=threading.Event)
    failed: bool = False  # the open raised: followers open it themselves
    closed: bool = False


def _nothing() -> bool:
    return False


class Lease:
    """One holder's hold on an open checkpoint: ``checkpoint``, its ``analysis``; ``release()`` when done.

    A lease dropped without ``release()`` (a result a closed view never received) is released when it
    is collected, so a lost hold cannot pin a checkpoint for the rest of the session."""

    def __init__(self, checkpoint: Checkpoint, analysis: Analysis,
                 on_release: Callable[[], bool] | None = None) -> None:
        self.checkpoint = checkpoint
        self.analysis = analysis
        # Called once, by release() or when the lease is collected (the callback holds no lease).
        self._finalizer = weakref.finalize(self, on_release or _nothing)
        self._finalizer.atexit = False

    @classmethod
    def private(cls, checkpoint: Checkpoint, analysis: Analysis | None = None) -> Lease:
        """A lease on a checkpoint no workspace shares: releasing it closes the checkpoint."""
        def close() -> bool:
            checkpoint.close()
            return True

        return cls(checkpoint, analysis if analysis is not None else Analysis(), close)

    @property
    def released(self) -> bool:
        """True once this lease was released."""
        return not self._finalizer.alive

    def release(self) -> bool:
        """Let go of the checkpoint (once; later calls do nothing); True when this closed it."""
        return bool(self._finalizer())  # finalize calls its callback at most once, whichever thread asks

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


class Workspace:
    """The open checkpoints of one window, by path, each held while a lease on it is held.

    The window (or a command) makes one and hands it to whatever opens files for it: its tabs, its
    comparisons, its runs, with the `RemoteOptions` its URLs are read with and the parameter orders its
    optimizers are named by. Nothing in the core keeps one of its own."""

    def __init__(self, opener: Opener | None = None, remote: RemoteOptions | None = None,
                 orders: ParamOrderCache | None = None) -> None:
        self._opener = opener
        self.remote = remote if remote is not None else RemoteOptions()  # how its URLs are read
        # The parameter orders libraries told (a Trainer folder's optimizer named by them): the window's
        # cache, learned in the background and kept between runs; None: nothing asked of a library.
        self.orders = orders
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        # Checkpoints held by a lease: what the window must not take apart when one of their holders goes.
        self._held: weakref.WeakSet[Checkpoint] = weakref.WeakSet()
        self.opens = 0  # files opened so far (tests and benchmarks count)

    def in_use(self, checkpoint: Checkpoint) -> bool:
        """True while a lease still holds `checkpoint` (a closed tab's tree may be shown by another)."""
        with self._lock:
            return checkpoint in self._held

    def acquire(self, path: str, opener: Opener | None = None) -> Lease:
        """A lease on the checkpoint at `path`: the one open already when the file is unchanged, else a new open.

        `opener` opens the file when it must be (default: the workspace's, else `open_checkpoint`). Runs in
        a worker: it stats the file, and may read its metadata. Errors are the opener's.
        """
        open_file = opener or self._opener or self._open_checkpoint
        if locate(path).is_remote:  # not shared: see the module docstring
            return self._private(open_file(path))
        key = os.path.abspath(path)
        while True:
            now = signature(key)
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None and (entry.signature != now or entry.failed):
                    self._retire(entry)  # changed on disk (or its open failed): no longer served
                    entry = None
                leader = entry is None
                if entry is None:
                    entry = self._entries[key] = _Entry(key, now)
                entry.count += 1
            if leader:
                return self._open(entry, open_file)
            entry.ready.wait()
            checkpoint = entry.checkpoint
            if entry.failed or checkpoint is None:
                self._drop(entry)
                continue  # the leader's open failed (or was cancelled): open it ourselves
            if checkpoint.changed_on_disk() is not None:  # a file of a folder changed under the same listing
                with self._lock:
                    self._retire(entry)
                self._drop(entry)
                continue
            return self._lease(entry)

    def _open_checkpoint(self, path: str) -> Checkpoint:
        return opening.open_checkpoint(path, ReaderContext(remote=self.remote))

    def holders(self, path: str) -> int:
        """How many leases hold (or wait for) the checkpoint served for `path` now (tests and diagnostics)."""
        with self._lock:
            entry = self._entries.get(os.path.abspath(path))
            return entry.count if entry is not None else 0

    def open_paths(self) -> list[str]:
        """The paths of the checkpoints open and served now (tests and diagnostics)."""
        with self._lock:
            return [key for key, entry in self._entries.items() if entry.checkpoint is not None]

    # -- internals ----------------------------------------------------------------------------------
    def _open(self, entry: _Entry, open_file: Opener) -> Lease:
        try:
            checkpoint = open_file(entry.key)
        except BaseException:
            with self._lock:
                entry.failed = True
                self._retire(entry)
            entry.ready.set()
            self._drop(entry)
            raise
        with self._lock:
            self.opens += 1
            entry.checkpoint = checkpoint
            self._held.add(checkpoint)
        entry.ready.set()
        return self._lease(entry)

    def _lease(self, entry: _Entry) -> Lease:
        assert entry.checkpoint is not None
        return Lease(entry.checkpoint, entry.analysis, lambda: self._drop(entry))

    def _private(self, checkpoint: Checkpoint) -> Lease:
        with self._lock:
            self.opens += 1
        return Lease.private(checkpoint)

    def _retire(self, entry: _Entry) -> None:
        """Stop serving `entry` (its holders keep it until they release it). Called with the lock held."""
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]

    def _drop(self, entry: _Entry) -> bool:
        """One hold on `entry` less; the last one closes its checkpoint. True when it did."""
        with self._lock:
            entry.count -= 1
            last = entry.count == 0 and entry.ready.is_set() and not entry.closed
            if last:
                entry.closed = True
                self._retire(entry)
        checkpoint = entry.checkpoint
        if not last or checkpoint is None:
            return False
        with self._lock:
            self._held.discard(checkpoint)
        checkpoint.close()
        return True


HOLD_CHECKPOINTS = 32  # a series tab keeps at most this many checkpoints open ...
HOLD_TENSORS = 1_000_000  # ... holding at most about this many tensors together (beyond the last two)


class Holdings:
    """Leases one user keeps by path (a run's checkpoints), the least recently used let go past a bound.

    ``checkpoint(path)`` is the held checkpoint while its file is unchanged, else the workspace's (opened
    again when it changed); ``lease(path)`` gives it with its Analysis. The bounds (`limit` checkpoints,
    `max_tensors` tensors, the two most recent always kept: a run reads pairs) keep a run of a thousand
    checkpoints, or of a few huge ones, from holding every tree and file descriptor: past them, a
    checkpoint is opened again when it is needed again.
    """

    def __init__(self, workspace: Workspace, limit: int = HOLD_CHECKPOINTS,
                 opener: Opener | None = None, max_tensors: int = HOLD_TENSORS) -> None:
        self.workspace = workspace
        self.limit = limit
        self.max_tensors = max_tensors
        self.opener = opener
        self._lock = threading.Lock()
        self._leases: OrderedDict[str, Lease] = OrderedDict()
        self._tensors: dict[str, int] = {}  # tensors of each held checkpoint
        self._closed = False

    def lease(self, path: str) -> Lease:
        """The lease on `path`'s checkpoint, held here (a changed file is opened again).

        A URL keeps its first open (remote files are not shared, and a changed one fails its reads with
        `FileChangedError`); raises Cancelled once `release` was called (the run's tab is closing)."""
        remote = locate(path).is_remote
        key = path if remote else os.path.abspath(path)
        with self._lock:
            old = self._leases.get(key)
        if old is not None and remote:
            return old
        fresh = self.workspace.acquire(key, self.opener)  # the same checkpoint when the file is unchanged
        if old is not None and fresh.checkpoint is old.checkpoint:
            fresh.release()
            with self._lock:
                if self._leases.get(key) is old:
                    self._leases.move_to_end(key)
            return old
        tensors = len(fresh.checkpoint.tensors())  # listed once, cached by the checkpoint (a run lists them)
        let_go: list[Lease] = []
        with self._lock:
            closed = self._closed
            if not closed:
                replaced = self._leases.pop(key, None)
                if replaced is not None:
                    let_go.append(replaced)
                self._leases[key] = fresh
                self._tensors[key] = tensors
                while len(self._leases) > self.limit or (
                        len(self._leases) > 2 and sum(self._tensors.values()) > self.max_tensors):
                    gone, lease = self._leases.popitem(last=False)
                    del self._tensors[gone]
                    let_go.append(lease)
        for lease in let_go:  # a reader still using one reads on: a closed file reopens, identity checked
            lease.release()
        if closed:
            fresh.release()
            raise Cancelled("closed")
        return fresh

    def checkpoint(self, path: str) -> Checkpoint:
        """The checkpoint at `path`, held here (see `lease`)."""
        return self.lease(path).checkpoint

    def release(self) -> None:
        """Let go of everything held (the run's tab is closing); later leases are not kept."""
        with self._lock:
            self._closed = True
            leases, self._leases = list(self._leases.values()), OrderedDict()
            self._tensors.clear()
        for lease in leases:
            lease.release()

"""Opening a tab's file off the GUI thread: one worker at a time, its result held until the page is built.

`TabOpener` owns the worker of `open_and_prepare` and says what happened through signals: `progress`
(a huge header's pieces, the arranging steps), `opened` (the result waits in `pending` for its turn to be
built), `failed` (one line for a person) and `asks` (a header so large that the user decides). A result that
arrives after Cancel, a reload or the tab's closing is released, never shown.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from ckptview.core.errors import CheckpointError
from ckptview.core.gc_policy import paused_gc
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.session.file_checks import special_file_reason
from ckptview.core.session.opening import LargeHeader, Opened, open_and_prepare
from ckptview.core.session.workspace import Workspace
from ckptview.gui.base.workers import REPORT, GeneratorWorker, JobSlot

__all__ = ["TabOpener"]
log = logging.getLogger(__name__)


class TabOpener(QObject):
    """Opens one path in a worker; `start` again (a reload) drops whatever the previous start left."""

    progress = Signal(object)  # Progress
    opened = Signal()  # the file is open: `take()` its result to build the page
    failed = Signal(str)  # why it did not open, one line
    asks = Signal(int)  # the header's size in bytes: too large to read without the user's yes

    def __init__(self, path: str, parent: QObject | None = None, workspace: Workspace | None = None) -> None:
        super().__init__(parent)
        self.path = path
        self.workspace = workspace  # the window's, where the open checkpoints are shared (None: opened alone)
        self.started_at = 0.0
        self.slot = JobSlot(self)
        self.slot.yielded.connect(self._on_progress)  # a huge header's pieces, the arranging steps
        self.slot.returned.connect(self.accept)
        self.slot.errored.connect(self._on_error)
        self._worker: GeneratorWorker | None = None  # the slot's current job, until its result arrives
        self._pending: Opened | None = None  # opened, waiting for its turn to build its page
        self._made: list[Opened] = []  # the current worker's result, put there by the worker
        self._closed = False
        self.error: BaseException | None = None  # why the last open failed (the tab offers what fixes it)

    @property
    def busy(self) -> bool:
        """True while a worker opens the file or its result waits to be taken."""
        return self._worker is not None or self._pending is not None

    @property
    def worker(self) -> GeneratorWorker | None:
        """The worker opening the file now (None when none is; timing connects to it)."""
        return self._worker

    @property
    def pending(self) -> Opened | None:
        """The opened file waiting for its page (None when none waits)."""
        return self._pending

    def start(self, ask_above: int | None, remote: RemoteOptions | None = None) -> None:
        """Open the file in a worker (a FIFO, socket, device or /proc file fails at once, in `failed`).

        `ask_above`: header bytes above which `asks` is emitted instead of reading it (None: never).
        `remote`: this open's remote options, when not the workspace's (the user's yes to downloading a
        remote file whole when its server ignores ranges, a longer deadline for a slow server).
        """
        self.abandon()
        self.error = None
        self.started_at = time.perf_counter()
        reason = special_file_reason(self.path)
        if reason is not None:  # opening would block a worker (FIFO) or read a made-up size (/proc)
            self.failed.emit(reason)
            return
        self._made = []  # what this worker opened, also when a cancel keeps it from handing it over
        extra = {"remote": remote} if remote is not None else {}
        self._worker = self.slot.start(_open_without_collections, self.path, ask_above, self._made, self.workspace,
                                       progress=REPORT, **extra)

    def accept(self, opened: Opened) -> None:
        """Hold `opened` as the result and emit `opened` (the worker's result arrives here)."""
        if self._closed:  # closed while its result was queued: release the file
            opened.release()
            return
        self._worker = None
        self._pending = opened
        self.opened.emit()

    def take(self) -> Opened | None:
        """The opened file, handed over once (the caller now owns it and closes it)."""
        opened, self._pending = self._pending, None
        return opened

    def elapsed(self) -> float:
        """Seconds since the last start."""
        return time.perf_counter() - self.started_at

    def abandon(self) -> None:
        """Stop waiting: a result not taken yet is released, a worker still reading releases its own."""
        opened, self._pending = self._pending, None
        if opened is not None:  # opened but never shown
            opened.release()
        worker, self._worker = self._worker, None
        self.slot.cancel()  # the open stops at its next header piece or step; what it still sends is dropped
        if worker is not None:
            # The reader cannot be interrupted mid-parse; release its file when it is done. A cancelled
            # worker reports `aborted`, not its result, even when the open itself returned: `finished`
            # comes in every case, and `made` holds the result if there is one.
            made = self._made
            if worker.is_done:  # its result, if it had one, was on its way: dropped with the cancel
                _release(made)
            else:
                signals: Any = worker.signals
                signals.finished.connect(lambda: _release(made))

    def close(self) -> None:
        """The tab is closing: stop, and release anything that still arrives."""
        self._closed = True
        self.abandon()

    def _on_progress(self, step: Progress) -> None:
        if not self._closed:
            self.progress.emit(step)

    def _on_error(self, exc: BaseException) -> None:
        if self._closed:
            return
        self._worker = None
        self.error = exc
        if isinstance(exc, LargeHeader):
            self.asks.emit(exc.size)
        elif isinstance(exc, CheckpointError):
            self.failed.emit(str(exc))
        elif isinstance(exc, OSError):
            self.failed.emit(f"cannot read the file: {exc.strerror or exc}")
        else:  # a reader bug: still one line for a person, and the traceback in the log
            log.error("opening %s failed", self.path, exc_info=exc)
            self.failed.emit(f"internal error: {type(exc).__name__}: {exc}")


def _release(made: list[Opened]) -> None:
    """Close what a worker opened for nobody."""
    for opened in made:
        opened.release()


def _open_without_collections(path: str, ask_above: int | None, made: list[Opened], workspace: Workspace | None,
                              token: CancelToken | None = None,
                              progress: Callable[[Progress], None] | None = None,
                              remote: RemoteOptions | None = None) -> Opened:
    """`open_and_prepare` with the GUI thread's collector held off until the new tree is frozen.

    Every object the worker builds is young until `open_and_prepare` freezes it at the end: a collection
    meanwhile (the GUI thread's timer) walks them all, holding the GIL 0.3-0.6 s at 100,000 tensors, and
    finds nothing, since a fresh tree holds no garbage. `token` (Cancel) and `progress` (a huge header's
    pieces) are passed on where the function takes them (tests stand in simpler ones). The result is
    also put in `made`, for the opener to release when a cancel keeps the worker from handing it over.
    """
    accepted = inspect.signature(open_and_prepare).parameters
    extra: dict[str, Any] = {name: value for name, value in (("token", token), ("progress", progress),
                                                             ("workspace", workspace), ("remote", remote))
                             if name in accepted and value is not None}
    with paused_gc():
        opened = open_and_prepare(path, ask_above, **extra)
    made.append(opened)
    return opened

"""Run slow work off the GUI thread: a generator (or a plain function) on the global QThreadPool.

    worker = GeneratorWorker(stats_job, info, token=CancelToken())
    worker.signals.yielded.connect(show_progress)     # each value the generator yields
    worker.signals.returned.connect(show_result)      # the generator's return value
    worker.signals.errored.connect(show_error)        # the exception it raised
    worker.signals.aborted.connect(...)               # it stopped because quit() was called
    worker.start()
    ...
    worker.quit()   # cooperative: checked between yields, and the token is cancelled for the core

`finished` is emitted last in every case. Signals are delivered on the GUI thread (queued connections).
The function receives ``token=`` when it accepts that keyword, so core generators can ``token.check()``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

from ckptview.core.errors import Cancelled, FileChangedError
from ckptview.core.jobs import CancelToken, drain
from ckptview.gui.base.gc_guard import install_gc_guard

# Every worker started and not yet finished, so that shutdown can ask them all to quit before waiting.
_running: set[GeneratorWorker] = set()


class _ReceiverGone(Exception):
    """The worker's signal object was deleted (the application is quitting): stop quietly."""


class WorkerSignals(QObject):
    """The signals of one worker (a QRunnable cannot carry signals itself)."""

    started = Signal()
    yielded = Signal(object)
    returned = Signal(object)
    errored = Signal(object)
    aborted = Signal()
    finished = Signal()


class GeneratorWorker(QRunnable):
    """Run `func(*args, **kwargs)` in the thread pool; if it returns a generator, iterate it there."""

    def __init__(self, func: Callable[..., Any], *args: Any, token: CancelToken | None = None,
                 **kwargs: Any) -> None:
        super().__init__()
        self.setAutoDelete(False)  # the Python object owns itself; Qt must not delete it under us
        self.func, self.args, self.kwargs = func, args, kwargs
        self.token = token or CancelToken()
        self.signals = WorkerSignals()
        self._done = False
        try:
            if "token" in inspect.signature(func).parameters:
                self.kwargs["token"] = self.token
        except (TypeError, ValueError):
            pass

    @property
    def is_done(self) -> bool:
        """True once the work has finished, failed or been aborted."""
        return self._done

    def quit(self) -> None:
        """Ask the work to stop at its next yield (or next token check in the core)."""
        self.token.cancel()

    def start(self) -> GeneratorWorker:
        """Queue the work on the global thread pool."""
        install_gc_guard()
        file_events()  # created here, on the GUI thread, before any worker can emit on it
        keep_until_finished(self, self.signals)
        _running.add(self)
        self.signals.finished.connect(lambda: _running.discard(self))
        QThreadPool.globalInstance().start(self)
        return self

    def run(self) -> None:  # runs in a pool thread
        signals = self.signals
        try:
            signals.started.emit()
            result = self.func(*self.args, **self.kwargs)
            if inspect.isgenerator(result):
                result = self._drain(result)
            if self.token.cancelled:
                signals.aborted.emit()
            else:
                signals.returned.emit(result)
        except _ReceiverGone:
            pass  # the application is shutting down: nobody is left to tell
        except Cancelled:
            self._emit(signals.aborted)
        except Exception as exc:  # errors are values at the boundary: the GUI shows them in place
            if isinstance(exc, FileChangedError) and _notifier is not None:
                _notifier.file_changed.emit(exc.path, str(exc))  # the tab of that file offers a reload
            self._emit(signals.errored, exc)
        finally:
            self._done = True
            self._emit(signals.finished)  # the GUI thread then drops its reference (see _Keeper)

    def _emit(self, signal: Any, *args: Any) -> None:
        try:
            signal.emit(*args)
        except RuntimeError:  # "Signal source has been deleted": the app quit while this job ran
            self.token.cancel()

    def _drain(self, gen: Any) -> Any:
        def forward(value: Any) -> None:
            try:
                self.signals.yielded.emit(value)
            except RuntimeError as exc:  # the signal object is gone: stop the job
                raise _ReceiverGone() from exc
            self.token.check()

        if self.token.cancelled:
            gen.close()
            raise Cancelled("cancelled")
        return drain(gen, forward)


def quit_workers() -> None:
    """Ask every running worker to stop at its next yield or token check."""
    for worker in list(_running):
        worker.quit()


class FileEvents(QObject):
    """Process-wide news from workers about files: `file_changed(path, message)` when a read found the
    file changed on disk (any panel's worker; the window shows the reload bar in that file's tab)."""

    file_changed = Signal(str, str)


_notifier: FileEvents | None = None


def file_events() -> FileEvents:
    """The process-wide FileEvents (create it on the GUI thread)."""
    global _notifier
    if _notifier is None:
        _notifier = FileEvents()
    return _notifier


def wait_for_workers(timeout_ms: int = 10_000, quit_first: bool = False) -> bool:
    """Block until every queued worker has finished (tests); ``quit_first`` asks them to stop first (shutdown)."""
    if quit_first:
        quit_workers()
    return QThreadPool.globalInstance().waitForDone(timeout_ms)


def _quit_each(workers: set[GeneratorWorker]) -> None:
    for worker in list(workers):
        worker.quit()


class JobSlot(QObject):
    """The one way a widget runs jobs and drops stale results.

    ``start`` runs ``func(*args, token=...)`` in the pool. With ``replace=True`` (the default) a slot holds
    at most one job: starting another cancels the previous one. With ``replace=False`` jobs run side by
    side (tiles of a table) until ``cancel()``. Either way, a job's signals are forwarded only while the
    job belongs to the slot's current generation: whatever a cancelled job still emits is dropped here.
    """

    yielded = Signal(object)
    returned = Signal(object)
    errored = Signal(object)
    busy = Signal(bool)

    def __init__(self, parent: QObject | None = None, replace: bool = True) -> None:
        super().__init__(parent)
        self.replace = replace
        self.generation = 0
        self._workers: set[GeneratorWorker] = set()
        workers = self._workers  # the lambda must not touch the slot itself while it is destroyed
        self.destroyed.connect(lambda *_: _quit_each(workers))

    @property
    def running(self) -> bool:
        """True while a current job has not finished."""
        return bool(self._workers)

    def start(self, func: Callable[..., Any], *args: Any) -> GeneratorWorker:
        """Run ``func(*args, token=...)`` in the pool; returns the worker."""
        if self.replace:
            self.cancel()
        worker = GeneratorWorker(func, *args)
        worker.generation = self.generation  # type: ignore[attr-defined]
        sig = worker.signals
        sig.yielded.connect(self._on_yielded)
        sig.returned.connect(self._on_returned)
        sig.errored.connect(self._on_errored)
        sig.finished.connect(self._on_finished)
        was_idle = not self._workers
        self._workers.add(worker)
        if was_idle:
            self.busy.emit(True)
        worker.start()
        return worker

    def cancel(self) -> None:
        """Cancel every current job; anything they still emit is ignored."""
        self.generation += 1
        if self._workers:
            self._quit_all()
            self.busy.emit(False)

    def _quit_all(self) -> None:
        for worker in self._workers:
            worker.quit()
        self._workers.clear()

    def _current(self) -> bool:
        signals = self.sender()
        return any(w.signals is signals and w.generation == self.generation  # type: ignore[attr-defined]
                   for w in self._workers)

    @Slot(object)
    def _on_yielded(self, value: object) -> None:
        if self._current():
            self.yielded.emit(value)

    @Slot(object)
    def _on_returned(self, value: object) -> None:
        if self._current():
            self.returned.emit(value)

    @Slot(object)
    def _on_errored(self, exc: object) -> None:
        if self._current():
            self.errored.emit(exc)

    @Slot()
    def _on_finished(self) -> None:
        signals = self.sender()
        mine = {w for w in self._workers if w.signals is signals}
        if mine:
            self._workers -= mine
            if not self._workers:
                self.busy.emit(False)


class _Keeper(QObject):
    """Keeps running jobs alive and lets them go on the GUI thread, never in the worker thread.

    Dropping the last reference in the worker would destroy the job's signal object (a QObject of
    the GUI thread) in the wrong thread while its queued signals are still pending.
    """

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[int, object] = {}

    def keep(self, job: object, signals: QObject) -> None:
        self.jobs[id(signals)] = job
        signals.finished.connect(self.release)  # type: ignore[attr-defined]

    @Slot()
    def release(self) -> None:
        self.jobs.pop(id(self.sender()), None)


_keeper: _Keeper | None = None


def keep_until_finished(job: object, signals: QObject) -> None:
    """Hold `job` until `signals.finished` is delivered on the GUI thread."""
    global _keeper
    if _keeper is None:
        _keeper = _Keeper()
    _keeper.keep(job, signals)

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

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

from ckptview.core.errors import Cancelled, FileChangedError
from ckptview.core.jobs import CancelToken
from ckptview.gui.gc_guard import install_gc_guard


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
        except Cancelled:
            signals.aborted.emit()
        except Exception as exc:  # errors are values at the boundary: the GUI shows them in place
            if isinstance(exc, FileChangedError) and _notifier is not None:
                _notifier.file_changed.emit(exc.path, str(exc))  # the tab of that file offers a reload
            _emit_quietly(signals.errored, exc)
        finally:
            self._done = True
            _emit_quietly(signals.finished)  # the GUI thread then drops its reference (see _Keeper)

    def _drain(self, gen: Any) -> Any:
        while True:
            if self.token.cancelled:
                gen.close()
                raise Cancelled("cancelled")
            try:
                value = next(gen)
            except StopIteration as stop:
                return stop.value
            self.signals.yielded.emit(value)


def _emit_quietly(signal: Any, *args: Any) -> None:
    """Emit, unless the receiving side is already gone (the application is shutting down)."""
    with contextlib.suppress(RuntimeError):  # "Internal C++ object already deleted": nobody left to tell
        signal.emit(*args)


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


def wait_for_workers(timeout_ms: int = 10_000) -> bool:
    """Block until every queued worker has finished (shutdown and tests)."""
    return QThreadPool.globalInstance().waitForDone(timeout_ms)


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

"""Slow work off the GUI thread: superqt's `GeneratorWorker`, and `JobSlot`, the one way a widget runs a job.

    slot = JobSlot(self)                      # owned by the widget; its jobs stop when the widget goes
    slot.yielded.connect(show_progress)       # each value the job yields
    slot.returned.connect(show_result)        # the job's return value
    slot.errored.connect(show_error)          # the exception it raised
    slot.aborted.connect(...)                 # it stopped because it was asked to (`stop()`)
    slot.start(stats_job, info)               # a new start replaces the previous job: its results are dropped
    ...
    slot.stop()    # cooperative: checked between yields, and the token is cancelled for the core

The workers are superqt's (`superqt.utils.GeneratorWorker`, on the global QThreadPool, kept alive by its
worker set until they finish; napari's `_qt/qthreading.py` is the model). What ckptview adds is here only:

- the token hand-off: the job receives ``token=`` (a `CancelToken`) when it accepts that keyword, so core
  generators can ``token.check()``; ``quit()`` cancels it; a plain function runs in the worker too, and a
  keyword given as `REPORT` becomes a callback whose values arrive as `yielded` (a core function that
  reports progress through a callback);
- the `FileChangedError` relay: a job that found its file changed on disk tells `file_events()`, and the
  window offers a reload in that file's tab;
- `JobSlot`'s stale-result filter: only the current generation's signals are forwarded;
- a second pool for jobs that mostly wait on another process (`JobSlot(waits=True)`: a forward pass in its
  worker process), so they never hold the threads that figures need.

Two parts of superqt's worker are replaced, each for a reason: `run` does not reroute warnings (superqt
swaps the process-wide warning filters from the worker thread, and the suite turns warnings into errors),
and `work` reads a `RuntimeError` of the job as an error to show (superqt takes any for "the worker was
deleted" and drops it) and closes a stopped job's generator in its own thread, so its `finally` blocks (a
file closed, the collector resumed) run there and then. Signals are delivered on the GUI thread.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Generator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QThreadPool, Signal, Slot

from ckptview.core.errors import Cancelled, FileChangedError
from ckptview.core.jobs import CancelToken
from ckptview.gui.base.gc_guard import install_gc_guard


def superqt_threading() -> ModuleType:
    """superqt's thread workers (`superqt.utils._qthreading`), imported without the rest of superqt.

    `import superqt` imports every widget of the package and qtpy's QtGui and QtWidgets, whose star
    imports make PySide6 build every class it has: half a second or more before the window's first job
    (the open of the file it was launched with) could start. The workers' module needs only qtpy.QtCore;
    it is loaded under its own name, so a later `import superqt` uses this very module."""
    name = "superqt.utils._qthreading"
    module = sys.modules.get(name)
    if module is not None:
        return module
    package = importlib.util.find_spec("superqt")  # found, not imported
    if package is None or package.origin is None:
        raise ImportError("the window needs superqt (pip install superqt)")
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(package.origin), "utils",
                                                                       "_qthreading.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


if TYPE_CHECKING:
    from superqt.utils import GeneratorWorker as SuperqtGeneratorWorker
else:
    SuperqtGeneratorWorker = superqt_threading().GeneratorWorker

WAITING_THREADS = 4  # jobs that wait on another process, at most this many at once


class _Report:
    """`REPORT`, given for a job's keyword argument: the job gets a callback that hands each value it is
    called with to the worker's `yielded` (a plain function that reports progress through a callback)."""

    def __repr__(self) -> str:
        return "REPORT"


REPORT = _Report()


def _in_worker_thread(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
                      ) -> Generator[Any, None, Any]:
    """`func(*args, **kwargs)` called in the worker's thread; a generator it returns is driven there."""
    result = func(*args, **kwargs)
    if inspect.isgenerator(result):
        result = yield from result
    return result


class GeneratorWorker(SuperqtGeneratorWorker):
    """Run `func(*args, **kwargs)` in a pool thread; a generator it returns yields progress (`yielded`).

    Built only by `JobSlot` (tests/test_architecture.py): a widget never starts one itself."""

    def __init__(self, func: Callable[..., Any], *args: Any, token: CancelToken | None = None,
                 pool: QThreadPool | None = None, **kwargs: Any) -> None:
        self.token = token or CancelToken()
        try:
            if "token" in inspect.signature(func).parameters:
                kwargs["token"] = self.token
        except (TypeError, ValueError):
            pass
        kwargs = {key: self._report if value is REPORT else value for key, value in kwargs.items()}
        super().__init__(_in_worker_thread, func, args, kwargs)
        self.setAutoDelete(False)  # the Python object owns itself (superqt's worker set holds it); Qt must not delete it
        self.pool = pool
        self.generation = 0  # set by the JobSlot that started it
        self._done = False

    @property
    def is_done(self) -> bool:
        """True once the work has finished, failed or been aborted."""
        return self._done

    def quit(self) -> None:
        """Ask the work to stop at its next yield (or next token check in the core)."""
        super().quit()
        self.token.cancel()

    def _report(self, value: Any) -> None:
        self._emit(self.yielded, value)

    def start(self) -> None:
        """Queue the work on its pool (the global one unless given); superqt's worker set keeps it alive."""
        install_gc_guard()
        file_events()  # created here, on the GUI thread, before any worker can emit on it
        if self.pool is None:
            super().start()
            return
        self._worker_set.add(self)
        self._finished.connect(self._set_discard)
        self.pool.start(self)

    def run(self) -> None:  # in a pool thread
        try:
            self._emit(self.started)
            result = self.work()
            if self.token.cancelled or self.abort_requested:
                self._emit(self.aborted)
            else:
                self._emit(self.returned, result)
        except Cancelled:
            self._emit(self.aborted)
        except Exception as exc:  # errors are values at the boundary: the window shows them in place
            if isinstance(exc, FileChangedError) and _notifier is not None:
                self._emit(_notifier.file_changed, exc.path, str(exc))  # that file's tab offers a reload
            self._emit(self.errored, exc)
        finally:
            self._done = True
            self._emit(self.finished)
            self._emit(self._finished, self)  # superqt's worker set lets it go, on the GUI thread

    def work(self) -> Any:
        """Drive the job's generator: yielded values out, a stop asked for checked before each step."""
        gen = self._gen
        try:
            while True:
                if self.abort_requested or self.token.cancelled:
                    raise Cancelled("cancelled")
                try:
                    value = gen.send(None)
                except StopIteration as stop:
                    return stop.value
                if not self._emit(self.yielded, value):
                    raise Cancelled("nobody is left to tell")
        finally:
            gen.close()

    def _emit(self, signal: Any, *args: Any) -> bool:
        try:
            signal.emit(*args)
        except RuntimeError:  # "Signal source has been deleted": the application quit while this job ran
            self.token.cancel()
            return False
        return True


_waiting_pool: QThreadPool | None = None


def waiting_pool() -> QThreadPool:
    """The pool of jobs that mostly wait on another process (created on first use, on the GUI thread)."""
    global _waiting_pool
    if _waiting_pool is None:
        _waiting_pool = QThreadPool()
        _waiting_pool.setMaxThreadCount(WAITING_THREADS)
    return _waiting_pool


def quit_workers() -> None:
    """Ask every running worker to stop at its next yield or token check."""
    for worker in list(SuperqtGeneratorWorker._worker_set):
        worker.quit()


def wait_for_workers(timeout_ms: int = 10_000, quit_first: bool = False) -> bool:
    """Block until every started worker has finished (tests, shutdown); ``quit_first`` asks them to stop first."""
    if quit_first:
        quit_workers()
    done = QThreadPool.globalInstance().waitForDone(timeout_ms)
    return (_waiting_pool is None or _waiting_pool.waitForDone(timeout_ms)) and done


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


def _quit_each(workers: set[GeneratorWorker]) -> None:
    for worker in list(workers):
        worker.quit()


class JobSlot(QObject):
    """The one way a widget runs jobs and drops stale results.

    ``start`` runs ``func(*args, token=..., **kwargs)`` in the pool. With ``replace=True`` (the default) a
    slot holds at most one job: starting another cancels the previous one. With ``replace=False`` jobs run
    side by side (tiles of a table) until ``cancel()``. Either way, a job's signals are forwarded only while
    the job belongs to the slot's current generation: whatever a cancelled job still emits is dropped here.
    ``stop()`` asks the current jobs to stop and still forwards what they send (`aborted`, or a result that
    was already on its way). The slot's jobs stop when the slot (its widget) is destroyed.
    """

    yielded = Signal(object)
    returned = Signal(object)
    errored = Signal(object)
    aborted = Signal()
    busy = Signal(bool)

    def __init__(self, parent: QObject | None = None, replace: bool = True, waits: bool = False) -> None:
        super().__init__(parent)
        self.replace = replace
        self.waits = waits  # its jobs mostly wait on another process: they run in the waiting pool
        self.generation = 0
        self._workers: set[GeneratorWorker] = set()
        workers = self._workers  # the lambda must not touch the slot itself while it is destroyed
        self.destroyed.connect(lambda *_: _quit_each(workers))

    @property
    def running(self) -> bool:
        """True while a current job has not finished."""
        return bool(self._workers)

    def start(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> GeneratorWorker:
        """Run ``func(*args, token=..., **kwargs)`` in the pool; returns the worker."""
        if self.replace:
            self.cancel()
        worker = GeneratorWorker(func, *args, pool=waiting_pool() if self.waits else None, **kwargs)
        worker.generation = self.generation
        signals: Any = worker.signals  # PySide's signals (superqt types `finished` as carrying None)
        signals.yielded.connect(self._on_yielded)
        signals.returned.connect(self._on_returned)
        signals.errored.connect(self._on_errored)
        signals.aborted.connect(self._on_aborted)
        signals.finished.connect(self._on_finished)
        was_idle = not self._workers
        self._workers.add(worker)
        if was_idle:
            self.busy.emit(True)
        worker.start()
        return worker

    def stop(self) -> None:
        """Ask the current jobs to stop; what they still send (`aborted`) is forwarded."""
        for worker in self._workers:
            worker.quit()

    def cancel(self) -> None:
        """Cancel every current job; anything they still emit is ignored."""
        self.generation += 1
        if self._workers:
            for worker in self._workers:
                worker.quit()
            self._workers.clear()
            self.busy.emit(False)

    def _current(self) -> bool:
        signals = self.sender()
        return any(w.signals is signals and w.generation == self.generation for w in self._workers)

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
    def _on_aborted(self) -> None:
        if self._current():
            self.aborted.emit()

    @Slot()
    def _on_finished(self) -> None:
        signals = self.sender()
        mine = {w for w in self._workers if w.signals is signals}
        if mine:
            self._workers -= mine
            if not self._workers:
                self.busy.emit(False)

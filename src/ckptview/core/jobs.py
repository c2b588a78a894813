"""Cooperative cancellation and progress reports for slow core work (Qt-free).

Slow work in the core is a generator that yields :class:`Progress` and calls ``token.check()``
between chunks; the GUI runs it in a worker and cancels it by calling ``token.cancel()`` from
any thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from ckptview.core.errors import Cancelled

Y = TypeVar("Y")
Z = TypeVar("Z")
R = TypeVar("R")


class CancelToken:
    """A thread-safe flag a worker polls; ``cancel()`` may be called from any thread."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the job holding this token to stop at its next check."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` has been called."""
        return self._event.is_set()

    def check(self) -> None:
        """Raise :class:`Cancelled` if the job was cancelled."""
        if self._event.is_set():
            raise Cancelled("cancelled")

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.cancelled})"


@dataclass(frozen=True)
class Progress:
    """How far a job has got: ``done`` of ``total`` units (``total`` 0 when unknown)."""

    done: int
    total: int
    message: str = ""

    @property
    def fraction(self) -> float:
        """Completed fraction in [0, 1]; 0 when the total is unknown."""
        if self.total <= 0:
            return 0.0
        return min(1.0, max(0.0, self.done / self.total))


def drain(gen: Generator[Y, Any, R], on_yield: Callable[[Y], None] | None = None) -> R:
    """Run a job generator to its end, handing each yielded value to `on_yield`; returns its return value.

    How a job is run to its end from outside a generator (CLI commands, plain-function forms). A generator
    that passes a job on with changes steps it itself (`relay`; a coalescing or recording relay), and so does
    `JobSlot`'s worker (gui/base/workers.py), which checks Cancel before each step: each is listed with its
    reason in tests/test_architecture.py (`STEPPERS`). `on_yield` may raise (e.g. :class:`Cancelled`) to
    stop the job; the generator is closed.
    """
    while True:
        try:
            value = next(gen)
        except StopIteration as stop:
            result: R = stop.value
            return result
        if on_yield is not None:
            try:
                on_yield(value)
            except BaseException:
                gen.close()
                raise


def relay(gen: Generator[Y, Any, R], transform: Callable[[Y], Z]) -> Generator[Z, None, R]:
    """``yield from gen``, with each yielded value passed through `transform` (e.g. progress re-based)."""
    while True:
        try:
            value = next(gen)
        except StopIteration as stop:
            result: R = stop.value
            return result
        yield transform(value)


WAIT_SLICE = 0.05  # seconds between two looks at the token while a call that cannot look runs


def abandonable(call: Callable[[], R], token: CancelToken | None, waiting: Callable[[float], Y],
                every: float = 0.5) -> Generator[Y, None, R]:
    """`call()` (one routine that cannot look at a token: a LAPACK factorisation, a BLAS product) run in a
    thread of its own while the job waits for it, yielding `waiting(seconds elapsed)` every `every` seconds.

    Cancel stops the *job* within `WAIT_SLICE`: the call is abandoned (it finishes in its thread, its result
    dropped, its memory freed then), so a single uninterruptible call never holds a job past Cancel. The
    thread is a daemon: an application leaving does not wait for it. An exception of the call is raised here.
    """
    if token is None:
        return call()
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the job that waits
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="ckptview-abandonable", daemon=True).start()
    started = time.monotonic()
    next_report = started + every
    while not done.wait(WAIT_SLICE):
        token.check()  # Cancelled: the job ends here; the call runs on, its result never read
        now = time.monotonic()
        if now >= next_report:
            next_report = now + every
            yield waiting(now - started)
    token.check()
    if "error" in box:
        raise box["error"]
    result: R = box["result"]
    return result

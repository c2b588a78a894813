"""Cooperative cancellation and progress reports for slow core work (Qt-free).

Slow work in the core is a generator that yields :class:`Progress` and calls ``token.check()``
between chunks; the GUI runs it in a worker and cancels it by calling ``token.cancel()`` from
any thread.
"""

from __future__ import annotations

import threading
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

    The one place a job's generator is driven outside a ``yield from`` (CLI commands, plain-function forms,
    GUI workers). `on_yield` may raise (e.g. :class:`Cancelled`) to stop the job; the generator is closed.
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

"""Cooperative cancellation and progress reports for slow core work (Qt-free).

Slow work in the core is a generator that yields :class:`Progress` and calls ``token.check()``
between chunks; the GUI runs it in a worker and cancels it by calling ``token.cancel()`` from
any thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ckptview.core.errors import Cancelled


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

"""Many remote reads at once: a bounded pool of threads, its caller waiting, reporting and able to cancel.

Listing a folder of 163 shards one header at a time costs 163 round trips; with 32 in flight it costs six.
`fan_out` runs one piece of work per item on at most `limit` threads while the calling thread waits,
hands each completion to `step` (progress, which may raise to stop) and checks the cancel token several
times a second. On a stop it calls `abandon` (the session cuts its requests in flight: their sockets shut,
the threads blocked on them return at once) and raises; what the threads still return is dropped.

Hand-written rather than `concurrent.futures.ThreadPoolExecutor`: the executor's threads are joined at
interpreter exit, so a request abandoned on a protocol that cannot be cut (fsspec's) would hold a command
line's exit until its deadline; these threads are daemons, and each ends with its request (by its deadline
at the latest).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ckptview.core.errors import Cancelled
from ckptview.core.jobs import CancelToken

T = TypeVar("T")
R = TypeVar("R")

POLL = 0.05  # seconds between two looks at the cancel token while the pool works


class Outcome(Generic[R]):
    """What one piece of work gave: its value, or the exception it raised."""

    __slots__ = ("error", "value")

    def __init__(self, value: R | None = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error


def fan_out(items: Sequence[T], work: Callable[[T], R], limit: int, cancel: CancelToken | None = None,
            step: Callable[[int], None] | None = None,
            abandon: Callable[[], None] | None = None) -> list[Outcome[R]]:
    """`work(item)` for every item, at most `limit` at once; the outcomes in the items' order.

    `step(done)` is called on the calling thread after each completion; `cancel` is checked between. When
    either raises (Cancelled, KeyboardInterrupt, ...), `abandon()` is called, no more work starts, and the
    exception goes to the caller without waiting for the work in flight.
    """
    total = len(items)
    outcomes: list[Outcome[R] | None] = [None] * total
    finished: queue.SimpleQueue[int] = queue.SimpleQueue()
    stop = threading.Event()
    lock = threading.Lock()
    next_item = [0]

    def run() -> None:
        while not stop.is_set():
            with lock:
                index = next_item[0]
                if index >= total:
                    return
                next_item[0] += 1
            try:
                outcome: Outcome[R] = Outcome(work(items[index]))
            except BaseException as exc:  # handed to the caller, who decides
                outcome = Outcome(error=exc)
            outcomes[index] = outcome
            finished.put(index)

    for _ in range(max(1, min(limit, total))):
        threading.Thread(target=run, name="ckptview-fan-out", daemon=True).start()
    done = 0
    try:
        while done < total:
            if cancel is not None:
                cancel.check()
            try:
                finished.get(timeout=POLL)
            except queue.Empty:
                continue
            done += 1
            if step is not None:
                step(done)
    except BaseException:
        stop.set()
        if abandon is not None:
            abandon()
        raise
    result: list[Outcome[R]] = []
    for outcome in outcomes:
        if outcome is None:  # every item finished, so none is missing; a guard for the type checker
            raise Cancelled("cancelled")
        result.append(outcome)
    return result

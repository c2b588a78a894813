"""Worker processes on this machine: how many a job gets, and a pool of them kept between runs (Qt-free).

A task is any picklable argument of a module-level function (`fn(task)`): the pool only carries it to a
worker process and its result back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import CancelToken

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """The local pool's size: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# When a pool pays (measured on a 2-core machine, issue 38): one process measures about 300 MB/s of
# float32 checkpoints (a 6 x 48 MB run: 0.9 s of reading and figures after 0.35 s of start-up), while
# each spawned worker costs 0.3-0.5 s of CPU before its first byte (a fresh interpreter importing numpy
# and the readers) and its tasks re-read the boundary files. W workers save at most (1 - 1/W) of the
# reading, so the break-even on 2 workers is near 2 x 0.4 s x 300 MB/s = 240 MB on an idle machine;
# on a shared one it moved past 1 GB (6 x 192 MB: 5.1 s in one process, 8.1 s on a pool of 2). A worker
# is therefore started only for each full BYTES_PER_WORKER still to read, and only on a core of its own.
BYTES_PER_WORKER = 1 << 30


def choose_workers(total_bytes: int, requested: int | None = None, cores: int | None = None,
                   per_worker: int = BYTES_PER_WORKER) -> int:
    """How many local processes read a job that needs ``total_bytes`` read: 1 means in this process.

    ``requested`` (the user's count) is obeyed as given. Otherwise one worker per full ``per_worker``
    bytes to read, at most one per core (``cores``: default :func:`default_workers`), so a small job,
    or any job on one core, is read in the calling process with no pool started."""
    if requested is not None:
        return max(1, requested)
    cores = default_workers() if cores is None else max(1, cores)
    if per_worker <= 0:
        return cores
    return max(1, min(cores, total_bytes // per_worker))


class LocalPool:
    """Worker processes kept between runs (a watch reads a new checkpoint without starting them again).

    spawn, not fork: a forked child of a threaded parent (the GUI, a watchdog observer) may deadlock.
    A cancelled or failed run stops the workers at once; the next run starts new ones.
    """

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self._pool: Any = None

    def run(self, fn: Callable[[T], R], tasks: Sequence[T],
            token: CancelToken | None) -> Generator[tuple[int, R], None, None]:
        """Run ``fn(task)`` for each of ``tasks`` on the workers; yields (task index, result) as each finishes."""
        import concurrent.futures as cf
        import multiprocessing

        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_worker_init)
        finished = False
        try:
            futures = {self._pool.submit(fn, task): i for i, task in enumerate(tasks)}
            pending = set(futures)
            while pending:  # bounded: the tasks given, each once
                if token is not None:
                    token.check()
                done, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    try:
                        result = fut.result()
                    except cf.process.BrokenProcessPool:
                        raise CheckpointError("a worker process died while reading (out of memory?)") from None
                    yield futures[fut], result
            finished = True
        finally:
            if not finished:  # cancelled or failed: stop the workers now rather than wait for their tasks
                processes = getattr(self._pool, "_processes", None) or {}
                for proc in list(processes.values()):
                    proc.terminate()
                self.close()

    def close(self) -> None:
        """Stop the workers (waits for them to exit)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _worker_init() -> None:
    """A pool worker leaves Ctrl+C to its parent, which stops it (no traceback from every worker)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)

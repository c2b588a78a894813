"""A Dask cluster as an executor: connecting to its scheduler, its size, and tasks run on its workers.

Each worker runs the task's function itself (a module-level function of ckptview, installed there too):
what travels is the task (paths, names, options) and the result, never the bytes the task reads.
A worker lost while it runs a task is the scheduler's to retry on another worker (the task is pure, so
the retried result is the same).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.jobs import CancelToken

T = TypeVar("T")
R = TypeVar("R")

CONNECT_TIMEOUT = 30  # seconds distributed keeps trying a scheduler that does not answer (it may be starting)


class SchedulerError(CheckpointError):
    """The Dask scheduler cannot be used: `address` (as given), `reason` (None: Dask is not installed)."""

    def __init__(self, message: str, address: str, reason: str | None) -> None:
        super().__init__(message)
        self.address, self.reason = address, reason


def connect(scheduler: str) -> Any:
    """A ``distributed.Client`` of the Dask scheduler at ``scheduler`` (tcp://HOST:PORT), or one clear error."""
    try:
        from distributed import Client
    except ImportError:
        raise SchedulerError("a Dask scheduler needs the distributed package: pip install 'ckptview[cluster]'",
                             scheduler, None) from None
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerError(f"cannot reach the Dask scheduler {scheduler}: {exc}", scheduler, str(exc)) from None


def cluster_threads(client: Any) -> int:
    """How many tasks a Dask cluster runs at once (its workers' threads)."""
    try:
        return max(1, int(sum(client.nthreads().values())))
    except (OSError, TimeoutError, AttributeError):
        return 1


def run_on_dask(fn: Callable[[T], R], tasks: Sequence[T], scheduler: Any,
                token: CancelToken | None) -> Generator[tuple[int, R], None, None]:
    """``fn(task)`` for each task on the cluster (``scheduler``: an address or a ``distributed.Client``);
    yields (task index, result) as each finishes. A task's own error is raised here, as it was raised there."""
    from distributed import as_completed

    own = isinstance(scheduler, str)
    client = connect(scheduler) if own else scheduler
    try:
        futures = client.map(fn, list(tasks), pure=False)
        index = {fut.key: i for i, fut in enumerate(futures)}
        finished = False
        try:
            for fut in as_completed(futures):  # type: ignore[no-untyped-call]
                if token is not None and token.cancelled:
                    raise Cancelled("cancelled")
                yield index[fut.key], fut.result()
            finished = True
        finally:
            if not finished:
                client.cancel(futures)
    finally:
        if own:
            client.close()

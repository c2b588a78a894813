"""Where whole-checkpoint work runs: as the user placed it (a Dask scheduler, a count of local workers) or,
left alone, on this machine's cores once the bytes to read pay for starting workers (Qt-free).

`Placement` is what the user asked; `Sweep` is one job's executor, opened for the bytes the job reads:
`fans_out` False means the job runs in the calling process, through the local code path unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ckptview.core.cluster.local import BYTES_PER_WORKER, LocalPool, choose_workers
from ckptview.core.cluster.scheduler import cluster_threads, connect
from ckptview.core.cluster.tasks import run_tasks
from ckptview.core.jobs import CancelToken

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Placement:
    """Where whole-checkpoint work may run: `scheduler` ("tcp://HOST:PORT" or a `distributed.Client`) puts
    it on a Dask cluster; else up to `workers` local processes (None: one per `per_worker` bytes to read,
    at most one per core; 1: in this process)."""

    scheduler: Any = None
    workers: int | None = None
    per_worker: int = BYTES_PER_WORKER


LOCAL = Placement()


@dataclass
class SweepReport:
    """What a fanned-out job did: tasks run, the bytes its tasks read, and where."""

    where: str = "this process"
    slots: int = 1
    tasks: int = 0
    bytes_read: int = 0


class Sweep:
    """One job's executor: a Dask client (connected here when given an address) or a local pool."""

    def __init__(self, placement: Placement, total_bytes: int) -> None:
        self.placement = placement
        self._client: Any = None
        self._own_client = False
        if placement.scheduler is not None:
            if isinstance(placement.scheduler, str):
                self._client = connect(placement.scheduler)
                self._own_client = True
                where = f"the Dask cluster at {placement.scheduler}"
            else:
                self._client = placement.scheduler
                where = "a Dask cluster"
            self.slots = cluster_threads(self._client)
        else:
            self.slots = choose_workers(total_bytes, placement.workers, per_worker=placement.per_worker)
            where = f"{self.slots} local worker processes"
        self.report = SweepReport(where if self.fans_out else "this process", self.slots)
        self._pool: LocalPool | None = None

    @property
    def fans_out(self) -> bool:
        """Whether the work leaves this process (Dask, or a local pool of more than one worker)."""
        return self._client is not None or self.slots > 1

    def run(self, fn: Callable[[T], R], tasks: Sequence[T],
            token: CancelToken | None = None) -> Generator[tuple[int, R], None, None]:
        """`fn(task)` for each task where this sweep runs them; yields (task index, result) as each finishes."""
        self.report.tasks += len(tasks)
        if self._client is None and self._pool is None and self.slots > 1 and len(tasks) > 1:
            self._pool = LocalPool(min(self.slots, len(tasks)))
        for item in run_tasks(fn, tasks, self.slots if self._client is None else 0, self._client, token,
                              self._pool):
            if isinstance(item, tuple):
                yield item

    def close(self) -> None:
        """Stop the local workers, and the connection to a scheduler given by its address."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> Sweep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

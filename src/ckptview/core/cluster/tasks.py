"""Run a list of pure tasks where they are asked to run: in this process, on a local pool, or on Dask."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

from ckptview.core.cluster.local import LocalPool
from ckptview.core.cluster.scheduler import run_on_dask
from ckptview.core.jobs import CancelToken

T = TypeVar("T")
R = TypeVar("R")


def run_tasks(fn: Callable[[T], R], tasks: Sequence[T], workers: int = 1, scheduler: Any = None,
              token: CancelToken | None = None, pool: LocalPool | None = None,
              steps: Callable[[T, CancelToken | None], Generator[int, None, R]] | None = None,
              ) -> Generator[tuple[int, R] | int, None, None]:
    """Run ``fn(task)`` for each of ``tasks``; yields (task index, result) as each finishes (any order), and,
    for tasks run in this process through ``steps`` (``fn`` as a generator of the bytes it reads), those
    bytes as they are read (an int).

    ``scheduler`` ("tcp://HOST:PORT" or a ``distributed.Client``) runs them on a Dask cluster; else a local
    process pool of ``workers`` processes (in this process when ``workers`` is 1 or there is one task):
    ``pool`` when given (kept for the next call), else one made for this call.
    """
    if not tasks:
        return
    if scheduler is not None:
        yield from run_on_dask(fn, tasks, scheduler, token)
    elif workers <= 1 or len(tasks) == 1:
        for i, task in enumerate(tasks):
            if token is not None:
                token.check()
            if steps is not None:
                result = yield from steps(task, token)
            else:
                result = fn(task)
            yield i, result
    elif pool is not None:
        yield from pool.run(fn, tasks, token)
    else:
        own = LocalPool(min(workers, len(tasks)))
        try:
            yield from own.run(fn, tasks, token)
        finally:
            own.close()

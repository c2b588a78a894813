"""Running pure tasks away from the caller: in this process, on a local pool of worker processes, or on a
Dask cluster; the same results whichever runs them (the tasks are pure functions of their arguments)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.cluster.local import BYTES_PER_WORKER, LocalPool, choose_workers, default_workers
    from ckptview.core.cluster.scheduler import cluster_threads, connect
    from ckptview.core.cluster.tasks import run_tasks

__all__ = ["BYTES_PER_WORKER", "LocalPool", "choose_workers", "cluster_threads", "connect", "default_workers",
           "run_tasks"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "local": ["BYTES_PER_WORKER", "LocalPool", "choose_workers", "default_workers"],
    "scheduler": ["cluster_threads", "connect"],
    "tasks": ["run_tasks"],
})

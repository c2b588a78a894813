"""The one module that changes how many threads BLAS and LAPACK use (as gc_policy is the collector's).

A sum's order, hence a figure's last bits, depends on how many threads BLAS splits it over: a spectrum's
Gram matrix and eigenvalues computed with two threads differ from those computed with one, and the count
differs between machines, processes and Dask workers (their nannies set OMP_NUM_THREADS=1). Every BLAS or
LAPACK call whose result is a figure runs inside `one_blas_thread()`, so a figure is the same whoever
computes it: this process, a local worker or a Dask worker. The limit is process-wide while it lasts, so
one section runs at a time (the sections never yield: nothing can leave one open).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_SECTION = threading.Lock()


@functools.lru_cache(maxsize=1)
def _controller() -> Any:
    """threadpoolctl's view of the BLAS libraries loaded (made once: it walks the loaded libraries)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS and LAPACK on one thread while the block runs, then as they were."""
    with _SECTION, _controller().limit(limits=1, user_api="blas"):
        yield

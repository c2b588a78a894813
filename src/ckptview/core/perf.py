"""Small performance helpers shared by the readers."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic GC while building millions of small objects that hold no garbage cycles.

    Listing 100,000 tensors allocates several million containers; left on, the collector runs
    repeated full passes over all of them and costs more than the work itself.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

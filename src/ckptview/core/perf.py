"""Small performance helpers shared by the readers."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic GC while building millions of small objects that hold no garbage cycles.

    Listing 100,000 tensors allocates several million containers; left on, the collector runs
    repeated full passes over all of them and costs more than the work itself. Several threads may
    pause at once (two files opening): the collector comes back when the last of them is done, and
    only if it was on when the first began (a GUI collects from its own thread and keeps it off).
    """
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


def gc_paused() -> bool:
    """True while some thread is inside `paused_gc` (a collector on another thread should wait)."""
    return _depth > 0


def keep_out_of_collections() -> None:
    """Move everything alive now (an opened checkpoint's tree) out of the collector's view.

    A 100,000-tensor tree is a million long-lived objects; every full pass would walk them again
    (about half a second, on the GUI thread). Frozen objects are skipped until `allow_collection`.
    """
    gc.freeze()

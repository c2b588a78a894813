"""The process's collector policy: the one module that changes the cyclic GC's state.

Three moves, for trees of millions of small long-lived objects (a checkpoint's listing):
- `paused_gc()`: build in bulk without collections walking the half-built tree;
- `keep_out_of_collections()`: park what is alive (an opened tree) where collections never walk it;
- `release_parked()`: thaw, collect what was let go (a closed tab), park the rest again.
Only the main thread changes collector state (it is the GUI thread in the window). A worker thread's bulk
build is counted, so the window's collector waits for it (`gc_paused`), and a worker's park is a request
that the window's collector carries out on its own thread (`take_park_request`): a collection on a worker
could finalise Qt objects off the GUI thread, and collector state flipped from two threads is a race.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_workers_building = 0  # worker threads inside `paused_gc`
_main_depth = 0  # nesting of `paused_gc` on the main thread
_was_enabled = False
_park_requested = False


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def paused_gc() -> Iterator[None]:
    """Build in bulk: no collection runs over the millions of small objects being made (they hold no cycles).

    Listing 100,000 tensors allocates several million containers; left on, the collector runs repeated
    full passes over all of them and costs more than the work itself. On the main thread the collector is
    switched off and back on (if it was on) when the outermost pause ends. On a worker thread nothing is
    switched: the pause is counted, and the window (whose collector is off, run from its own timer) waits.
    """
    global _workers_building, _main_depth, _was_enabled
    main = _on_main_thread()
    with _lock:
        if main:
            if _main_depth == 0:
                _was_enabled = gc.isenabled()
                gc.disable()
            _main_depth += 1
        else:
            _workers_building += 1
    try:
        yield
    finally:
        with _lock:
            if main:
                _main_depth -= 1
                if _main_depth == 0 and _was_enabled:
                    gc.enable()
            else:
                _workers_building -= 1


def gc_paused() -> bool:
    """True while some thread is inside `paused_gc` (the window's collector waits)."""
    return _workers_building > 0 or _main_depth > 0


def keep_out_of_collections() -> None:
    """Park everything alive now (an opened checkpoint's tree) out of the collector's view.

    A 100,000-tensor tree is a million long-lived objects; every full pass would walk them again
    (about half a second, on the GUI thread). Parked objects are skipped until `release_parked`. On a
    worker thread this is a request, carried out by the window's collector before its next collection.
    """
    global _park_requested
    if _on_main_thread():
        _park_requested = False
        gc.freeze()
    else:
        _park_requested = True


def take_park_request() -> bool:
    """On the main thread: carry out a worker's park request, if there is one (True when there was)."""
    global _park_requested
    if not _on_main_thread() or not _park_requested:
        return False
    _park_requested = False
    gc.freeze()
    return True


def release_parked() -> None:
    """On the main thread: thaw everything parked, collect what is garbage now, park the rest again."""
    if not _on_main_thread():
        raise RuntimeError("the collector is released on the main thread only")
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def stop_automatic_collection() -> tuple[int, int, int]:
    """On the main thread: switch the automatic collector off (the window collects from a timer of its own
    thread, `collect_due`); the thresholds it used."""
    if not _on_main_thread():
        raise RuntimeError("the collector is switched off on the main thread only")
    gc.disable()
    return gc.get_threshold()


def collect_due(thresholds: tuple[int, int, int]) -> None:
    """On the main thread: collect the generations whose counts crossed `thresholds`, as gc itself would."""
    if not _on_main_thread():
        return
    count0, count1, count2 = gc.get_count()
    t0, t1, t2 = thresholds
    if count0 > t0:
        gc.collect(0)
        if count1 > t1:
            gc.collect(1)
            if count2 > t2:
                gc.collect(2)

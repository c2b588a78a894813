"""The collector policy (core/gc_policy.py): only the main thread changes the collector's state.

A worker's bulk build is counted (the window's collector waits for it) and a worker's park is a request
the main thread carries out; nothing a worker does switches the collector, freezes or collects.
"""

from __future__ import annotations

import gc
import threading

import pytest

from ckptview.core import gc_policy as perf


class RecordingGc:
    """Stands in for the `gc` module inside perf: state changes are recorded with the thread making them."""

    CHANGES = ("disable", "enable", "freeze", "unfreeze", "collect")

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def changes(self) -> list[tuple[str, bool]]:
        """The calls, less the window's timer collecting on the main thread: a window left by an earlier test
        collects whenever pytest-qt lets events run (after each setup), which is the policy, not a breach."""
        return [call for call in self.calls if call != ("collect", True)]

    def __getattr__(self, name: str):
        real = getattr(gc, name)
        if name not in self.CHANGES:
            return real

        def recorded(*args):
            self.calls.append((name, threading.current_thread() is threading.main_thread()))
            if name in ("disable", "enable"):
                return real(*args)
            return None  # freezing the test process is not this test's business: recorded, not done

        return recorded


@pytest.fixture
def recording(monkeypatch):
    fake = RecordingGc()
    monkeypatch.setattr(perf, "gc", fake)
    monkeypatch.setattr(perf, "_park_requested", False)
    was = gc.isenabled()
    yield fake
    if was:
        gc.enable()


def _in_worker(fn) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def test_a_worker_builds_and_parks_without_touching_the_collector(recording):
    seen: dict[str, bool] = {}

    def build_and_park() -> None:
        with perf.paused_gc():
            seen["paused"] = perf.gc_paused()
            perf.keep_out_of_collections()
        seen["after"] = perf.gc_paused()

    _in_worker(build_and_park)
    assert seen == {"paused": True, "after": False}
    assert recording.changes() == []  # no switch, no freeze, from the worker
    assert perf.take_park_request() is True  # the main thread carries the park out
    assert recording.changes() == [("freeze", True)]
    assert perf.take_park_request() is False  # once


def test_a_worker_cannot_take_a_park_request_or_release(recording):
    perf.keep_out_of_collections()  # the main thread parks at once
    assert recording.changes() == [("freeze", True)]

    def try_all() -> None:
        assert perf.take_park_request() is False
        perf.collect_due((0, 0, 0))
        with pytest.raises(RuntimeError, match="main thread"):
            perf.release_parked()
        with pytest.raises(RuntimeError, match="main thread"):
            perf.stop_automatic_collection()

    _in_worker(try_all)
    assert recording.changes() == [("freeze", True)]


def test_the_main_thread_pauses_and_restores_the_collector_around_nested_builds(recording):
    gc.enable()
    with perf.paused_gc():
        assert not gc.isenabled()
        with perf.paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer build still runs
    assert gc.isenabled()
    assert [name for name, _ in recording.changes()] == ["disable", "enable"]
    assert all(main for _, main in recording.calls)


def test_a_worker_ending_last_does_not_switch_the_collector(recording):
    """Main and worker build at once; the worker ends after the main thread: the main thread restored the
    collector, the worker changed nothing, and the window's collector waited for both."""
    gc.enable()
    inside, leave = threading.Event(), threading.Event()

    def build() -> None:
        with perf.paused_gc():
            inside.set()
            assert leave.wait(60)

    worker = threading.Thread(target=build)
    worker.start()
    assert inside.wait(60)
    with perf.paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled() and perf.gc_paused()  # the main thread's own pause ended; the worker's goes on
    leave.set()
    worker.join()
    assert not perf.gc_paused() and gc.isenabled()
    assert all(main for _, main in recording.calls)

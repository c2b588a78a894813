"""ReadAhead: small reads handed it come from windows while a walk runs, and only then; the walk behaves as
`yield from` would. The read-ahead is an object passed to the reads, never a thread's state."""

from __future__ import annotations

import os

import pytest

import ckptview.core.read.bytes.files as files
from ckptview.core.errors import FileChangedError
from ckptview.core.read.bytes.files import FileMap, ReadAhead, read_ahead


def file_reads(monkeypatch) -> list[int]:
    """The offsets of the reads that reach the file from now on (a window is one read)."""
    calls: list[int] = []
    real = files._fill
    monkeypatch.setattr(files, "_fill", lambda fd, view, offset: calls.append(offset) or real(fd, view, offset))
    return calls


def _file(tmp_path, name: str, size: int = 3 << 20) -> FileMap:
    path = tmp_path / name
    path.write_bytes(bytes(range(256)) * (size // 256))
    return FileMap(str(path))


def test_the_walk_sees_sent_values_thrown_errors_and_close_as_with_yield_from():
    log = []
    holder: list[ReadAhead] = []

    def _active() -> object:
        return holder[0].active if holder else None

    def make(ahead: ReadAhead):
        holder[:] = [ahead]
        return walk()

    def walk():
        try:
            got = yield 1
            log.append(("sent", got))
            try:
                yield 2
            except KeyError as exc:
                log.append(("thrown", exc.args[0]))
                yield 3
            yield 4
        finally:
            log.append(("active in finally", _active() is True))
        return "done"

    steps = read_ahead(make)
    assert next(steps) == 1 and _active() is False
    assert steps.send("x") == 2
    assert steps.throw(KeyError("k")) == 3
    assert next(steps) == 4
    with pytest.raises(StopIteration) as stop:
        next(steps)
    assert stop.value.value == "done"
    assert log == [("sent", "x"), ("thrown", "k"), ("active in finally", True)]

    log.clear()
    steps = read_ahead(make)
    next(steps)
    steps.close()  # a cancelled walk: its own cleanup runs now, in this thread
    assert log == [("active in finally", True)] and _active() is False


def test_reads_come_from_windows_only_while_the_walk_runs(tmp_path, monkeypatch):
    fmap = _file(tmp_path, "a.bin")
    calls = file_reads(monkeypatch)

    kept: list[ReadAhead] = []

    def walk(ahead: ReadAhead):
        kept.append(ahead)
        for offset in range(0, 1 << 20, 4096):  # 256 small reads inside one window
            yield fmap.read(offset, 100, ahead)

    chunks = list(read_ahead(walk))
    assert len(calls) == 1 and chunks[5] == bytes((5 * 4096 + i) % 256 for i in range(100))
    calls.clear()
    fmap.read(0, 100)
    fmap.read(4096, 100)
    assert len(calls) == 2  # reads not handed the read-ahead: every read goes to the file
    calls.clear()
    fmap.read(0, 100, kept[0])
    fmap.read(4096, 100, kept[0])
    assert len(calls) == 2  # the walk has ended: its read-ahead is not active any more
    fmap.close()


def test_a_suspended_walk_leaves_its_read_ahead_inactive(tmp_path, monkeypatch):
    fmap = _file(tmp_path, "a.bin")
    calls = file_reads(monkeypatch)
    kept: list[ReadAhead] = []

    def walk(ahead: ReadAhead):
        kept.append(ahead)
        yield fmap.read(0, 100, ahead)
        yield fmap.read(4096, 100, ahead)

    steps = read_ahead(walk)
    next(steps)
    assert len(calls) == 1  # the window
    fmap.read(8192, 100, kept[0])  # while the walk is suspended at its yield: straight to the file
    assert len(calls) == 2
    next(steps)
    assert len(calls) == 2  # back inside the walk: from the window
    steps.close()
    fmap.close()


def test_a_walk_in_another_thread_does_not_change_this_threads_reads(tmp_path, monkeypatch):
    """The read-ahead belongs to the walk: a walk running in one thread leaves other threads' reads alone."""
    import threading

    fmap = _file(tmp_path, "a.bin")
    calls = file_reads(monkeypatch)
    inside, release = threading.Event(), threading.Event()

    def walk(ahead: ReadAhead):
        yield fmap.read(0, 100, ahead)
        inside.set()  # the walk is active (inside a step) while this thread waits
        release.wait(30)
        yield fmap.read(4096, 100, ahead)

    worker = threading.Thread(target=lambda: list(read_ahead(walk)))
    worker.start()
    assert inside.wait(30)
    before = len(calls)
    fmap.read(200_000, 100)  # this thread, during the other's walk: to the file
    assert len(calls) == before + 1
    release.set()
    worker.join(30)
    fmap.close()


def test_windows_are_bounded_and_every_file_read_is_checked_at_the_end(tmp_path):
    maps = [_file(tmp_path, f"f{i}.bin", 1 << 16) for i in range(ReadAhead.MAX_WINDOWS + 3)]
    ahead = ReadAhead()

    def walk():
        for fmap in maps:
            yield fmap.read(10, 10, ahead)
            assert len(ahead.windows) <= ReadAhead.MAX_WINDOWS

    steps = ahead.run(walk())
    next(steps)
    stat = os.stat(maps[0].path)
    os.utime(maps[0].path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))  # the first file, touched
    with pytest.raises(FileChangedError, match="f0.bin"):
        list(steps)
    for fmap in maps:
        fmap.close()

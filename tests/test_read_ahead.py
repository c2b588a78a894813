"""ReadAhead: small reads from windows while a walk runs, and only then; the walk behaves as `yield from` would."""

from __future__ import annotations

import os

import pytest

import ckptview.core.read.files as files
from ckptview.core.errors import FileChangedError
from ckptview.core.read.files import FileMap, ReadAhead, read_ahead


def _file(tmp_path, name: str, size: int = 3 << 20) -> FileMap:
    path = tmp_path / name
    path.write_bytes(bytes(range(256)) * (size // 256))
    return FileMap(str(path))


def _active() -> object:
    return files._ahead.__dict__.get("active")


def test_the_walk_sees_sent_values_thrown_errors_and_close_as_with_yield_from():
    log = []

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
            log.append(("active in finally", _active() is not None))
        return "done"

    steps = read_ahead(walk())
    assert next(steps) == 1 and _active() is None
    assert steps.send("x") == 2
    assert steps.throw(KeyError("k")) == 3
    assert next(steps) == 4
    with pytest.raises(StopIteration) as stop:
        next(steps)
    assert stop.value.value == "done"
    assert log == [("sent", "x"), ("thrown", "k"), ("active in finally", True)]

    log.clear()
    steps = read_ahead(walk())
    next(steps)
    steps.close()  # a cancelled walk: its own cleanup runs now, in this thread
    assert log == [("active in finally", True)] and _active() is None


def test_reads_come_from_windows_only_while_the_walk_runs(tmp_path, monkeypatch):
    fmap = _file(tmp_path, "a.bin")
    calls = []
    real = files._fill
    monkeypatch.setattr(files, "_fill", lambda fd, view, offset: calls.append(offset) or real(fd, view, offset))

    def walk():
        for offset in range(0, 1 << 20, 4096):  # 256 small reads inside one window
            yield fmap.read(offset, 100)

    chunks = list(read_ahead(walk()))
    assert len(calls) == 1 and chunks[5] == bytes((5 * 4096 + i) % 256 for i in range(100))
    calls.clear()
    fmap.read(0, 100)
    fmap.read(4096, 100)
    assert len(calls) == 2  # outside the walk: every read goes to the file
    fmap.close()


def test_windows_are_bounded_and_every_file_read_is_checked_at_the_end(tmp_path):
    maps = [_file(tmp_path, f"f{i}.bin", 1 << 16) for i in range(ReadAhead.MAX_WINDOWS + 3)]
    ahead = ReadAhead()

    def walk():
        for fmap in maps:
            yield fmap.read(10, 10)
            assert len(ahead.windows) <= ReadAhead.MAX_WINDOWS

    steps = ahead.run(walk())
    next(steps)
    stat = os.stat(maps[0].path)
    os.utime(maps[0].path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))  # the first file, touched
    with pytest.raises(FileChangedError, match="f0.bin"):
        list(steps)
    for fmap in maps:
        fmap.close()

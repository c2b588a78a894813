"""The series cache is never the truth (issue 34, findings 3 and 4).

3. The cache keyed a file by path, inode, size, mtime and a hash of its first and last 64 KiB: a checkpoint
   rewritten in place with the same size and its mtime restored (`os.utime`), 25,600 NaN written in the
   middle, showed its old figures and "0 findings" until `--no-cache`.
4. Entries of deleted checkpoints were never evicted: a rotating run grew the database round after round.
"""

from __future__ import annotations

import json
import os
import sqlite3

import numpy as np
import pytest
import torch

from ckptview.cli import main
from ckptview.core.series import cache as series_cache
from ckptview.core.series.cache import SeriesCache, file_key
from ckptview.core.series.live import run_live

N = 1 << 20  # a 4 MiB tensor: its middle is far from the first and last 64 KiB
NANS = 25_600


def _save(path, step: int, seed: int) -> str:
    gen = torch.Generator().manual_seed(seed)
    torch.save({"step": step, "model": {"w": torch.randn(N, generator=gen), "b": torch.zeros(4)}}, path)
    return str(path)


def _series_json(paths: list[str], capsys, *extra: str) -> dict:
    assert main(["series", *paths, "--json", "--workers", "1", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _nan_in_the_middle(path: str) -> None:
    """25,600 float32 NaN written over the middle of the tensor's bytes, in place: same size, same mtime."""
    st = os.stat(path)
    values = torch.load(path, weights_only=True)["model"]["w"].numpy()
    raw = values.tobytes()
    with open(path, "r+b") as fh:
        data = fh.read()
        start = data.index(raw[: 1 << 12])  # where the tensor's bytes are stored (uncompressed)
        middle = start + (N // 2) * 4
        fh.seek(middle)
        fh.write(np.full(NANS, np.nan, dtype=np.float32).tobytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def test_a_rewrite_in_place_with_its_mtime_restored_shows_the_new_figures(tmp_path, xdg, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    paths = [_save(run / f"step_{s}.pt", s, s) for s in (1, 2, 3)]
    before = _series_json(paths, capsys)
    w = next(t for t in before["tensors"] if t["name"] == "model.w")
    assert w["nan"] == [0, 0, 0]
    assert SeriesCache().count() == 3
    _nan_in_the_middle(paths[1])
    fresh = _series_json(paths, capsys, "--no-cache")
    cached = _series_json(paths, capsys)
    assert cached == fresh  # the cache gives what the file holds now
    w = next(t for t in cached["tensors"] if t["name"] == "model.w")
    assert w["nan"][1] == NANS
    assert any(f["kind"] == "nonfinite" or "NaN" in json.dumps(f) for f in cached["findings"])


def test_the_content_sample_spans_the_whole_file(tmp_path, monkeypatch) -> None:
    """Without the stat's ctime (a file system that does not keep it, a clock set back), a change in the
    middle still changes the key: the content is sampled across all of the file."""
    path = _save(tmp_path / "c.pt", 1, 1)
    st = os.stat(path)
    key = file_key(path, 64)
    with open(path, "r+b") as fh:
        data = bytearray(fh.read())
        third = len(data) // 3
        for pos in range(third, 2 * third, 1024):  # the middle third changed, edges untouched
            data[pos] ^= 0xFF
        fh.seek(0)
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    real_stat, real_fstat = os.stat, os.fstat

    def same(got):
        return st if got.st_ino == st.st_ino else got  # every field as before the rewrite, ctime too

    monkeypatch.setattr(os, "stat", lambda p, *a, **k: same(real_stat(p, *a, **k)))
    monkeypatch.setattr(os, "fstat", lambda fd: same(real_fstat(fd)))
    assert os.stat(path).st_ctime_ns == st.st_ctime_ns
    assert file_key(path, 64) != key


def test_a_rotating_run_keeps_the_database_bounded(tmp_path, xdg, capsys) -> None:
    """save_total_limit=2: each round writes two checkpoints and deletes the two before them."""
    run = tmp_path / "run"
    run.mkdir()
    sizes, counts = [], []
    step = 0
    for _ in range(6):
        for _ in range(2):
            step += 1
            _save(run / f"step_{step}.pt", step, step)
        for old in sorted(run.iterdir(), key=lambda p: int(p.stem.split("_")[1]))[:-2]:
            old.unlink()
        _series_json([str(run)], capsys)
        cache = SeriesCache()
        counts.append(cache.count())
        cache.close()
        db = series_cache.default_path()
        sizes.append(sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p)))
    assert counts == [2] * 6, counts  # the gone checkpoints' entries are evicted
    assert max(sizes[2:]) <= 1.5 * sizes[1] + (256 << 10), sizes


def test_the_database_has_a_size_cap_with_least_recently_used_eviction(tmp_path, monkeypatch) -> None:
    cap = 64 << 10
    monkeypatch.setattr(series_cache, "MAX_BYTES", cap)
    cache = SeriesCache(str(tmp_path / "c.sqlite3"))
    paths = [_save(tmp_path / f"f{i}.pt", i, i) for i in range(40)]
    blob = {"model.w": {"x": "y" * 4000}}
    for i, path in enumerate(paths):
        cache.put_meta(f"k{i}", path, blob)
        if i >= 1:
            assert cache.meta("k0") == blob  # used on every round: the most recently used stays
    held = cache._query("SELECT sum(length(meta)) + coalesce(sum(length(figures)), 0) FROM entries", ())
    assert held[0][0] <= cap
    assert cache.meta("k0") == blob and cache.meta(f"k{len(paths) - 1}") == blob
    assert cache.meta("k1") is None  # the least recently used went first
    cache.close()


def test_a_corrupt_database_is_rebuilt_with_one_warning(tmp_path, xdg, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    paths = [_save(run / f"step_{s}.pt", s, s) for s in (1, 2)]
    _series_json(paths, capsys)
    db = series_cache.default_path()
    cache = SeriesCache()
    cache.close()
    for p in (db + "-wal", db + "-shm"):
        if os.path.exists(p):
            os.unlink(p)
    with open(db, "r+b") as fh:  # a valid header, pages of garbage
        fh.seek(4096)
        fh.write(os.urandom(8192))
    warned = []
    for _ in range(2):
        assert main(["series", *paths, "--json", "--workers", "1"]) == 0
        got = capsys.readouterr()
        json.loads(got.out)
        warned.append([line for line in got.err.splitlines() if "series cache" in line])
    assert len(warned[0]) == 1 and "started again" in warned[0][0] and warned[1] == []  # one warning, once
    assert SeriesCache().count() == 2
    broken = [n for n in os.listdir(os.path.dirname(db)) if ".broken" in n]
    assert len(broken) == 1


def test_cached_rows_of_another_shape_are_a_miss_not_a_crash(tmp_path) -> None:
    path = str(tmp_path / "c.sqlite3")
    cache = SeriesCache(path)
    cache.put_meta("k", str(tmp_path / "x.pt"), {"format": "torch-zip"})
    cache.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE entries SET figures = ?", (json.dumps({"w": [1, 2, 3]}),))
    db.execute("INSERT INTO pairs (prev, cur, sums) VALUES ('k', 'k', ?)", (json.dumps({"w": {"nope": 1}}),))
    db.commit()
    db.close()
    cache = SeriesCache(path)
    assert cache.figures("k") is None and cache.pair("k", "k") is None
    cache.close()
    assert run_live  # the engine treats a miss as a read

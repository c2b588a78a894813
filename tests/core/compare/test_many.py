"""A diff of many small tensors: bytes read in windows, figures as torch computes them, a change still refused."""

from __future__ import annotations

import os

import pytest
import torch

import ckptview.core.read.bytes.files as files
from ckptview.core import open_checkpoint
from ckptview.core.compare.diff import diff_checkpoints, iter_diff
from ckptview.core.errors import FileChangedError
from tests.core.compare.test_diff import assert_figures

N = 600


def _pair(tmp_path):
    gen = torch.Generator().manual_seed(7)
    a = {f"layers.{i}.{kind}": torch.randn(shape, generator=gen).to(dtype)
         for i in range(N // 3) for kind, shape, dtype in
         (("weight", (4, 5), torch.float32), ("bias", (5,), torch.bfloat16), ("scale", (3,), torch.float16))}
    b = {k: v.clone() for k, v in a.items()}
    for i in range(0, N // 3, 7):  # every 7th layer changes: small edits, a NaN, a dtype change
        b[f"layers.{i}.weight"][1, 2] += 0.25
    b["layers.3.bias"][0] = float("nan")
    b["layers.5.scale"] = b["layers.5.scale"].float()
    b["layers.8.weight"] = b["layers.8.weight"].t().contiguous().t()  # same values, strided: the streamed path
    pa, pb = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save(a, pa)
    torch.save(b, pb)
    return pa, pb, a, b


@pytest.fixture
def fills(monkeypatch):
    """Positioned reads made by the file layer (each one a system call)."""
    count = {"n": 0}
    real = files._fill

    def fill(fd, view, offset):
        count["n"] += 1
        return real(fd, view, offset)

    monkeypatch.setattr(files, "_fill", fill)
    return count


def test_many_small_tensors_match_torch_with_a_read_per_window(tmp_path, fills):
    pa, pb, a, b = _pair(tmp_path)
    ca, cb = open_checkpoint(pa), open_checkpoint(pb)
    opened = fills["n"]
    result = diff_checkpoints(ca, cb)
    reads = fills["n"] - opened
    # Two reads per tensor and file without windows (its local header, its bytes): 2,400 here.
    assert reads <= 8, reads
    rows = {row.name: row for row in result.tensors}
    assert len(rows) == N
    for name, ta in a.items():
        tb = b[name]
        row = rows[name]
        if ta.dtype != tb.dtype:
            assert row.status == "dtype_mismatch"
        else:
            assert_figures(row, ta, tb)
            assert row.status == ("identical" if torch.equal(ta, tb) else "changed"), name
    from ckptview.core.read.values.reading import read_values

    before = fills["n"]
    read_values(ca.tensor("layers.1.weight"))
    assert fills["n"] > before  # a read after the diff goes to the file: nothing of the diff's is left active
    ca.close()
    cb.close()


def _diff_until(tmp_path, row: int):
    """A diff of `_pair`'s files, stepped until row `row` is compared: (path of B, A, B, the steps left)."""
    pa, pb, _, _ = _pair(tmp_path)
    ca, cb = open_checkpoint(pa), open_checkpoint(pb)
    steps = iter_diff(ca, cb)
    for progress in steps:
        if progress.index >= row:
            break
    return pb, ca, cb, steps


def test_a_file_changed_during_the_diff_fails_it_even_when_its_bytes_came_from_a_window(tmp_path):
    pb, ca, cb, steps = _diff_until(tmp_path, 0)  # the first row compared: both files' first windows read
    stat = os.stat(pb)
    os.utime(pb, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))  # same bytes, touched
    with pytest.raises(FileChangedError, match="b.pt"):
        for _ in steps:
            pass
    ca.close()
    cb.close()


def test_a_suspended_or_abandoned_diff_leaves_no_window_behind(tmp_path, fills):
    from ckptview.core.read.values.reading import read_values

    pb, ca, cb, steps = _diff_until(tmp_path, 3)
    before = fills["n"]
    read_values(cb.tensor("layers.1.weight"))  # between two steps: reads here are plain reads
    assert fills["n"] > before
    steps.close()
    # A read outside the diff goes to the file and sees a change at once.
    with open(pb, "r+b") as fh:
        fh.write(b"PK\x03\x04 changed")
    info = cb.tensor("layers.0.weight")
    with pytest.raises(FileChangedError):
        read_values(info)
    ca.close()
    cb.close()

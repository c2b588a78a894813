"""Chunks read into one reused buffer (`iter_chunks(buffers=...)`): the same values, aligned like the file."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from ckptview.core import open_checkpoint
from ckptview.core.compare.diff import diff_checkpoints
from ckptview.core.read.values.reading import CACHE_LINE, ReadBuffers, aligned_empty, iter_chunks


@pytest.mark.parametrize("offset", [0, 4, 16, 60, 64, 100])
def test_aligned_empty_sits_where_the_file_offset_does(offset):
    out = aligned_empty(100_000, np.dtype(np.float32), offset)
    assert out.shape == (100_000,) and out.dtype == np.float32
    assert (out.ctypes.data - offset) % CACHE_LINE == 0


def test_an_offset_off_the_itemsize_keeps_the_array_aligned():
    out = aligned_empty(100_000, np.dtype(np.float64), 3)
    assert out.ctypes.data % 8 == 0 and out.flags.aligned


@pytest.mark.parametrize("fmt", ["zip", "safetensors"])
def test_reused_chunks_hold_the_values_each_in_turn(tmp_path, fmt):
    gen = torch.Generator().manual_seed(0)
    sd = {"w": torch.randn(1000, 37, generator=gen), "b": torch.randn(5, generator=gen).to(torch.bfloat16)}
    path = tmp_path / ("m.pt" if fmt == "zip" else "m.safetensors")
    if fmt == "zip":
        torch.save(sd, path)
    else:
        save_file(sd, str(path))
    ckpt = open_checkpoint(str(path))
    for entry in ckpt.tensors():
        plain = np.concatenate([c.copy() for c in iter_chunks(entry.info, 1000)])
        seen = []
        for chunk in iter_chunks(entry.info, 1000, buffers=ReadBuffers()):
            seen.append(chunk.copy())  # each chunk is valid until the next is asked for
        reused = np.concatenate(seen)
        assert reused.dtype == plain.dtype
        np.testing.assert_array_equal(reused.view(np.uint8), plain.view(np.uint8))


def test_a_diff_of_reused_chunks_matches_one_of_arrays_in_memory(tmp_path):
    gen = torch.Generator().manual_seed(1)
    a = {"w": torch.randn(700, 1000, generator=gen), "tied": torch.randn(300, 64, generator=gen)}
    a["tied_too"] = a["tied"]  # one storage, two names
    b = {k: v + 1e-3 * torch.randn(v.shape, generator=gen) for k, v in a.items() if k != "tied_too"}
    b["tied_too"] = b["tied"]
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    result = diff_checkpoints(open_checkpoint(str(tmp_path / "a.pt")), open_checkpoint(str(tmp_path / "b.pt")),
                              chunk_elems=1 << 16)
    for row in result.tensors:
        x, y = a[row.name].double(), b[row.name].double()
        d = y - x
        assert row.status == "changed"
        assert row.max_abs_diff == pytest.approx(d.abs().max().item(), rel=1e-12)
        assert row.mean_abs_diff == pytest.approx(d.abs().mean().item(), rel=1e-9)
        assert row.rel_l2 == pytest.approx((d.norm() / x.norm()).item(), rel=1e-9)
        assert row.cosine == pytest.approx(((x * y).sum() / (x.norm() * y.norm())).item(), rel=1e-9)
        assert row.frac_changed == pytest.approx((a[row.name] != b[row.name]).double().mean().item())


def test_a_weight_tied_on_both_sides_is_read_once(tmp_path, monkeypatch):
    from ckptview.core.read.bytes.files import FileMap

    gen = torch.Generator().manual_seed(2)
    wte = torch.randn(400, 300, generator=gen)
    a = {"wte": wte, "lm_head": wte, "bias": torch.randn(10, generator=gen)}
    wte_b = wte + 1e-3 * torch.randn(wte.shape, generator=gen)
    b = {"wte": wte_b, "lm_head": wte_b, "bias": a["bias"].clone()}
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    ca, cb = open_checkpoint(str(tmp_path / "a.pt")), open_checkpoint(str(tmp_path / "b.pt"))
    read = {"bytes": 0}
    real = FileMap.readinto

    def readinto(self, offset, buf, check=True, ahead=None):
        read["bytes"] += memoryview(buf).nbytes
        return real(self, offset, buf, check, ahead)

    monkeypatch.setattr(FileMap, "readinto", readinto)
    rows = {row.name: row for row in diff_checkpoints(ca, cb, chunk_elems=1 << 14).tensors}
    assert read["bytes"] < 2 * wte.numel() * 4 * 1.5  # each side's wte once, not twice
    for key in ("max_abs_diff", "mean_abs_diff", "rel_l2", "cosine", "frac_changed"):
        assert getattr(rows["lm_head"], key) == getattr(rows["wte"], key)
    assert rows["lm_head"].sums is not rows["wte"].sums
    assert rows["bias"].status == "identical"

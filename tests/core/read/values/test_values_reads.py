"""Values are read with positioned reads of only the bytes a view, region or sample needs (no memory map)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ckptview.core import open_checkpoint
from ckptview.core.read.bytes.files import FileMap
from ckptview.core.read.values.reading import iter_chunks, read_region, read_values
from tests.support.descriptors import HAVE_PROC_FDS, fds_under


@pytest.fixture
def counted(monkeypatch):
    """Bytes read from files, counted at the one place every read goes through."""
    total = {"bytes": 0}
    real = FileMap.readinto

    def readinto(self, offset, buf, check=True, ahead=None):
        total["bytes"] += memoryview(buf).nbytes
        return real(self, offset, buf, check, ahead)

    monkeypatch.setattr(FileMap, "readinto", readinto)
    return total


def test_no_memory_map_anywhere():
    import ckptview.core.read.bytes.files as files
    import ckptview.core.read.bytes.sources as sources
    import ckptview.core.read.values.reading as values

    for module in (files, sources, values):
        assert "mmap" not in vars(module)


@pytest.mark.parametrize("fmt", ["zip", "legacy", "safetensors"])
def test_read_region_matches_torch_and_reads_only_its_bytes(tmp_path, counted, fmt):
    big = torch.randn(400, 300)
    state = {"m": big, "t": big[:, :200].t()}  # t: a non-contiguous view over m's storage
    path = tmp_path / "m.bin"
    if fmt == "zip":
        torch.save(state, path)
    elif fmt == "legacy":
        torch.save(state, path, _use_new_zipfile_serialization=False)
    else:
        from safetensors.torch import save_file

        state = {"m": big, "t": big[:, :200].t().contiguous()}
        save_file(state, str(path))
    ckpt = open_checkpoint(path)
    loaded = torch.load(path, weights_only=True) if fmt != "safetensors" else state
    for name, index in [("m", (slice(10, 42), slice(100, 164))), ("m", (7,)), ("m", (-1, slice(None, None, 3))),
                        ("t", (slice(5, 9), slice(0, 400, 7))), ("m", (slice(390, 500),))]:
        want = loaded[name].numpy()[index]
        counted["bytes"] = 0
        got = read_region(ckpt.tensor(name), index)
        np.testing.assert_array_equal(got, want)
        if name == "m" and index == (slice(10, 42), slice(100, 164)):
            assert counted["bytes"] <= 32 * 300 * 4  # the rows it spans, not the 480,000-byte matrix
    counted["bytes"] = 0
    np.testing.assert_array_equal(read_values(ckpt.tensor("m")), loaded["m"].numpy())
    assert counted["bytes"] == 400 * 300 * 4
    streamed = np.concatenate(list(iter_chunks(ckpt.tensor("t"), 1000)))
    np.testing.assert_array_equal(streamed, loaded["t"].contiguous().numpy().reshape(-1))


def test_preview_histogram_reads_only_sampled_runs(tmp_path, counted):
    from ckptview.core.figures.histogram import PREVIEW_SAMPLES, tensor_sample_histogram

    path = tmp_path / "big.pt"
    torch.save({"w": torch.randn(2000, 1000)}, path)  # 8 MB
    info = open_checkpoint(path).tensor("w")
    counted["bytes"] = 0
    hist = tensor_sample_histogram(info, bins=20)
    assert not hist.exact and hist.looked_at <= PREVIEW_SAMPLES
    assert counted["bytes"] <= PREVIEW_SAMPLES * 4


def test_strided_slice_streams_in_small_reads(tmp_path, monkeypatch):
    qkv = torch.randn(2000, 300)
    path = tmp_path / "fused.pt"
    torch.save({"q": qkv[:, :100], "v": qkv[:, 200:]}, path)  # views over one 2.4 MB storage
    loaded = torch.load(path, weights_only=True)
    ckpt = open_checkpoint(path)
    sizes = []
    real = FileMap.readinto

    def readinto(self, offset, buf, check=True, ahead=None):
        sizes.append(memoryview(buf).nbytes)
        return real(self, offset, buf, check, ahead)

    monkeypatch.setattr(FileMap, "readinto", readinto)
    for name in ("q", "v"):
        sizes.clear()
        got = np.concatenate(list(iter_chunks(ckpt.tensor(name), 1000)))
        np.testing.assert_array_equal(got, loaded[name].contiguous().numpy().reshape(-1))
        assert max(sizes) <= 3 * 1000 * 4  # a block of rows with the columns between them, never the storage


@pytest.mark.skipif(not HAVE_PROC_FDS, reason="counts descriptors in /proc")
def test_dropped_checkpoints_do_not_leak_descriptors(tmp_path):
    import gc

    path = tmp_path / "s.pt"
    torch.save({"w": torch.ones(3)}, path)
    for _ in range(300):
        ckpt = open_checkpoint(path)
        read_values(ckpt.tensor("w"))  # opens the kept descriptor
    del ckpt
    gc.collect()
    assert len(fds_under(tmp_path)) <= 1
    closed = open_checkpoint(path)
    read_values(closed.tensor("w"))
    closed.close()
    np.testing.assert_array_equal(read_values(closed.tensor("w")), np.ones(3))  # a later read reopens
    closed.close()

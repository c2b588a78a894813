"""The block writer behind .npy and safetensors exports: values equal torch's, whatever the block layout.

Every case runs with the defaults (small files go through the page cache) and with tiny blocks written
with O_DIRECT where the file system takes it, so chunks straddle blocks, the writer thread has writes in
flight, and files end in a partial block. Values are compared bit for bit with `torch.load` of the same
file (`.float()` for bf16/fp8, as the default export documents).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ckptview.cli import main
from ckptview.core import open_checkpoint
from ckptview.core.errors import FileChangedError
from ckptview.core.export import blocks as export_io
from ckptview.core.export.blocks import ALIGN, BlockWriter
from ckptview.core.export.plan import export_tensors, select_tensors


def _run(job):
    while True:
        try:
            next(job)
        except StopIteration as stop:
            return stop.value


def _tensors() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-40, 3.0e38, -1.5])
    base = torch.randn(37, 53, generator=gen)
    return {
        "bf16": torch.cat([special, torch.randn(5001, generator=gen)]).to(torch.bfloat16),  # odd count
        "bf16_t": base.to(torch.bfloat16).t(),  # non-contiguous
        "bf16_offset": torch.randn(4099, generator=gen).to(torch.bfloat16)[1031:],  # starts mid-storage
        "bf16_step": torch.randn(64, 70, generator=gen).to(torch.bfloat16)[3:60:2, 5::3],
        "f16": torch.cat([special, torch.randn(3001, generator=gen)]).to(torch.float16),
        "f32": base,
        "f32_t": base.t(),
        "f32_offset": base[5:],
        "f64": torch.randn(777, generator=gen).double(),
        "c128": torch.randn(301, dtype=torch.complex128, generator=gen),  # 16-byte items across blocks
        "i8": torch.randint(-128, 127, (1001,), generator=gen, dtype=torch.int8),
        "i16": torch.randint(-30000, 30000, (999,), generator=gen, dtype=torch.int16),
        "i32": torch.randint(-2**31, 2**31 - 1, (1003,), generator=gen, dtype=torch.int32),
        "i64": torch.arange(-500, 1501, dtype=torch.int64) * 2**40,
        "u8": torch.randint(0, 255, (4097,), generator=gen, dtype=torch.uint8),
        "bool": torch.rand(3333, generator=gen) > 0.5,
        "bool_t": (torch.rand(30, 40, generator=gen) > 0.5).t(),
        "fp8": torch.randn(2049, generator=gen).to(torch.float8_e4m3fn),
        "expanded": torch.arange(12.0).reshape(3, 1, 4).expand(3, 500, 4),
        "scalar": torch.tensor(2.5, dtype=torch.bfloat16),
        "empty": torch.zeros(0, 7, dtype=torch.bfloat16),
    }


def _want(t: torch.Tensor) -> np.ndarray:
    """What the default export holds: torch's own values, bf16/fp8 as float32."""
    if t.dtype in (torch.bfloat16, torch.float8_e4m3fn):
        return t.float().numpy()
    return t.numpy()


def _same_tensor(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    """Same dtype, shape and bytes (bf16/fp8 kept by safetensors: compared bit for bit)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
    raw = [t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() for t in (got, want)]
    assert raw[0] == raw[1], name


def _same(got: np.ndarray, want: np.ndarray, name: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
    assert got.tobytes() == np.ascontiguousarray(want).tobytes(), name  # bit-exact, NaN payloads included


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("src") / "m.pt"
    torch.save(_tensors(), path)
    return path, torch.load(path, weights_only=True)


@pytest.fixture(params=["default", "tiny-direct-blocks"])
def blocks(request, monkeypatch):
    """The default writer, or blocks of one page, O_DIRECT from the first byte, and reads of odd sizes."""
    if request.param == "default":
        return None
    monkeypatch.setattr(export_io, "BLOCK_BYTES", ALIGN)
    monkeypatch.setattr(export_io, "DIRECT_MIN", 0)
    return 1000  # chunk_elems: chunks that never line up with blocks


def test_npy_folder_equals_torch(source, blocks, tmp_path):
    path, ref = source
    kwargs = {"chunk_elems": blocks} if blocks else {}
    kwargs["expand_repeats"] = True  # "expanded" is written expanded, as asked (values.repeats)
    result = _run(export_tensors(select_tensors(open_checkpoint(path)), tmp_path / "out", **kwargs))
    assert set(result.files) == set(ref)
    for name, tensor in ref.items():
        _same(np.load(result.files[name]), _want(tensor), name)
    assert [n for n in os.listdir(tmp_path / "out") if n.endswith(".part")] == []


@pytest.mark.parametrize("name", ["bf16", "bf16_t", "bf16_offset", "f16", "i32", "bool", "scalar", "empty"])
def test_single_npy_equals_torch(source, blocks, tmp_path, name):
    path, ref = source
    kwargs = {"chunk_elems": blocks} if blocks else {}
    out = tmp_path / f"{name}.npy"
    _run(export_tensors(select_tensors(open_checkpoint(path), [name]), out, **kwargs))
    _same(np.load(out), _want(ref[name]), name)
    assert os.listdir(tmp_path) == [out.name]


def test_safetensors_equals_torch(source, blocks, tmp_path):
    path, ref = source
    kwargs = {"chunk_elems": blocks} if blocks else {}
    kwargs["expand_repeats"] = True  # "expanded" is written expanded, as asked (values.repeats)
    keep = [n for n in ref if n != "c128"]  # safetensors has no complex128
    out = tmp_path / "m.safetensors"
    _run(export_tensors(select_tensors(open_checkpoint(path), keep), out, **kwargs))
    got = load_file(out)
    for name in keep:
        _same_tensor(got[name], ref[name], name)


def _big_endian_copy(src, dst) -> None:
    """`src` rewritten as a big-endian machine saves it: byteorder 'big', every scalar's bytes swapped."""
    ckpt = open_checkpoint(src)
    swap = {e.info.storage.key: (2 if e.info.dtype == "bfloat16" else np.dtype(e.info.dtype).itemsize)
            for e in ckpt.tensors()}
    ckpt.close()
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            record = info.filename.split("/", 1)[1]
            if record == "byteorder":
                data = b"big"
            elif record in swap:
                data = np.frombuffer(data, dtype=f"<u{swap[record]}").byteswap().tobytes()
            zout.writestr(info, data)


def test_big_endian_archive_exports_native_values(blocks, tmp_path):
    gen = torch.Generator().manual_seed(3)
    tensors = {"bf16": torch.randn(6001, generator=gen).bfloat16(), "f32_t": torch.randn(40, 70, generator=gen).t(),
               "f64": torch.randn(1001, generator=gen).double(), "i16": torch.arange(-999, 1000, dtype=torch.int16),
               "f16_view": torch.randn(90, 30, generator=gen).half()[7:, ::2]}
    little, big = tmp_path / "little.pt", tmp_path / "big.pt"
    torch.save(tensors, little)
    _big_endian_copy(little, big)
    ref = torch.load(big, weights_only=True)  # torch reads the byteorder record itself
    assert all(torch.equal(ref[k], tensors[k]) for k in tensors)
    kwargs = {"chunk_elems": blocks} if blocks else {}
    result = _run(export_tensors(select_tensors(open_checkpoint(big)), tmp_path / "out", **kwargs))
    for name, tensor in ref.items():
        got = np.load(result.files[name])
        assert got.dtype.isnative, name
        _same(got, _want(tensor), name)
    out = tmp_path / "big.safetensors"
    _run(export_tensors(select_tensors(open_checkpoint(big), ["f32_t", "f64", "i16"]), out, **kwargs))
    got = load_file(out)
    for name in ("f32_t", "f64", "i16"):
        _same_tensor(got[name], ref[name], name)


def test_cli_single_npy_of_bf16_equals_torch(blocks, tmp_path, capsys):
    src = tmp_path / "e.pt"
    torch.save({"embed.weight": torch.randn(300, 257, generator=torch.Generator().manual_seed(1)).bfloat16()}, src)
    out = tmp_path / "w.npy"
    assert main(["export", str(src), "--out", str(out)]) == 0
    assert "bfloat16 converted to float32" in capsys.readouterr().err
    _same(np.load(out), torch.load(src, weights_only=True)["embed.weight"].float().numpy(), "embed.weight")


# -- the writer itself ------------------------------------------------------------------------------------


def _write_file(path, parts, size, direct=True) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    writer = BlockWriter(fd, size, direct=direct)
    try:
        for part in parts:
            if isinstance(part, bytes):
                writer.write(part)
            else:
                writer.write_values(*part)
        writer.close()
    finally:
        writer.abort()


@pytest.mark.parametrize("direct", [True, False])
def test_block_writer_bytes_equal_a_plain_write(tmp_path, monkeypatch, direct):
    """Headers of any length, values straddling blocks, conversions: the file equals what tobytes() gives."""
    monkeypatch.setattr(export_io, "BLOCK_BYTES", 2 * ALIGN)
    gen = np.random.default_rng(0)
    c128 = gen.standard_normal(1500) + 1j * gen.standard_normal(1500)
    f32 = gen.standard_normal(5000).astype(np.float32)
    i64 = gen.integers(-2**60, 2**60, 3000)
    parts = [b"x" * 13, (c128, np.dtype(np.complex128)), b"y" * 3, (f32, np.dtype(np.float64)),
             (i64, np.dtype(">i8")), (f32[::3], np.dtype(np.float16))]
    want = b"".join(p if isinstance(p, bytes) else p[0].astype(p[1]).tobytes() for p in parts)
    out = tmp_path / "f.bin"
    _write_file(out, parts, len(want), direct=direct)
    assert out.read_bytes() == want


def test_block_writer_falls_back_when_direct_writes_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(export_io, "BLOCK_BYTES", ALIGN)
    real, refused = export_io._write, []

    def picky(fd, data):
        if len(data) % ALIGN == 0 and not refused:  # the first aligned write: a file system that says EINVAL
            refused.append(len(data))
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, data)

    monkeypatch.setattr(export_io, "_write", picky)
    values = np.arange(10_000, dtype=np.float32)
    out = tmp_path / "f.bin"
    _write_file(out, [b"h" * 100, (values, np.dtype(np.float32))], 100 + values.nbytes)
    assert out.read_bytes() == b"h" * 100 + values.tobytes()
    assert refused or not export_io.O_DIRECT  # with O_DIRECT refused, the rest went through the page cache


@pytest.mark.parametrize("out_name", ["w.npy", "w.safetensors", "folder"])
def test_write_error_in_writer_thread_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys, out_name):
    monkeypatch.setattr(export_io, "BLOCK_BYTES", ALIGN)
    monkeypatch.setattr(export_io, "DIRECT_MIN", 0)
    src = tmp_path / "src.pt"
    torch.save({"w": torch.randn(50_000).bfloat16()}, src)
    work = tmp_path / "work"
    work.mkdir()
    real, count = export_io._write, [0]

    def full(fd, data):
        count[0] += 1
        if count[0] > 5:  # a few blocks in, the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(export_io, "_write", full)
    target = str(work / out_name) + ("/" if out_name == "folder" else "")
    assert main(["export", str(src), "--out", target]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "Traceback" not in err
    assert os.listdir(work) == []


def test_changed_source_during_direct_export_leaves_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(export_io, "BLOCK_BYTES", ALIGN)
    monkeypatch.setattr(export_io, "DIRECT_MIN", 0)
    src = tmp_path / "src.pt"
    torch.save({"w": torch.randn(200_000).bfloat16()}, src)
    work = tmp_path / "work"
    work.mkdir()
    ckpt = open_checkpoint(src)
    job = export_tensors(select_tensors(ckpt), work / "w.npy", chunk_elems=10_000)
    next(job)
    torch.save({"w": torch.randn(100_000).bfloat16()}, src)  # a training loop re-saves the file
    with pytest.raises(FileChangedError, match="changed on disk"):
        _run(job)
    assert os.listdir(work) == []


def test_memory_stays_near_two_blocks(tmp_path):
    """A 64 MB float32 export of a bf16 tensor holds two blocks and one chunk, never the tensor."""
    src = tmp_path / "big.pt"
    torch.save({"w": torch.ones(16 << 20, dtype=torch.bfloat16)}, src)  # 32 MiB stored, 64 MiB written
    entries = select_tensors(open_checkpoint(src))
    tracemalloc.start()
    try:
        _run(export_tensors(entries, tmp_path / "w.npy"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * export_io.BLOCK_BYTES + (8 << 20), peak
    assert os.path.getsize(tmp_path / "w.npy") == 128 + (64 << 20)


SLOW_DIRECT = r"""
import os, sys, time
import ckptview.core.export.plan as ex
from ckptview.core.export import blocks as export_io
from ckptview import cli

export_io.BLOCK_BYTES, export_io.DIRECT_MIN = 8192, 0
path, out, marker = sys.argv[1:4]
real = ex.iter_chunks

def slow(info, chunk_elems, **kwargs):
    for i, chunk in enumerate(real(info, 3000, **kwargs)):
        yield chunk
        if i == 20:  # blocks written and one in flight: tell the parent, wait for its signal
            open(marker, "w").close()
            for _ in range(6000):  # short sleeps: a signal taken by another thread (numpy's) still
                time.sleep(0.1)  # reaches the main thread's handler within 0.1 s

ex.iter_chunks = slow
sys.exit(cli.main(["export", path, "--out", out]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGALRM"])
@pytest.mark.parametrize("out_name", ["w.npy", "w.safetensors"])
def test_signal_during_block_writes_removes_part_files(tmp_path, signame, out_name):
    from tests.support.export_signals import signal_while_writing

    src = tmp_path / "src" / "big.pt"
    src.parent.mkdir()
    torch.save({"w": torch.randn(300_000).bfloat16()}, src)
    work = tmp_path / "work"
    work.mkdir()
    sig = getattr(signal, signame)

    def part_file_open() -> None:
        assert [n for n in os.listdir(work) if n.endswith(".part")]

    returncode, err = signal_while_writing(SLOW_DIRECT, src, work / out_name, tmp_path / "marker", sig,
                                           part_file_open)
    assert returncode == (130 if signame == "SIGINT" else 128 + sig), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert os.listdir(work) == []

"""The readers agree with torch.load on names, shapes, dtypes, sharing and every value bit."""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from ckptview.core import CheckpointError, open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_values
from tests.support.torch_compare import get_path, same_values


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(20, 256)
        self.output = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(torch.relu(self.hidden(x)))


def every_dtype(legacy: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=g)
    out = {
        "float32": base,
        "float64": base.double(),
        "float16": base.half(),
        "bfloat16": base.bfloat16(),
        "complex64": torch.randn(4, dtype=torch.complex64, generator=g),
        "complex128": torch.randn(4, dtype=torch.complex128, generator=g),
        "bool": base > 0,
        "int8": (base * 10).to(torch.int8),
        "uint8": (base.abs() * 10).to(torch.uint8),
        "int16": (base * 100).to(torch.int16),
        "int32": (base * 1000).to(torch.int32),
        "int64": torch.arange(7) - 3,
        "scalar": torch.tensor(3.25),
        "empty": torch.zeros(0, 4),
        "nan_inf": torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0]),
    }
    with warnings.catch_warnings():  # torch warns once per process: quantized tensors are deprecated
        warnings.simplefilter("ignore")
        out["quantized"] = torch.quantize_per_tensor(base, 0.1, 3, torch.quint8)
    if not legacy:  # untyped storages: the legacy format cannot hold these dtypes
        out.update({
            "float8_e4m3fn": base.to(torch.float8_e4m3fn),
            "float8_e5m2": base.to(torch.float8_e5m2),
            "float8_e4m3fnuz": base.to(torch.float8_e4m3fnuz),
            "float8_e5m2fnuz": base.to(torch.float8_e5m2fnuz),
            "uint16": (base.abs() * 100).to(torch.uint16),
            "uint32": (base.abs() * 100).to(torch.uint32),
            "uint64": (base.abs() * 100).to(torch.uint64),
        })
        with warnings.catch_warnings():  # complex32 is experimental, torch says so once per process
            warnings.simplefilter("ignore")
            out["complex32"] = torch.randn(3, dtype=torch.complex64, generator=g).to(torch.complex32)
    return out


def training_checkpoint() -> dict:
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 20)).pow(2).mean().backward()
        opt.step()
    shared = torch.randn(8, 6)
    return {
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": opt.state_dict(),
        "epoch": 7,
        "loss": 0.125,
        "name": "mlp",
        "flag": True,
        "nothing": None,
        "nested": {"a": [1, 2.5, (shared, shared.t(), shared[2:5, 1::2])], "b": {"deep": {"deeper": shared[0]}}},
        "od": collections.OrderedDict(x=torch.ones(2)),
        "device": torch.device("cpu"),
        "dtype": torch.float16,
        "size": torch.Size([2, 3]),
    }


def assert_matches_torch(path: str, expect_format: str, trusted_reference: bool = False) -> None:
    ckpt = open_checkpoint(path)
    assert ckpt.format == expect_format
    # torch's weights-only loader cannot read protocol 4/5 FRAME opcodes; for files this test wrote
    # itself the reference may use the full unpickler.
    with warnings.catch_warnings():  # quantized tensors load through TypedStorage, which torch warns of once
        warnings.filterwarnings("ignore", "TypedStorage is deprecated", UserWarning)
        ref = torch.load(path, weights_only=not trusted_reference)
    entries = ckpt.tensors()
    assert entries, "no tensors found"
    for entry in entries:
        theirs = get_path(ref, entry.path)
        assert isinstance(theirs, torch.Tensor), entry.name
        assert entry.info.dtype == str(theirs.dtype).removeprefix("torch."), entry.name
        assert entry.info.shape == tuple(theirs.shape), entry.name
        assert entry.info.stride == tuple(theirs.stride()), entry.name
        assert entry.info.offset == theirs.storage_offset(), entry.name
        ours = read_values(entry.info)
        assert same_values(ours, theirs), entry.name
        streamed = list(iter_chunks(entry.info, chunk_elems=7))
        flat = np.concatenate(streamed) if streamed else np.zeros(0, dtype=ours.dtype)
        assert all(len(c) <= 7 for c in streamed)
        assert same_values(flat.reshape(ours.shape), theirs), entry.name
    # Sharing: same storage in torch <=> same Storage in ckptview.
    sharing = ckpt.sharing()
    for a in entries:
        for b in entries:
            if a is b:
                continue
            ta, tb = get_path(ref, a.path), get_path(ref, b.path)
            same = ta.untyped_storage().data_ptr() == tb.untyped_storage().data_ptr() and ta.numel() and tb.numel()
            assert (b.name in sharing.get(a.name, [])) == bool(same), (a.name, b.name)
    # Tensor names: every tensor torch sees, ckptview sees.
    seen = {e.path for e in entries}
    for path, value in _walk(ref):
        if isinstance(value, torch.Tensor):
            assert path in seen, path


def _walk(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, (*path, k if isinstance(k, (str, int)) else repr(k)))
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        for i, v in enumerate(obj):
            yield from _walk(v, (*path, i))


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_every_dtype_matches_torch(tmp_path, legacy):
    path = tmp_path / "dtypes.pt"
    torch.save(every_dtype(legacy), path, _use_new_zipfile_serialization=not legacy)
    assert_matches_torch(str(path), "torch-legacy" if legacy else "torch-zip")


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_training_checkpoint_matches_torch(tmp_path, legacy):
    path = tmp_path / "train.pth"
    torch.save(training_checkpoint(), path, _use_new_zipfile_serialization=not legacy)
    assert_matches_torch(str(path), "torch-legacy" if legacy else "torch-zip")
    ckpt = open_checkpoint(path)
    values = {n.name: n.value for n in ckpt.values()}
    assert values["epoch"] == 7 and values["loss"] == 0.125 and values["name"] == "mlp"
    assert values["flag"] is True and values["nothing"] is None
    assert repr(values["device"]) == repr(torch.device("cpu"))
    assert repr(values["dtype"]) == "torch.float16"
    assert repr(values["size"]) == repr(torch.Size([2, 3]))
    assert ckpt.unsafe_globals == []
    names = [e.name for e in ckpt.tensors()]
    assert names[:4] == ["model_state_dict.hidden.weight", "model_state_dict.hidden.bias",
                         "model_state_dict.output.weight", "model_state_dict.output.bias"]
    assert ckpt.sharing()["nested.a.2.0"] == ["nested.a.2.1", "nested.a.2.2", "nested.b.deep.deeper"]


def test_any_archive_root_name_and_extension(tmp_path):
    # torch names the archive's root folder after the file: any name (and any extension) must work.
    path = tmp_path / "weird name.with.dots.bin"
    torch.save({"w": torch.ones(3)}, path)
    ckpt = open_checkpoint(path)
    assert ckpt.metadata["archive_root"] == "weird name.with.dots"
    assert read_values(ckpt.tensor("w")).tolist() == [1.0, 1.0, 1.0]


def test_parameters_and_full_model_pickle(tmp_path):
    model = MLP()
    path = tmp_path / "full.pt"
    torch.save(model, path)
    ckpt = open_checkpoint(path)
    names = [e.name for e in ckpt.tensors()]
    assert names == ["hidden.weight", "hidden.bias", "output.weight", "output.bias"]
    assert all(e.info.is_parameter and e.info.requires_grad for e in ckpt.tensors())
    assert "tests.core.read.test_reader_torch.MLP" in ckpt.unsafe_globals
    assert "torch.nn.modules.linear.Linear" in ckpt.unsafe_globals
    state = model.state_dict()
    for e in ckpt.tensors():
        assert same_values(read_values(e.info), state[e.name])


def test_torchscript_archive(tmp_path):
    model = torch.jit.trace(MLP(), torch.randn(2, 20))
    path = tmp_path / "scripted.pt"
    model.save(str(path))
    ckpt = open_checkpoint(path)
    assert ckpt.format == "torchscript"
    assert ckpt.unsafe_globals == []
    state = model.state_dict()
    names = {e.name for e in ckpt.tensors()}
    assert set(state) <= names
    for name, tensor in state.items():
        assert same_values(read_values(ckpt.tensor(name)), tensor)


def test_safetensors_header_and_values(tmp_path):
    from safetensors.torch import save_file

    tensors = {"a.weight": torch.randn(3, 4), "a.bias": torch.randn(4).bfloat16(),
               "f8": torch.randn(5).to(torch.float8_e4m3fn), "i": torch.arange(6, dtype=torch.int64).reshape(2, 3),
               "empty": torch.zeros(0), "b": torch.tensor([True, False])}
    path = tmp_path / "model.safetensors"
    save_file(tensors, path, metadata={"format": "pt", "note": "hello"})
    ckpt = open_checkpoint(path)
    assert ckpt.format == "safetensors"
    assert {n.name: n.value for n in ckpt.values()} == {"__metadata__.format": "pt", "__metadata__.note": "hello"}
    for name, tensor in tensors.items():
        info = ckpt.tensor(name)
        assert info.shape == tuple(tensor.shape) and info.dtype == str(tensor.dtype).removeprefix("torch.")
        assert same_values(read_values(info), tensor)


def test_saved_on_another_device_opens_on_cpu(tmp_path):
    # A file saved from cuda:0 differs only in the storage's location string: rewrite it to prove
    # that the reader reports the saved device and reads values without CUDA.
    import zipfile

    src = tmp_path / "cpu.pt"
    torch.save({"w": torch.arange(4.0)}, src)
    dst = tmp_path / "cuda.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            zout.writestr(info, data)
    ckpt = open_checkpoint(dst)
    info = ckpt.tensor("w")
    assert info.device == "cuda:0"
    assert read_values(info).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert torch.load(dst, map_location="cpu", weights_only=True)["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_values_are_read_only_views_of_the_file(tmp_path):
    path = tmp_path / "big.pt"
    torch.save({"a": torch.randn(1000, 100), "b": torch.randn(10)}, path)
    ckpt = open_checkpoint(path)
    arr = read_values(ckpt.tensor("a"))
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0, 0] = 1.0


def test_shape_larger_than_storage_marks_only_that_tensor_broken(tmp_path):
    import zipfile

    src = tmp_path / "ok.pt"
    torch.save({"good": torch.ones(3), "bad": torch.ones(4)}, src)
    # Enlarge the 'bad' tensor's declared shape in data.pkl: 4 -> 40 elements over a 4-element storage.
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        records = {i.filename: zin.read(i) for i in infos}
    pkl_name = next(n for n in records if n.endswith("data.pkl"))
    pkl = records[pkl_name]
    idx = pkl.index(b"X\x03\x00\x00\x00bad")
    head, tail = pkl[:idx], pkl[idx:]
    tail = tail.replace(b"K\x04\x85", b"K(\x85", 1)  # size (4,) -> (40,)
    records[pkl_name] = head + tail
    dst = tmp_path / "broken.pt"
    with zipfile.ZipFile(dst, "w") as zout:
        for info in infos:
            zout.writestr(info, records[info.filename])
    ckpt = open_checkpoint(dst)
    assert ckpt.tensor("bad").broken and "needs 160 bytes" in ckpt.tensor("bad").broken
    assert not ckpt.tensor("good").broken
    assert read_values(ckpt.tensor("good")).tolist() == [1.0, 1.0, 1.0]
    assert any("bad" in w for w in ckpt.warnings)


@pytest.mark.parametrize("protocol", [1, 2, 4, 5])  # protocol 0 files torch itself cannot read back
@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_every_pickle_protocol_torch_writes(tmp_path, protocol, legacy):
    # Protocol 1 writes the legacy magic number as text; from protocol 4 a FRAME header comes first.
    path = tmp_path / f"p{protocol}.pt"
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(4, 2))
    torch.save(model.state_dict(), path, pickle_protocol=protocol, _use_new_zipfile_serialization=not legacy)
    assert_matches_torch(str(path), "torch-legacy" if legacy else "torch-zip", trusted_reference=protocol != 2)


def test_numpy_values_are_decoded_without_numpy_unpickling(tmp_path):
    path = tmp_path / "np.pt"
    torch.save({"loss": np.float64(0.5), "acc": np.float32(0.25), "hist": np.arange(6).reshape(2, 3),
                "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
                "objects": np.array([{"x": 1}, None], dtype=object)}, path)
    ckpt = open_checkpoint(path)
    values = {n.name: n for n in ckpt.values()}
    assert values["loss"].value == 0.5 and values["loss"].type_name == "numpy.float64"
    assert values["acc"].value == np.float32(0.25)
    assert values["hist"].type_name == "numpy.ndarray"
    assert np.array_equal(values["hist"].value.array, np.arange(6).reshape(2, 3))
    assert np.array_equal(values["fortran"].value.array, np.arange(6.0).reshape(2, 3))
    assert values["objects.0.x"].value == 1 and values["objects.1"].value is None
    assert "numpy._core.multiarray._reconstruct" in ckpt.unsafe_globals or \
        "numpy.core.multiarray._reconstruct" in ckpt.unsafe_globals


class _XlaStyleTensor:
    """Pickles like an XLA tensor does: a NumPy array, its dtype and device."""

    def __init__(self, array: np.ndarray, device: str) -> None:
        self.array, self.device = array, device

    def __reduce__(self):
        return (torch._utils._rebuild_device_tensor_from_numpy, (self.array, torch.float32, self.device, False))


def test_tensor_pickled_as_numpy_from_a_device(tmp_path):
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    path = tmp_path / "xla.pt"
    torch.save({"w": _XlaStyleTensor(array, "xla:0"), "c": _XlaStyleTensor(array.T, "cpu")}, path)
    ckpt = open_checkpoint(path)
    w = ckpt.tensor("w")
    assert w.device == "xla:0" and w.shape == (3, 4) and not w.broken
    assert np.array_equal(read_values(w), array)
    assert np.array_equal(read_values(ckpt.tensor("c")), array.T)
    assert np.array_equal(np.concatenate(list(iter_chunks(ckpt.tensor("c"), 5))), array.T.reshape(-1))


def test_zip64_records_and_directory(tmp_path):
    """Large checkpoints use ZIP64 sizes/offsets: rewrite a small one with ZIP64 records everywhere."""
    import zipfile

    src = tmp_path / "small.pt"
    torch.save({"a": torch.arange(10.0), "b": torch.ones(3, 3)}, src)
    dst = tmp_path / "zip64.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            with zout.open(info.filename, "w", force_zip64=True) as fh:
                fh.write(zin.read(info))
    assert_matches_torch(str(dst), "torch-zip")


def test_zip64_extra_fields_in_the_central_directory(tmp_path):
    """Records past 4 GiB keep sizes and offsets in ZIP64 extra fields: rewrite the directory that way."""
    import struct
    import zipfile

    src = tmp_path / "small.pt"
    torch.save({"a": torch.arange(10.0), "b": torch.ones(3, 3)}, src)
    data = src.read_bytes()
    with zipfile.ZipFile(src) as zf:
        infos = zf.infolist()
    eocd = data.rfind(b"PK\x05\x06")
    z64_rec = data.rfind(b"PK\x06\x06")
    cd_size, cd_offset = struct.unpack_from("<QQ", data, z64_rec + 40)
    entries, pos = [], cd_offset
    for _ in infos:  # every entry: sizes and offset moved into a ZIP64 extra field
        fixed = bytearray(data[pos : pos + 46])
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", fixed, 28)
        csize, usize = struct.unpack_from("<LL", fixed, 20)
        offset = struct.unpack_from("<L", fixed, 42)[0]
        name = data[pos + 46 : pos + 46 + name_len]
        extra = struct.pack("<HHQQQ", 1, 24, usize, csize, offset)
        struct.pack_into("<LL", fixed, 20, 0xFFFFFFFF, 0xFFFFFFFF)
        struct.pack_into("<L", fixed, 42, 0xFFFFFFFF)
        struct.pack_into("<H", fixed, 30, len(extra))
        struct.pack_into("<H", fixed, 32, 0)
        entries.append(bytes(fixed) + name + extra)
        pos += 46 + name_len + extra_len + comment_len
    directory = b"".join(entries)
    z64 = bytearray(data[z64_rec : z64_rec + 56])
    struct.pack_into("<QQ", z64, 40, len(directory), cd_offset)
    locator = bytearray(data[z64_rec + 56 : z64_rec + 76])
    struct.pack_into("<Q", locator, 8, cd_offset + len(directory))
    end = bytearray(data[eocd : eocd + 22])
    struct.pack_into("<LL", end, 12, 0xFFFFFFFF, 0xFFFFFFFF)
    rebuilt = data[:cd_offset] + directory + bytes(z64) + bytes(locator) + bytes(end)
    dst = tmp_path / "zip64_extra.pt"
    dst.write_bytes(rebuilt)
    assert_matches_torch(str(dst), "torch-zip")


def test_big_endian_byteorder_record(tmp_path):
    """A file written on a big-endian machine: byteorder 'big' and byte-swapped storages."""
    import zipfile

    tensors = {"f32": torch.randn(3, 4), "f64": torch.randn(5).double(), "i64": torch.arange(6),
               "bf16": torch.randn(4).bfloat16(), "c64": torch.randn(3, dtype=torch.complex64),
               "u8": torch.arange(5, dtype=torch.uint8), "view": torch.randn(4, 6)[:, 1::2]}
    src = tmp_path / "little.pt"
    torch.save(tensors, src)
    ckpt = open_checkpoint(src)
    # Bytes are swapped per scalar: per float half for complex numbers.
    swap = {e.info.storage.key: np.dtype(e.info.dtype if e.info.dtype != "bfloat16" else "u2").itemsize
            // (2 if e.info.dtype.startswith("complex") else 1) for e in ckpt.tensors()}
    ckpt.close()
    dst = tmp_path / "big.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            record = info.filename.split("/", 1)[1]
            if record == "byteorder":
                data = b"big"
            elif record in swap:
                data = np.frombuffer(data, dtype=f"<u{swap[record]}").byteswap().tobytes()
            zout.writestr(info, data)
    big = open_checkpoint(dst)
    assert big.metadata["byteorder"] == "big"
    assert any("big-endian" in w for w in big.warnings)
    assert_matches_torch(str(dst), "torch-zip")


def test_one_untyped_storage_behind_tensors_of_two_dtypes(tmp_path):
    """A float8 tensor and its uint8 view: one storage record, two dtypes (torch saves it)."""
    x = torch.randn(6).to(torch.float8_e4m3fn)
    path = tmp_path / "mixed.pt"
    torch.save({"f8": x, "bytes": x.view(torch.uint8), "tail": x[2:].view(torch.uint8)}, path)
    assert_matches_torch(str(path), "torch-zip")
    ckpt = open_checkpoint(path)
    assert [ckpt.tensor(n).dtype for n in ("f8", "bytes", "tail")] == ["float8_e4m3fn", "uint8", "uint8"]
    assert sorted(ckpt.sharing()["f8"]) == ["bytes", "tail"]


def test_compressed_data_pkl_bomb_is_refused_before_inflating(tmp_path):
    """torch never compresses data.pkl; a deflated one declaring 300 MiB is refused, not inflated."""
    import time
    import zipfile

    src = tmp_path / "ok.pt"
    torch.save({"w": torch.ones(2)}, src)
    with zipfile.ZipFile(src) as zin:
        records = [(i.filename, zin.read(i)) for i in zin.infolist()]
    dst = tmp_path / "bomb.pt"
    with zipfile.ZipFile(dst, "w") as zout:
        for name, data in records:
            if name.endswith("data.pkl"):
                data = data[:-1] + b"N" * (300 << 20) + b"0."  # valid opcodes, then STOP
                zout.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
            else:
                zout.writestr(name, data)
    start = time.process_time()
    with pytest.raises(CheckpointError, match="more than the"):
        open_checkpoint(dst)
    # Work bound, not a timing: inflating and reading all 300 MiB would cost far more CPU than this.
    assert time.process_time() - start < 20


def test_many_broken_tensors_are_counted_not_listed(tmp_path):
    import json
    import struct

    header = {f"t{i}": {"dtype": "F32", "shape": [100], "data_offsets": [0, 4]} for i in range(500)}
    raw = json.dumps(header).encode()
    path = tmp_path / "lies.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 4)
    ckpt = open_checkpoint(path)
    assert len(ckpt.tensors()) == 500 and all(e.info.broken for e in ckpt.tensors())
    assert len(ckpt.warnings) == 21 and ckpt.warnings[-1] == "... and 480 more broken tensors"


def test_files_saved_without_crc32(tmp_path):
    """torch.serialization.set_crc32_options(False) leaves every CRC field 0: still a valid file."""
    path = tmp_path / "nocrc.pt"
    torch.serialization.set_crc32_options(False)
    try:
        torch.save({"w": torch.arange(5.0), "b": torch.ones(2, 2)}, path)
    finally:
        torch.serialization.set_crc32_options(True)
    assert_matches_torch(str(path), "torch-zip")


def test_unsafe_means_what_torch_weights_only_refuses(tmp_path):
    """A scheduler's Counter is accepted by torch.load(weights_only=True), so it is not unsafe;
    a numpy array is refused by it, so it is."""
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[3, 6])
    safe = tmp_path / "sched.pt"
    torch.save({"scheduler": sched.state_dict(), "model": model.state_dict()}, safe)
    torch.load(safe, weights_only=True)
    ckpt = open_checkpoint(safe)
    assert "collections.Counter" in ckpt.globals and ckpt.unsafe_globals == []
    unsafe = tmp_path / "np.pt"
    torch.save({"a": np.arange(3)}, unsafe)
    with pytest.raises(Exception, match="Unsupported global"):
        torch.load(unsafe, weights_only=True)
    assert open_checkpoint(unsafe).unsafe_globals  # numpy's reconstruct

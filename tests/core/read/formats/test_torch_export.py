"""`torch.export.save` archives (.pt2): weights, constants and the signature, compared with
`torch.export.load(...)`'s own state dict and constants."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn

from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.torch_compare import same_values


class MLP(nn.Module):
    """The README's two-layer MLP, plus a buffer and a tensor constant."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(20, 256)
        self.output = nn.Linear(256, 10)
        self.register_buffer("scale", torch.tensor([2.0]))
        self.register_buffer("shift", torch.zeros(10, dtype=torch.float64), persistent=False)
        self.offset = torch.tensor([0.5])  # a tensor constant (not a parameter or buffer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.output(torch.relu(self.hidden(x) * self.scale + self.offset))
        return y + self.shift.float()


@pytest.fixture(scope="module")
def pt2_path(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("pt2") / "mlp.pt2"
    program = torch.export.export(MLP(), (torch.randn(2, 20),),
                                  dynamic_shapes={"x": {0: torch.export.Dim("batch", max=64)}})
    torch.export.save(program, str(path))
    return path


def test_pt2_weights_and_constants_match_torch(pt2_path):
    loaded = torch.export.load(str(pt2_path))
    ckpt = open_checkpoint(pt2_path)
    try:
        assert ckpt.format == "torch-export"
        tensors = {e.name: e.info for e in ckpt.tensors()}
        state = loaded.state_dict
        assert set(state) <= set(tensors)
        for name, theirs in state.items():
            assert same_values(read_values(tensors[name]), theirs), name
        assert tensors["hidden.weight"].is_parameter and not tensors["scale"].is_parameter
        for name, theirs in loaded.constants.items():
            assert same_values(read_values(tensors[f"constants.{name}"]), theirs), name
        assert ckpt.unsafe_globals == []
    finally:
        ckpt.close()


def test_pt2_signature(pt2_path):
    ckpt = open_checkpoint(pt2_path)
    sig = ckpt.metadata["signature"]
    user_inputs = [i for i in sig["inputs"] if i["kind"] == "user_input"]
    assert len(user_inputs) == 1 and user_inputs[0]["dtype"] == "float32"
    assert isinstance(user_inputs[0]["shape"][0], str) and user_inputs[0]["shape"][1] == 20  # dynamic batch
    params = [i["parameter_name"] for i in sig["inputs"] if i["kind"] == "parameter"]
    assert params == ["hidden.weight", "hidden.bias", "output.weight", "output.bias"]
    buffers = {i["buffer_name"]: i["persistent"] for i in sig["inputs"] if i["kind"] == "buffer"}
    assert buffers == {"scale": True, "shift": False}
    outputs = sig["outputs"]
    assert len(outputs) == 1 and outputs[0]["dtype"] == "float32" and outputs[0]["shape"][1] == 10
    values = {n.name: n.value for n in ckpt.values()}
    assert values["signature.inputs.0"].endswith(", 20]") and values["signature.inputs.0"].startswith("x: float32[")
    ckpt.close()


def test_pt2_info_json(pt2_path):
    proc = subprocess.run([sys.executable, "-m", "ckptview", "info", str(pt2_path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format"] == "torch-export"
    by_name = {t["name"]: t for t in data["tensors"]}
    assert by_name["hidden.weight"]["shape"] == [256, 20] and by_name["output.bias"]["dtype"] == "float32"
    assert any(v["name"] == "signature.outputs.0" for v in data["values"])


def test_pt2_zip_bomb_record_inflates_only_what_the_view_needs(pt2_path, tmp_path, monkeypatch):
    """A weight record that inflates to 256 MiB: reading the 10-element view inflates little, holds little."""
    import tracemalloc
    import types
    import zipfile
    import zlib

    from ckptview.core.read.bytes import sources

    with zipfile.ZipFile(pt2_path) as zin:
        infos = zin.infolist()
        records = {i.filename: zin.read(i) for i in infos}
    ckpt = open_checkpoint(pt2_path)
    target = ckpt.tensor("output.bias")  # 10 float32 values
    record = target.storage.source.name
    ckpt.close()
    bomb = records[record] + b"\0" * (256 << 20)
    dst = tmp_path / "bomb.pt2"
    with zipfile.ZipFile(dst, "w") as zout:
        for info in infos:
            data = bomb if info.filename == record else records[info.filename]
            method = zipfile.ZIP_DEFLATED if info.filename == record else zipfile.ZIP_STORED
            zout.writestr(info.filename, data, compress_type=method, compresslevel=1)
    del bomb
    ckpt = open_checkpoint(dst)
    inflated = [0]

    class Counting:  # the work done is the bytes zlib makes: counted, not timed
        def __init__(self, wbits: int) -> None:
            self._real = zlib.decompressobj(wbits)

        def decompress(self, data: bytes, max_length: int = 0) -> bytes:
            out = self._real.decompress(data, max_length)
            inflated[0] += len(out)
            return out

        def __getattr__(self, name: str):
            return getattr(self._real, name)

    monkeypatch.setattr(sources, "zlib", types.SimpleNamespace(decompressobj=Counting, error=zlib.error))
    tracemalloc.start()
    values = read_values(ckpt.tensor("output.bias"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert values.tolist() == torch.export.load(str(pt2_path)).state_dict["output.bias"].tolist()
    # Inflating the whole bomb would make 256 MiB: what the 40-byte view needs is far below that.
    assert 40 <= inflated[0] < (4 << 20) and peak < (8 << 20), (inflated[0], peak)

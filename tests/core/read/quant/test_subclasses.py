"""A pickle naming quantized tensor subclasses ckptview does not decode (torchao's AffineQuantizedTensor): one
line says so, the file still opens, nothing of torchao is imported."""

from __future__ import annotations

import sys
import types

import torch

from ckptview.core.read import open_checkpoint


def test_torchao_subclasses_are_named_in_one_line(tmp_path, monkeypatch):
    names = ["torchao", "torchao.dtypes", "torchao.dtypes.affine_quantized_tensor"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    module = sys.modules[names[-1]]

    class AffineQuantizedTensor:
        def __init__(self, data):
            self.data = data

        def __reduce__(self):
            return (AffineQuantizedTensor, (self.data,))

    AffineQuantizedTensor.__module__ = module.__name__
    AffineQuantizedTensor.__qualname__ = "AffineQuantizedTensor"
    module.AffineQuantizedTensor = AffineQuantizedTensor
    path = tmp_path / "ao.pt"
    torch.save({"lin.weight": AffineQuantizedTensor(torch.arange(6, dtype=torch.int8)), "lin.bias": torch.zeros(3)},
               path)
    for name in names:
        monkeypatch.delitem(sys.modules, name)
    ckpt = open_checkpoint(str(path))
    assert ("torchao quantized tensors (AffineQuantizedTensor) are recognised but not decoded: their stored parts "
            "are listed as the file holds them") in ckpt.warnings
    assert "torchao" not in sys.modules
    assert any(e.info.dtype == "int8" for e in ckpt.tensors())  # its stored part, listed
    ckpt.close()

"""One element read as its bytes, without NumPy (an optimizer's `step` counters in a listing): the value
torch.load gives, for every dtype it decodes, and None for what it leaves to `read_values`."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_scalar

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]


def test_one_element_of_each_dtype_is_what_torch_load_gives(tmp_path):
    state = {str(dt).split(".")[-1]: torch.tensor(-3.25 if dt.is_floating_point else 5).to(dt) for dt in DTYPES}
    state["bool"] = torch.tensor(True)
    big = torch.arange(10, dtype=torch.float32)
    state["view"] = big[7]  # an offset into a larger storage
    state["step"] = torch.tensor([12.0])  # one element, one dimension
    state["many"] = torch.ones(3)
    state["complex"] = torch.tensor(1 + 2j)
    path = tmp_path / "scalars.pt"
    torch.save(state, path)
    want = torch.load(path, weights_only=True)
    ckpt = open_checkpoint(path)
    try:
        for entry in ckpt.tensors():
            got = read_scalar(entry.info)
            if entry.name in ("many", "complex"):
                assert got is None, entry.name
            else:
                assert got == want[entry.name].item(), entry.name
    finally:
        ckpt.close()


def test_an_optimizer_listing_imports_no_numpy(tmp_path):
    """`info --json` of an optimizer file shows each parameter's `step`: read without NumPy's import."""
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "train.pt")
    probe = ("import json, sys\nfrom ckptview.cli import main\nassert main(['info', sys.argv[1], '--json']) == 0\n"
             "sys.stderr.write(json.dumps('numpy' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "train.pt")], capture_output=True, text=True,
                         check=True)
    assert '"step": 1' in out.stdout.replace("1.0", "1")
    assert out.stderr.strip().splitlines()[-1] == "false"


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn])
def test_other_dtypes_are_left_to_read_values(tmp_path, dtype):
    torch.save({"x": torch.tensor(0.5).to(dtype)}, tmp_path / "f8.pt")
    ckpt = open_checkpoint(tmp_path / "f8.pt")
    try:
        assert read_scalar(ckpt.tensors()[0].info) is None
    finally:
        ckpt.close()

"""An optimizer file opened alone is named by the model file beside it: accelerate's `save_state` folders built with
accelerate itself (`optimizer.bin` for `model.safetensors`, `optimizer_1.bin` for `model_1.safetensors`), the
names compared with each real model's `named_parameters()`."""

from __future__ import annotations

import contextlib
import io
import os

import pytest
import torch
from accelerate import Accelerator
from torch import nn

from ckptview.core.inspect.optimizer import find_optimizers
from ckptview.core.read.open import open_checkpoint


class Block(nn.Module):
    """Named submodules whose shapes repeat: only the model's order tells them apart."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.encoder = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)))


def _models():
    torch.manual_seed(0)
    first = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    second = Block()
    return first, second


@pytest.fixture(scope="module", params=[True, False], ids=["safetensors", "bin"])
def saved(request, tmp_path_factory):
    """accelerate's save_state of two models with their optimizers, after two steps."""
    folder = tmp_path_factory.mktemp("accelerate") / "checkpoint_2"
    first, second = _models()
    accelerator = Accelerator(cpu=True)
    opt1 = torch.optim.Adam(first.parameters(), lr=1e-3)
    opt2 = torch.optim.SGD(second.parameters(), lr=0.1, momentum=0.9)
    first, opt1, second, opt2 = accelerator.prepare(first, opt1, second, opt2)
    for _ in range(2):
        loss = first(torch.randn(6, 4)).sum() + second(torch.randn(6, 4)).sum()
        accelerator.backward(loss)
        for opt in (opt1, opt2):
            opt.step()
            opt.zero_grad()
    with contextlib.redirect_stdout(io.StringIO()):
        accelerator.save_state(str(folder), safe_serialization=request.param)
    orders = {"optimizer.bin": [n for n, _ in first.named_parameters()],
              "optimizer_1.bin": [n for n, _ in second.named_parameters()]}
    return str(folder), orders, request.param


def _names(ckpt, key=None):
    (opt,) = [o for o in find_optimizers(ckpt) if key is None or o.path[:1] == (key,)]
    return opt, [p.name for p in opt.params]


@pytest.mark.parametrize("optimizer_file", ["optimizer.bin", "optimizer_1.bin"])
def test_an_optimizer_file_alone_is_named_by_its_model(saved, optimizer_file):
    folder, orders, safetensors = saved
    model_file = {"optimizer.bin": "model", "optimizer_1.bin": "model_1"}[optimizer_file]
    model_file += ".safetensors" if safetensors else ".bin"
    if not safetensors:
        model_file = "pytorch_" + model_file
    assert os.path.exists(os.path.join(folder, model_file)), sorted(os.listdir(folder))
    ckpt = open_checkpoint(os.path.join(folder, optimizer_file))
    try:
        opt, names = _names(ckpt)
        assert names == orders[optimizer_file], opt.note
        assert model_file in opt.note, opt.note
        if not safetensors:  # a torch file keeps the model's order: nothing is guessed
            assert opt.mapping == "exact", opt.note
        assert all(p.param is not None and p.param.tensor.shape == p.shape_hint() for p in opt.params
                   if p.shape_hint() is not None)
    finally:
        ckpt.close()


def test_the_folder_names_both_optimizers_alike(saved):
    folder, orders, _ = saved
    ckpt = open_checkpoint(folder)
    try:
        for key, order in orders.items():
            opt, names = _names(ckpt, key)
            assert names == order, opt.note
    finally:
        ckpt.close()


def test_the_model_beside_is_read_once_per_checkpoint(saved, monkeypatch):
    """The window asks for the optimizers from several panels: the model beside is opened once."""
    from ckptview.core.inspect import optimizer as optimizer_module

    folder, orders, _ = saved
    opened = []
    real = optimizer_module.open_checkpoint
    monkeypatch.setattr(optimizer_module, "open_checkpoint", lambda path, *a, **k: opened.append(path) or real(path, *a, **k))
    ckpt = real(os.path.join(folder, "optimizer.bin"))
    try:
        for _ in range(3):
            assert _names(ckpt)[1] == orders["optimizer.bin"]
        assert len(opened) == 1, opened
    finally:
        ckpt.close()

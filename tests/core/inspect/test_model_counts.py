"""The numbers torch would say: Parameters is `sum(p.numel() for p in model.parameters())`, a module's figures are over
its floating-point parameters and buffers with the counters apart; on files torch, torch.export and Lightning's
Trainer write, in the core and in `info --json`."""

from __future__ import annotations

import json
import logging
import warnings

import pytest
import torch
from torch import nn

from ckptview.commands.info import info_dict
from ckptview.core.inspect.summary import size_facts
from ckptview.core.read.open import open_checkpoint


class BasicBlock(nn.Module):
    """torchvision's ResNet block, by its names (conv1, bn1, conv2, bn2, downsample.0/1)."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.downsample is None else self.downsample(x)
        return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + skip)


class ResNet(nn.Module):
    """torchvision's ResNet layout (conv1, bn1, layer1..layer2, fc), narrow."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 8))
        self.layer2 = nn.Sequential(BasicBlock(8, 16, 2), BasicBlock(16, 16))
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        return self.fc(self.layer2(self.layer1(x)).mean((2, 3)))


BATCHES = 36


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    torch.manual_seed(0)
    model = ResNet().train()
    with torch.no_grad():
        for _ in range(BATCHES):  # running statistics move, num_batches_tracked counts to 36
            model(torch.randn(2, 3, 16, 16))
    path = tmp_path_factory.mktemp("resnet") / "resnet.pth"
    torch.save(model.state_dict(), path)
    return model, str(path)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, resnet):
    model, _ = resnet
    program = torch.export.export(model.eval(), (torch.randn(4, 3, 32, 32),))  # sample inputs: 12,288 floats
    path = tmp_path_factory.mktemp("pt2") / "resnet.pt2"
    torch.export.save(program, path)
    return model, str(path)


@pytest.fixture(scope="module")
def lightning_ckpt(tmp_path_factory):
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))

        def training_step(self, batch, _index):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    folder = tmp_path_factory.mktemp("lightning")
    torch.manual_seed(0)
    module = Classifier()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 8)), batch_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("lightning").setLevel(logging.ERROR)
        trainer = L.Trainer(max_steps=3, default_root_dir=str(folder), logger=False, enable_progress_bar=False,
                            enable_model_summary=False, accelerator="cpu")
        trainer.fit(module, data)  # ModelCheckpoint's state adds a one-element tensor beside the weights
        trainer.save_checkpoint(folder / "last.ckpt")
    return module, str(folder / "last.ckpt")


@pytest.mark.parametrize("made", ["resnet", "exported", "lightning_ckpt"])
def test_parameters_are_what_torch_counts(request, made):
    model, path = request.getfixturevalue(made)
    truth = sum(p.numel() for p in model.parameters())
    ckpt = open_checkpoint(path)
    try:
        assert size_facts(ckpt).parameters == truth
        assert info_dict(ckpt)["parameters"] == truth
    finally:
        ckpt.close()


def _torch_aggregate(tensors):
    flat = torch.cat([t.double().reshape(-1) for t in tensors])
    return {"numel": flat.numel(), "min": float(flat.min()), "max": float(flat.max()), "mean": float(flat.mean())}


def _check(stats, expected):
    assert stats["numel"] == expected["numel"]
    for key in ("min", "max", "mean"):
        assert stats[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-12), key


def test_module_figures_leave_the_counters_apart(resnet):
    _model, path = resnet
    state = torch.load(path, weights_only=True)
    ckpt = open_checkpoint(path)
    try:
        data = json.loads(json.dumps(info_dict(ckpt, stats=True)))
    finally:
        ckpt.close()
    modules = {m["path"]: m for m in data["modules"]}
    assert {"conv1", "bn1", "layer1", "layer1.0", "layer1.0.bn1", "layer2.0.downsample", "fc"} <= set(modules)
    for name, module in modules.items():
        below = {k: v for k, v in state.items() if k.startswith(name + ".")}
        floats = [v for v in below.values() if v.is_floating_point()]
        counters = [v for v in below.values() if not v.is_floating_point()]
        assert module["tensors"] == len(floats), name
        _check(module["stats"], _torch_aggregate(floats))
        if counters:  # num_batches_tracked: on its own line, never in the figures
            assert module["counters"]["tensors"] == len(counters)
            assert module["counters"]["stats"]["max"] == BATCHES
            assert module["stats"]["max"] < BATCHES
        else:
            assert module["counters"] is None
    # without --stats, no figures are read: the key is absent
    ckpt = open_checkpoint(path)
    try:
        assert "modules" not in info_dict(ckpt)
    finally:
        ckpt.close()


def test_an_optimizer_s_steps_are_counters_too(lightning_ckpt):
    _module, path = lightning_ckpt
    loaded = torch.load(path, weights_only=False)
    ckpt = open_checkpoint(path)
    try:
        modules = {m["path"]: m for m in info_dict(ckpt, stats=True)["modules"]}
    finally:
        ckpt.close()
    state = loaded["optimizer_states"][0]["state"]
    moments = [t for s in state.values() for k, t in s.items() if k != "step"]
    _check(modules["optimizer_states.0"]["stats"], _torch_aggregate(moments))
    assert modules["optimizer_states.0"]["counters"]["stats"]["max"] == 3  # Adam's float step, apart

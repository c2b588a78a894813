"""Files torch, torch.export and Lightning's Trainer write, whose numbers torch says (test helper): a ResNet whose
BatchNorms counted BATCHES batches, its exported program with sample inputs, a Lightning checkpoint with a
callback's score beside the weights and Adam's step counters."""

from __future__ import annotations

import logging
import os
import warnings

import torch
from torch import nn

BATCHES = 36


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


def resnet_file(folder: str | os.PathLike[str]) -> tuple[ResNet, str]:
    """A trained-mode ResNet's state dict (running statistics moved, num_batches_tracked at BATCHES)."""
    torch.manual_seed(0)
    model = ResNet().train()
    with torch.no_grad():
        for _ in range(BATCHES):
            model(torch.randn(2, 3, 16, 16))
    path = os.path.join(folder, "resnet.pth")
    torch.save(model.state_dict(), path)
    return model, path


def exported_file(folder: str | os.PathLike[str], model: nn.Module) -> str:
    """`model`'s exported program (its sample inputs, 12,288 floats, are saved with it)."""
    program = torch.export.export(model.eval(), (torch.randn(4, 3, 32, 32),))
    path = os.path.join(folder, "resnet.pt2")
    torch.export.save(program, path)
    return path


def lightning_file(folder: str | os.PathLike[str]) -> tuple[nn.Module, str]:
    """Lightning's Trainer after 3 Adam steps: ModelCheckpoint's state adds a one-element tensor beside the
    weights, the optimizer's state a float `step` per parameter."""
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))

        def training_step(self, batch, _index):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    module = Classifier()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 8)), batch_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("lightning").setLevel(logging.ERROR)
        trainer = L.Trainer(max_steps=3, default_root_dir=str(folder), logger=False, enable_progress_bar=False,
                            enable_model_summary=False, accelerator="cpu")
        trainer.fit(module, data)
        path = os.path.join(folder, "last.ckpt")
        trainer.save_checkpoint(path)
    return module, path


__all__ = ["BATCHES", "ResNet", "exported_file", "lightning_file", "resnet_file"]

"""The bundled example's model: ckptview's own code, which runs the example's forward pass with no code of the
user's (`ckptview run` on `example.pth`, one click in the window's Run tab). Never code from a checkpoint: the
example is recognised by its bytes (`core/run/example.py`), and only then is this class built."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """The README's two-layer MLP: Linear 20 -> 256, ReLU, Linear 256 -> 10."""

    in_features = 20

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(20, 256)
        self.output = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(torch.relu(self.hidden(x)))


MODELS = {"MLP": MLP}

"""The bundled example's model: ckptview's own code, which runs the example's forward pass with no code of the
user's (`ckptview run` on `example.pth`, one click in the window's Run tab). Never code from a checkpoint: the
example is recognised by its bytes (`core/run/example.py`), and only then is this class built.

The class is made on first use, so that importing the worker's modules imports no torch before its phase.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def mlp_class() -> Any:
    """The README's two-layer MLP: Linear 20 -> 256, ReLU, Linear 256 -> 10."""
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
            out: torch.Tensor = self.output(torch.relu(self.hidden(x)))
            return out

    return MLP


def build_mlp() -> Any:
    """A new example MLP (random weights until the example's are loaded)."""
    return mlp_class()()


MODELS = {"MLP": build_mlp}

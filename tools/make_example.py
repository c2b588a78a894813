"""Regenerate `example.pth`, the checkpoint the window opens when started without a file.

A small training checkpoint from the README's MLP: model and Adam state after a few seeded steps,
epoch and loss. Run: `python tools/make_example.py` (needs torch; output is seeded).
"""

from __future__ import annotations

import torch
from torch import nn

from ckptview.core.worker.example_model import build_mlp


def make(path: str) -> None:
    """Train the MLP for a few seeded steps and save a training checkpoint to `path`."""
    torch.manual_seed(0)
    model = build_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs, targets = torch.randn(64, 20), torch.randint(0, 10, (64,))
    loss = torch.tensor(0.0)
    for _ in range(5):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
    torch.save({"model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict(),
                "epoch": 5, "loss": loss.item()}, path)


if __name__ == "__main__":
    from ckptview.resources import resource_path

    make(resource_path("example.pth"))

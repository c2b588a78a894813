"""The run folder of issue 25: a small CNN with BatchNorm trained with Adam, six checkpoints, a layer added
at step 20 and a NaN from step 40 on (test helper, not a test module).

Checkpoints are saved at STEPS (one batch per step): the first two are 11 steps apart, so the step counters
(``num_batches_tracked``, Adam's ``step``) grow 1 -> 12, more than the default explode factor of 10, while the
weights barely move. At step 20 a second conv + BatchNorm block is inserted *before* the head and a new Adam
is built over ``model.parameters()``: the optimizer's state ids of the head shift (``state.4`` was
``fc.weight`` and is ``conv2.weight`` from then on). After the update of step 40 one value of
``fc.weight`` is set to NaN; training goes on, so the NaN spreads to other tensors by step 50.
"""

from __future__ import annotations

import os

import torch
from torch import nn

STEPS = (1, 12, 20, 30, 40, 50)
GROW_AT = 20
NAN_AT = 40


class CNN(nn.Module):
    """conv1 + bn1 (+ conv2 + bn2 from GROW_AT on), global average pool, fc."""

    def __init__(self, grown: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        if grown:
            self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
            self.bn2 = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        if hasattr(self, "conv2"):
            h = torch.relu(self.bn2(self.conv2(h)))
        return self.fc(h.mean(dim=(2, 3)))


def make_run(folder: str | os.PathLike[str], steps: tuple[int, ...] = STEPS) -> list[str]:
    """Train and save ``step_N.pt`` at each of ``steps``; returns the paths in step order."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = CNN()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    paths = []
    for step in range(1, max(steps) + 1):
        if step == GROW_AT:
            old = model.state_dict()
            model = CNN(grown=True)
            model.load_state_dict(old, strict=False)
            opt = torch.optim.Adam(model.parameters(), lr=0.01)
        x = torch.randn(8, 1, 6, 6, generator=gen)
        y = torch.randn(8, 3, generator=gen)
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == NAN_AT:
            with torch.no_grad():
                model.fc.weight[1, 2] = float("nan")
        if step in steps:
            path = os.path.join(folder, f"step_{step}.pt")
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                        "epoch": step // 10, "loss": float(loss.detach())}, path)
            paths.append(path)
    return paths

"""The run panel's input guess comes from the first layer that takes the input (issue 25, finding 7).

Before, the guess was the first 2-D weight: a CNN got `2,128@float32` from its classifier and the run
failed in conv2d. Each guess here is checked by running the model on it."""

from __future__ import annotations

import struct

import pytest
import torch
from torch import nn

from ckptview.core.run.input_specs import InputSpec, make_array
from ckptview.core.run.state_dict import suggest_inputs
from ckptview.core.worker.forward import _guess_from_module, to_torch


class CNN(nn.Module):
    """Conv + BatchNorm + pooled classifier: the new user's model."""

    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        return self.fc(self.pool(torch.relu(self.conv2(x))).flatten(1))


class Flattened(nn.Module):
    """An MNIST-style CNN whose classifier expects 28 x 28 inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 5)
        self.fc = nn.Linear(4 * 24 * 24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).flatten(1))


class Tokens(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 12)
        self.head = nn.Linear(12, 100)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


class Audio(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 5)
        self.fc = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).mean(-1))


MLP = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))


def runs_on(model: nn.Module, specs: list[InputSpec] | None) -> bool:
    assert specs, "no guess"
    inputs = [to_torch(make_array(s, 0, i), s.dtype, "cpu") for i, s in enumerate(specs)]
    model.eval()
    with torch.no_grad():
        model(*inputs)
    return True


@pytest.mark.parametrize(("model", "want"), [
    (CNN(), InputSpec(shape=(2, 3, 32, 32))),
    (Flattened(), InputSpec(shape=(2, 1, 28, 28))),
    (Tokens(), InputSpec(shape=(2, 16), dtype="int64", fill="randint", low=0, high=100)),
    (Audio(), InputSpec(shape=(2, 4, 128))),
    (MLP, InputSpec(shape=(2, 20))),
])
def test_state_dict_guess_is_the_first_input_layer_and_runs(tmp_path, model, want):
    path = tmp_path / "sd.pth"
    torch.save(model.state_dict(), path)
    guess = suggest_inputs(str(path))
    assert guess == [want]
    assert runs_on(model, guess)
    assert runs_on(model, _guess_from_module(model))  # the worker's guess, from the module itself


def test_token_embedding_wins_over_a_sorted_head(tmp_path):
    """safetensors keep names sorted: `lm_head.weight` comes before `model.embed_tokens.weight`."""
    header = (b'{"lm_head.weight": {"dtype": "F32", "shape": [50, 8], "data_offsets": [0, 1600]},'
              b' "model.embed_tokens.weight": {"dtype": "F32", "shape": [50, 8], "data_offsets": [1600, 3200]}}')
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 3200)
    assert suggest_inputs(str(path)) == [InputSpec(shape=(2, 16), dtype="int64", fill="randint", low=0, high=50)]

"""TorchScript's own torch.jit._pickle helpers are no false alarm in a TorchScript archive, and only there."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch

from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.pickle.safe_globals import TORCHSCRIPT_GLOBALS
from ckptview.core.read.values.reading import read_values


class Attributes(torch.nn.Module):
    """A module whose attributes make torch.jit.save write every list-type helper."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.sizes: list[int] = [1, 2, 3]
        self.scales: list[float] = [0.5, 1.5]
        self.flags: list[bool] = [True, False]
        self.tensors: list[torch.Tensor] = [torch.ones(2), torch.zeros(3)]
        self.names: dict[str, int] = {"a": 1}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.sizes[0] * self.scales[0]


def test_every_jit_pickle_helper_is_listed():
    import torch.jit._pickle as jit_pickle

    helpers = {f"torch.jit._pickle.{n}" for n in dir(jit_pickle) if not n.startswith("_")
               and callable(getattr(jit_pickle, n))}
    assert helpers == set(TORCHSCRIPT_GLOBALS)


@pytest.mark.parametrize("make", ["script", "script_lstm"])
def test_scripted_models_show_no_unsafe_global(tmp_path, make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.jit.script(Attributes() if make == "script" else torch.nn.LSTM(4, 4))
    path = tmp_path / "scripted.pt"
    model.save(str(path))
    ckpt = open_checkpoint(path)
    try:
        assert ckpt.format == "torchscript"
        assert any(g.startswith("torch.jit._pickle.") for g in ckpt.globals)
        assert ckpt.unsafe_globals == []
        assert not any("safe set" in w for w in ckpt.warnings)
        for name, tensor in model.state_dict().items():
            assert torch.equal(torch.from_numpy(read_values(ckpt.tensor(name)).copy()), tensor)
        if make == "script":  # the helpers are read as what they return: the lists themselves
            values = {name: node.value for name, _path, node in ckpt.value_entries()}
            assert [values[f"sizes.{i}"] for i in range(3)] == [1, 2, 3]
            assert [values["flags.0"], values["flags.1"], values["scales.1"]] == [True, False, 1.5]
    finally:
        ckpt.close()


def test_the_helpers_stay_unsafe_outside_torchscript(tmp_path):
    """torch.load(weights_only=True) refuses them in an ordinary file: so do we."""
    path = tmp_path / "plain.pt"
    torch.save({"w": torch.ones(1)}, path)
    body = b"ctorch.jit._pickle\nbuild_intlist\n(]I1\naI2\natR."
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(body)
    ckpt = open_checkpoint(plain)
    assert ckpt.unsafe_globals == ["torch.jit._pickle.build_intlist"]
    assert ckpt.root.value == [1, 2] or [n.value for n in ckpt.root.children] == [1, 2]
    ckpt.close()
    assert pickle.loads(body) == [1, 2]
    with pytest.raises(Exception, match="(?i)weights.only|unsupported global|not allowed"):
        torch.load(plain, weights_only=True)

"""The diff headline and the parameter count are over what their words say: the model's learnable
parameters, as torch counts them; buffers and integer counters apart (issue 25, finding 1)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from ckptview.cli import main
from ckptview.core import open_checkpoint
from ckptview.core.compare.diff import diff_checkpoints
from ckptview.core.inspect.summary import size_facts


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 32), nn.ReLU(),
                         nn.Linear(32, 10))


def _trained(steps: int) -> nn.Module:
    model = _cnn()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(8, 1, 12, 12, generator=gen)
        y = torch.randint(0, 10, (8,), generator=gen)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def _rel(sa: dict, sb: dict, keys: list[str]) -> float:
    dd = sum(float(((sb[k].double() - sa[k].double()) ** 2).sum()) for k in keys)
    aa = sum(float((sa[k].double() ** 2).sum()) for k in keys)
    return math.sqrt(dd / aa)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A CNN with BatchNorm trained with Adam for 5 and for 55 steps, saved as state dicts."""
    folder = tmp_path_factory.mktemp("cnn")
    ma, mb = _trained(5), _trained(55)
    torch.save(ma.state_dict(), folder / "a.pth")
    torch.save(mb.state_dict(), folder / "b.pth")
    return folder, ma, mb


def _diff(folder):
    a, b = open_checkpoint(folder / "a.pth"), open_checkpoint(folder / "b.pth")
    try:
        return diff_checkpoints(a, b)
    finally:
        a.close()
        b.close()


@pytest.mark.slow
def test_headline_is_over_the_learnable_parameters(trained):
    folder, ma, mb = trained
    sa, sb = ma.state_dict(), mb.state_dict()
    params = [name for name, _ in ma.named_parameters()]
    buffers = [name for name, _ in ma.named_buffers()]
    result = _diff(folder)
    assert result.overall_rel_l2() == pytest.approx(_rel(sa, sb, params), rel=1e-9)
    assert [t.name for t in result.parameters] == params
    assert sorted(t.name for t in result.buffers) == sorted(buffers)
    floating = [name for name in buffers if sa[name].is_floating_point()]
    assert result.overall_rel_l2(result.buffers) == pytest.approx(_rel(sa, sb, floating), rel=1e-9)


def test_cli_headline_and_json(trained, capsys):
    folder, ma, mb = trained
    sa, sb = ma.state_dict(), mb.state_dict()
    expected = _rel(sa, sb, [name for name, _ in ma.named_parameters()])
    assert main(["diff", str(folder / "a.pth"), str(folder / "b.pth")]) == 1
    out = capsys.readouterr().out
    headline = next(line for line in out.splitlines() if "overall relative change" in line)
    assert f"overall relative change {expected:.4g} " in headline
    assert "num_batches_tracked" not in headline
    buffers_line = next(line for line in out.splitlines() if line.startswith("6 buffers"))
    floating = [name for name, _ in ma.named_buffers() if sa[name].is_floating_point()]
    assert f"relative change {_rel(sa, sb, floating):.4g}" in buffers_line
    assert main(["diff", "--json", str(folder / "a.pth"), str(folder / "b.pth")]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["overall_rel_l2"] == pytest.approx(expected, rel=1e-9)
    assert data["buffers_summary"]["changed"] == 6
    roles = {t["name"]: t["role"] for t in data["tensors"]}
    assert roles == {**{n: "parameter" for n, _ in ma.named_parameters()},
                     **{n: "buffer" for n, _ in ma.named_buffers()}}


def test_parameters_counted_as_torch_counts_them(trained):
    folder, ma, _ = trained
    ckpt = open_checkpoint(folder / "a.pth")
    try:
        facts = size_facts(ckpt)
    finally:
        ckpt.close()
    assert facts.parameters == sum(p.numel() for p in ma.parameters())
    assert facts.buffers == sum(b.numel() for b in ma.buffers())


class Odd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))
        self.register_buffer("weight", torch.zeros(5))  # a buffer named like a parameter
        self.register_buffer("cache", torch.zeros(7), persistent=False)


def test_pickled_module_says_which_are_buffers(tmp_path):
    """torch.save(model): the module's own _parameters/_buffers decide, whatever the names."""
    model = Odd()
    torch.save(model, tmp_path / "m.pt")
    ckpt = open_checkpoint(tmp_path / "m.pt")
    try:
        facts = size_facts(ckpt)
    finally:
        ckpt.close()
    assert facts.parameters == sum(p.numel() for p in model.parameters()) == 3
    assert facts.buffers == sum(b.numel() for b in model.buffers()) == 12


def test_a_float_step_counter_stays_out_of_the_headline(tmp_path):
    """Two optimizer files alone (every row optimizer state): Adam's float `step` (5 -> 55) is a counter."""
    opts = []
    for steps in (5, 55):
        model = _cnn()
        opt = torch.optim.Adam(model.parameters(), 1e-3)
        for _ in range(steps):
            for p in model.parameters():
                p.grad = torch.ones_like(p)
            opt.step()
        torch.save(opt.state_dict(), tmp_path / f"opt{steps}.pt")
        opts.append(opt.state_dict()["state"])
    a, b = open_checkpoint(tmp_path / "opt5.pt"), open_checkpoint(tmp_path / "opt55.pt")
    try:
        result = diff_checkpoints(a, b)
    finally:
        a.close()
        b.close()
    assert all(t.name.endswith(("exp_avg", "exp_avg_sq")) for t in result.parameters)
    dd = aa = 0.0
    for i, state in opts[0].items():
        for key in ("exp_avg", "exp_avg_sq"):
            x, y = state[key].double(), opts[1][i][key].double()
            dd += float(((y - x) ** 2).sum())
            aa += float((x**2).sum())
    assert result.overall_rel_l2() == pytest.approx(math.sqrt(dd / aa), rel=1e-9)

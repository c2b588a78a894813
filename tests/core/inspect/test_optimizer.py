"""Optimizer state mapped to parameter names, checked against torch on checkpoints trained here."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from ckptview.commands.info import info_dict
from ckptview.core import open_checkpoint
from ckptview.core.inspect.optimizer import align, find_optimizers, optimizers_json
from ckptview.core.inspect.optimizer_figures import iter_effective_step, iter_figures
from ckptview.core.inspect.training import training_summary
from ckptview.core.jobs import drain


class Net(nn.Module):
    """BatchNorm buffers, a float registered buffer saved before every parameter, a frozen bias."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(8))
        self.embed = nn.Linear(6, 8)
        self.bn = nn.BatchNorm1d(8)
        self.hidden = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)
        self.embed.bias.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.hidden(self.bn(self.embed(x)) * self.scale)))


OPTIMIZERS = {
    "adam": (lambda groups: torch.optim.Adam(groups, lr=1e-3), "adam-like"),
    "adamw": (lambda groups: torch.optim.AdamW(groups, lr=1e-3, weight_decay=0.1), "adam-like"),
    "sgd-momentum": (lambda groups: torch.optim.SGD(groups, lr=1e-2, momentum=0.9), "sgd-momentum"),
    "rmsprop": (lambda groups: torch.optim.RMSprop(groups, lr=1e-3), "rmsprop"),
    "adagrad": (lambda groups: torch.optim.Adagrad(groups, lr=1e-2), "adagrad"),
    "sgd": (lambda groups: torch.optim.SGD(groups, lr=1e-2), "sgd"),
}


def train(opt_name: str, steps: int = 3, include_frozen: bool = True, groups: str = "blocks"):
    """A Net trained a few steps; two param groups (backbone / top, or decay / no-decay)."""
    torch.manual_seed(0)
    net = Net()
    named = [(n, p) for n, p in net.named_parameters() if include_frozen or p.requires_grad]
    if groups == "blocks":
        split = [{"params": [p for n, p in named if n.startswith(("embed", "bn"))], "lr": 5e-4},
                 {"params": [p for n, p in named if n.startswith(("hidden", "head"))]}]
    else:  # weight decay on matrices only: the groups interleave in model order
        split = [{"params": [p for n, p in named if p.ndim > 1], "weight_decay": 0.01},
                 {"params": [p for n, p in named if p.ndim <= 1], "weight_decay": 0.0}]
    factory, _ = OPTIMIZERS[opt_name]
    opt = factory(split)
    for _ in range(steps):
        opt.zero_grad()
        net(torch.randn(16, 6)).pow(2).mean().backward()
        opt.step()
    order = [n for group in split for p in group["params"] for n, q in named if q is p]
    return net, opt, order


def expected_names(opt, order: list[str]) -> dict[int, str]:
    """id -> parameter name, from the optimizer's own param_groups order (torch's ground truth)."""
    ids = [i for g in opt.state_dict()["param_groups"] for i in g["params"]]
    return dict(zip(ids, order, strict=True))


def save_open(tmp_path, obj, name="ckpt.pt"):
    path = tmp_path / name
    torch.save(obj, path)
    return open_checkpoint(str(path)), path


def check_mapping(ckpt, opt, order, mapping="exact", path=None):
    opts = find_optimizers(ckpt)
    assert len(opts) == 1
    found = opts[0]
    if path is not None:
        assert list(found.path) == path
    assert found.mapping == mapping, found.note
    want = expected_names(opt, order)
    torch_state = opt.state_dict()["state"]
    for p in found.params:
        if p.id in torch_state:  # frozen and never stepped: torch stores no state, nothing to check by
            assert p.name == want[p.id], (p.id, p.name, want[p.id], found.note)
        else:
            assert p.node is None
    return found


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("layout", [
    ("model_state_dict", "optimizer_state_dict"), ("model", "optimizer"), ("state_dict", "optimizer"),
    ("model_state", "optimizer_state"),
])
def test_layouts_map_every_parameter(tmp_path, opt_name, layout) -> None:
    net, opt, order = train(opt_name)
    model_key, opt_key = layout
    ckpt, _ = save_open(tmp_path, {"epoch": 2, model_key: net.state_dict(), opt_key: opt.state_dict(),
                                   "loss": torch.tensor(0.25)})
    # plain SGD keeps no state at all: nothing to check the order by
    found = check_mapping(ckpt, opt, order, "by-order" if opt_name == "sgd" else "exact", path=[opt_key])
    assert found.kind == OPTIMIZERS[opt_name][1]
    # the frozen bias (no state) is named by its position too
    assert [p.name for p in found.params] == order
    assert found.model is not None and found.model.key == model_key
    ckpt.close()


def test_frozen_bias_has_empty_state_and_groups_count(tmp_path) -> None:
    net, opt, order = train("adam")
    ckpt, _ = save_open(tmp_path, {"model": net.state_dict(), "optimizer": opt.state_dict()})
    data = optimizers_json(ckpt)[0]
    frozen = next(p for p in data["params"] if p["name"] == "embed.bias")
    assert frozen["state"] == {}
    assert [g["num_params"] for g in data["param_groups"]] == [len(g["params"]) for g in opt.param_groups]
    assert data["param_groups"][0]["lr"] == 5e-4 and data["param_groups"][1]["lr"] == 1e-3
    ckpt.close()


def test_ddp_prefixed_model(tmp_path) -> None:
    net, opt, order = train("adamw")
    model = {f"module.{k}": v for k, v in net.state_dict().items()}
    ckpt, _ = save_open(tmp_path, {"model": model, "optimizer": opt.state_dict()})
    found = check_mapping(ckpt, opt, [f"module.{n}" for n in order])
    assert found.params[0].name == "module.embed.weight"
    ckpt.close()


def test_lightning_layout_by_hand(tmp_path) -> None:
    net, opt, order = train("adam")
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[5, 8], gamma=0.5)
    opt.step()
    sched.step()
    ckpt_obj = {
        "epoch": 4, "global_step": 120, "pytorch-lightning_version": "2.4.0",
        "state_dict": {f"model.{k}": v for k, v in net.state_dict().items()},
        "loops": {"fit_loop": {"state_dict": {}}},
        "callbacks": {"ModelCheckpoint{'monitor': 'val_loss'}": {"best_model_score": torch.tensor(0.125)}},
        "optimizer_states": [opt.state_dict()],
        "lr_schedulers": [sched.state_dict()],
        "hyper_parameters": {"hidden": 8, "lr": 1e-3, "optim": {"name": "adam", "betas": (0.9, 0.999)}},
    }
    ckpt, _ = save_open(tmp_path, ckpt_obj, "last.ckpt")
    found = check_mapping(ckpt, opt, [f"model.{n}" for n in order], path=["optimizer_states", 0])
    assert found.model is not None and found.model.key == "state_dict"

    summary = training_summary(ckpt)
    scalars = dict(summary.scalars)
    assert scalars["epoch"] == 4 and scalars["global_step"] == 120
    assert scalars["callbacks.ModelCheckpoint{'monitor': 'val_loss'}.best_model_score"] == 0.125
    assert dict(summary.versions) == {"pytorch-lightning_version": "2.4.0"}
    hp = dict(summary.hyper_parameters)
    assert hp["hidden"] == "8" and hp["optim.name"] == "'adam'" and hp["optim.betas"] == "(0.9, 0.999)"
    (sched_state,) = summary.schedulers
    assert sched_state.kind == "MultiStepLR"
    fields = dict(sched_state.fields)
    assert fields["last_lr"] == sched.get_last_lr() and fields["last_epoch"] == 1
    assert fields["milestones"] == [5, 8] and fields["gamma"] == 0.5
    ckpt.close()


def test_lightning_two_optimizers(tmp_path) -> None:
    """A GAN-style pair: each optimizer covers its own part of one state dict."""
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 2)), nn.Sequential(nn.Linear(2, 5), nn.Linear(5, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters()), torch.optim.SGD(disc.parameters(), lr=0.1, momentum=0.5)
    for _ in range(2):
        disc(gen(torch.randn(3, 4))).sum().backward()
        opt_g.step()
        opt_d.step()
    sd = {**{f"gen.{k}": v for k, v in gen.state_dict().items()}, **{f"disc.{k}": v for k, v in disc.state_dict().items()}}
    ckpt, _ = save_open(tmp_path, {"state_dict": sd, "optimizer_states": [opt_g.state_dict(), opt_d.state_dict()]})
    found = find_optimizers(ckpt)
    assert [o.kind for o in found] == ["adam-like", "sgd-momentum"]
    assert [p.name for p in found[0].params] == [f"gen.{n}" for n, _ in gen.named_parameters()]
    assert [p.name for p in found[1].params] == [f"disc.{n}" for n, _ in disc.named_parameters()]
    assert all(o.mapping == "exact" for o in found)  # shapes leave one alignment only
    ckpt.close()


def test_raw_object_ids_map_by_position(tmp_path) -> None:
    """Old torch keyed state by id(param): large arbitrary ints, mapped by their place in param_groups."""
    net, opt, order = train("sgd-momentum")
    sd = opt.state_dict()
    fake = {i: 140_000_000_000 + 7919 * (i * 37 % 11) for g in sd["param_groups"] for i in g["params"]}
    sd["state"] = {fake[i]: s for i, s in sd["state"].items()}
    for g in sd["param_groups"]:
        g["params"] = [fake[i] for i in g["params"]]
    ckpt, _ = save_open(tmp_path, {"model_state_dict": net.state_dict(), "optimizer_state_dict": sd})
    (found,) = find_optimizers(ckpt)
    assert found.id_kind == "object-id" and found.mapping == "exact"
    want = {fake[i]: n for i, n in expected_names(opt, order).items()}
    assert {p.id: p.name for p in found.params} == want
    ckpt.close()


def test_frozen_left_out_of_the_optimizer_is_by_order(tmp_path) -> None:
    net, opt, order = train("adam", include_frozen=False)
    ckpt, _ = save_open(tmp_path, {"model": net.state_dict(), "optimizer": opt.state_dict()})
    found = check_mapping(ckpt, opt, order, mapping="by-order")
    assert "embed.bias" not in [p.name for p in found.params]
    ckpt.close()


def test_interleaved_param_groups(tmp_path) -> None:
    net, opt, order = train("adamw", groups="decay")
    ckpt, _ = save_open(tmp_path, {"model": net.state_dict(), "optimizer": opt.state_dict()})
    # the float buffer "scale" could stand for any bias of the second group: right names, not proven
    found = check_mapping(ckpt, opt, order, mapping="by-order")
    assert "param groups aligned together" in found.note
    ckpt.close()


def test_no_model_means_no_names(tmp_path) -> None:
    _, opt, _ = train("rmsprop")
    ckpt, _ = save_open(tmp_path, {"optimizer": opt.state_dict()})
    (found,) = find_optimizers(ckpt)
    assert found.mapping == "none" and all(p.name is None for p in found.params)
    ckpt.close()


def test_shapes_that_cannot_fit_mean_none(tmp_path) -> None:
    net, opt, _ = train("adam")
    model = {k: v for k, v in net.state_dict().items() if not k.startswith("hidden")}
    ckpt, _ = save_open(tmp_path, {"model": model, "optimizer": opt.state_dict()})
    (found,) = find_optimizers(ckpt)
    assert found.mapping == "none" and found.params[0].name is None
    ckpt.close()


def test_align_counts_alternatives() -> None:
    assert align([(2,), None], [(2,), (3,)]) == ([0, 1], True)
    assert align([(4,)], [(4,), (4,)]) == ([1], False)  # the later entry: skipped ones go first
    assert align([(4,), (5,)], [(5,), (4,)]) == (None, False)
    assert align([(1,)] * 3, [(1,)] * 2) == (None, False)


def test_info_json_matches_torch(tmp_path) -> None:
    net, opt, order = train("adam")
    ckpt, path = save_open(tmp_path, {"model_state_dict": net.state_dict(), "optimizer_state_dict": opt.state_dict()})
    data = json.loads(json.dumps(info_dict(ckpt)))
    (entry,) = data["optimizers"]
    sd = torch.load(path, weights_only=True)["optimizer_state_dict"]
    assert entry["path"] == ["optimizer_state_dict"] and entry["kind"] == "adam-like" and entry["mapping"] == "exact"
    for ours, theirs in zip(entry["param_groups"], sd["param_groups"], strict=True):
        want = {k: list(v) if isinstance(v, tuple) else v for k, v in theirs.items() if k != "params"}
        assert ours == {**want, "num_params": len(theirs["params"])}
    names = expected_names(opt, order)
    group_of = {i: g for g, group in enumerate(sd["param_groups"]) for i in group["params"]}
    assert [p["id"] for p in entry["params"]] == list(names)
    for p in entry["params"]:
        assert p["name"] == names[p["id"]] and p["group"] == group_of[p["id"]]
        state = sd["state"].get(p["id"], {})
        assert set(p["state"]) == set(state)
        for key, value in state.items():
            if key == "step":
                assert p["state"][key] == int(value.item()) and isinstance(p["state"][key], int)
            else:
                assert p["state"][key] == {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    ckpt.close()


def test_info_json_without_optimizer_is_empty(tmp_path) -> None:
    ckpt, _ = save_open(tmp_path, {"w": torch.zeros(2)})
    assert info_dict(ckpt)["optimizers"] == []
    ckpt.close()


def test_figures_match_torch(tmp_path) -> None:
    net, opt, order = train("adam", steps=4)
    ckpt, _ = save_open(tmp_path, {"model": net.state_dict(), "optimizer": opt.state_dict()})
    (found,) = find_optimizers(ckpt)
    figures = drain(iter_figures(found))
    sd = opt.state_dict()
    for fig, p in zip(figures, found.params, strict=True):
        state = sd["state"].get(p.id)
        if state is None:
            assert fig.step is None and fig.norms == {} and fig.eff_median is None
            continue
        assert fig.step == 4
        for key in ("exp_avg", "exp_avg_sq"):
            assert fig.norms[key] == pytest.approx(torch.linalg.vector_norm(state[key].double()).item(), rel=1e-12)
        group = sd["param_groups"][p.group]
        v_hat = state["exp_avg_sq"].double() / (1 - group["betas"][1] ** 4)
        eff = (group["lr"] / (v_hat.sqrt() + group["eps"])).reshape(-1).numpy()
        assert fig.eff_max == pytest.approx(eff.max(), rel=1e-12)
        assert fig.eff_median == pytest.approx(np.median(eff), rel=1e-12)
        assert not fig.eff_sampled
    ckpt.close()


def test_effective_step_sampled_median(tmp_path) -> None:
    v = torch.rand(10_001, dtype=torch.float64) + 1e-3
    ckpt, _ = save_open(tmp_path, {"v": v})
    group = {"lr": 0.1, "eps": 1e-8, "betas": [0.9, 0.99]}
    median, top, sampled = drain(iter_effective_step(ckpt.tensor("v"), group, 10, chunk_elems=999, exact_limit=1000))
    eff = (0.1 / ((v / (1 - 0.99**10)).sqrt() + 1e-8)).numpy()
    assert sampled and top == pytest.approx(eff.max(), rel=1e-12)
    assert median == pytest.approx(np.median(eff[:: math.ceil(10_001 / 1000)]), rel=1e-12)
    ckpt.close()

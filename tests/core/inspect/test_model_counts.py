"""The numbers torch would say: Parameters is `sum(p.numel() for p in model.parameters())`, a module's figures are over
its floating-point parameters and buffers with the counters apart; on files torch, torch.export and Lightning's
Trainer write (tests/support/counted_models), in the core and in `info --json`."""

from __future__ import annotations

import json

import pytest
import torch

from ckptview.commands.info import info_dict
from ckptview.core.inspect.summary import size_facts
from ckptview.core.read.open import open_checkpoint
from tests.support.counted_models import BATCHES, exported_file, lightning_file, resnet_file


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    return resnet_file(tmp_path_factory.mktemp("resnet"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory, resnet):
    model, _ = resnet
    return model, exported_file(tmp_path_factory.mktemp("pt2"), model)


@pytest.fixture(scope="module")
def lightning_ckpt(tmp_path_factory):
    return lightning_file(tmp_path_factory.mktemp("lightning"))


@pytest.mark.slow
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


def test_a_filter_keeps_the_modules_of_what_it_keeps(resnet):
    """`info --json --stats --filter`: each module's figures over the tensors the filter kept, in display order
    (each module before the modules inside it), the others left out."""
    _model, path = resnet
    state = torch.load(path, weights_only=True)
    kept = {k for k in state if k.startswith("layer1.0.") and not k.endswith("running_var")}
    ckpt = open_checkpoint(path)
    try:
        modules = info_dict(ckpt, stats=True, only=kept)["modules"]
        whole = [m["path"] for m in info_dict(ckpt, stats=True)["modules"]]
    finally:
        ckpt.close()
    assert [m["path"] for m in modules] == ["layer1", "layer1.0", "layer1.0.conv1", "layer1.0.bn1",
                                           "layer1.0.conv2", "layer1.0.bn2"]
    assert whole.index("conv1") < whole.index("bn1") < whole.index("layer1") < whole.index("layer1.0")
    for module in modules:
        floats = [v for k, v in state.items() if k in kept and k.startswith(module["path"] + ".")
                  and v.is_floating_point()]
        assert module["tensors"] == len(floats)
        _check(module["stats"], _torch_aggregate(floats))


# --- every row of the tree counts parameters the same way (issue 45, defect 2) ----------------------------
def _rows(path):
    from ckptview.core.inspect.grouping import find_row, group_tree

    ckpt = open_checkpoint(path)
    facts = size_facts(ckpt)
    top = group_tree(ckpt.root, parameters=facts.counted)
    return ckpt, facts, top, lambda name: find_row(top, name)


@pytest.mark.parametrize("made", ["resnet", "exported", "lightning_ckpt"])
def test_every_row_counts_the_parameters_torch_counts(request, made):
    """The tree's Parameters column counted Adam's state (`optimizer_state_dict` 15,896, `step of fc1.weight`
    1) where the summary said 7,946: each row now counts its module's `parameters()`, nothing else."""
    model, path = request.getfixturevalue(made)
    ckpt, facts, top, row = _rows(path)
    try:
        truth = sum(p.numel() for p in model.parameters())
        assert top.params == facts.parameters == truth
        if made == "exported":  # the program's sample inputs and constants are no parameters
            counted = {e.name for e in ckpt.tensors() if row(e.name).params}
            assert sum(row(n).params for n in counted) == truth
            assert not any("input" in n.lower() for n in counted), counted
            return
        prefix = "state_dict.net." if made == "lightning_ckpt" else ""
        net = model.net if made == "lightning_ckpt" else model
        for name, module in net.named_modules():
            if name and module.state_dict():  # a ReLU saves nothing: no row
                assert row(prefix + name).params == sum(p.numel() for p in module.parameters()), name
        named = dict(net.named_parameters())
        for entry in ckpt.tensors():
            own = entry.name.startswith(prefix) and entry.name[len(prefix):] in named
            assert row(entry.name).params == (entry.info.numel if own else 0), entry.name
        if made == "lightning_ckpt":
            assert row("optimizer_states").params == 0 and row("optimizer_states.0.state.0.step").params == 0
    finally:
        ckpt.close()


def test_tied_weights_count_once_in_the_model_and_in_each_module(tmp_path):
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(50, 8)
            self.body = torch.nn.Linear(8, 8)
            self.head = torch.nn.Linear(8, 50, bias=False)
            self.head.weight = self.embed.weight

    model = Tied()
    path = tmp_path / "tied.pt"
    torch.save(model.state_dict(), path)
    ckpt, facts, top, row = _rows(str(path))
    try:
        assert top.params == facts.parameters == sum(p.numel() for p in model.parameters()) == 400 + 72
        assert row("head").params == sum(p.numel() for p in model.head.parameters()) == 400
        assert row("embed").params == 400 and row("head.weight").params == 400  # both rows are the parameter
    finally:
        ckpt.close()


def test_a_training_checkpoint_counts_its_model_only(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.BatchNorm1d(64), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 20)).sum().backward()
    opt.step()
    path = tmp_path / "train.pt"
    torch.save({"model_state_dict": model.state_dict(), "optimizer_state_dict": opt.state_dict(), "epoch": 1}, path)
    ckpt, facts, top, row = _rows(str(path))
    try:
        truth = sum(p.numel() for p in model.parameters())
        assert top.params == row("model_state_dict").params == facts.parameters == truth
        assert row("optimizer_state_dict").params == 0
        assert row("optimizer_state_dict.state.0.step").params == 0
        assert row("model_state_dict.1.running_mean").params == 0
        assert row("model_state_dict.1").params == 128
    finally:
        ckpt.close()


def test_a_model_s_buffers_are_no_training_facts(tmp_path, resnet):
    """A state dict's (and a .pt2's) `bn1.num_batches_tracked` is a module's counter: the Training tab showed for
    every file with a BatchNorm. A training checkpoint's own `step` and `loss` still are facts."""
    from ckptview.core.inspect.training import training_summary

    _model, path = resnet
    ckpt = open_checkpoint(path)
    try:
        assert training_summary(ckpt, read_scalars=False).is_empty
    finally:
        ckpt.close()
    torch.save({"step": torch.tensor(7), "loss": torch.tensor(0.5), "w": torch.ones(2)}, tmp_path / "t.pt")
    ckpt = open_checkpoint(str(tmp_path / "t.pt"))
    try:
        assert [name for name, _ in training_summary(ckpt).scalars] == ["step", "loss"]
    finally:
        ckpt.close()

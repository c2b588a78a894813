"""Training folders built by hand with the file names and structures HF Trainer, accelerate and Lightning write:
opened as one checkpoint, every file a top-level entry, the optimizer named by the model beside it."""

from __future__ import annotations

import json
import pickle
import random
import sys
import types
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ckptview.commands.info import info_dict
from ckptview.core.inspect.optimizer import find_optimizers
from ckptview.core.inspect.training import training_summary
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.torch_compare import same_values


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8))
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.encoder(x)))


def trained():
    torch.manual_seed(0)
    net = Net()
    named = list(net.named_parameters())
    opt = torch.optim.AdamW([{"params": [p for _, p in named if p.ndim > 1], "weight_decay": 0.01},
                             {"params": [p for _, p in named if p.ndim == 1], "weight_decay": 0.0}], lr=5e-5)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / 1000)
    for _ in range(3):
        opt.zero_grad()
        net(torch.randn(4, 6)).pow(2).mean().backward()
        opt.step()
        sched.step()
    by_param = {id(p): n for n, p in named}
    order = [by_param[id(p)] for g in opt.param_groups for p in g["params"]]
    return net, opt, sched, order


TRAINER_STATE = {
    "best_metric": 0.25, "best_model_checkpoint": "out/checkpoint-400", "epoch": 1.6, "eval_steps": 100,
    "global_step": 500, "is_hyper_param_search": False, "is_local_process_zero": True, "is_world_process_zero": True,
    "log_history": [
        {"epoch": 0.8, "grad_norm": 1.5, "learning_rate": 4e-05, "loss": 0.9, "step": 250},
        {"epoch": 1.6, "grad_norm": 0.7, "learning_rate": 2e-05, "loss": 0.5, "step": 500},
        {"epoch": 1.6, "eval_loss": 0.25, "eval_runtime": 1.2, "step": 500},
    ],
    "logging_steps": 250, "max_steps": 1000, "num_train_epochs": 4, "save_steps": 500, "total_flos": 1234.0,
    "train_batch_size": 8, "trial_name": None, "trial_params": None,
}


def write_training_args(path, monkeypatch) -> None:
    """A full pickle of a TrainingArguments dataclass, as `torch.save(self.args, ...)` writes it."""
    module = types.ModuleType("transformers.training_args")

    @dataclass
    class TrainingArguments:
        output_dir: str = "out"
        learning_rate: float = 5e-5
        num_train_epochs: float = 4.0
        per_device_train_batch_size: int = 8

    TrainingArguments.__module__ = module.__name__
    TrainingArguments.__qualname__ = "TrainingArguments"
    module.TrainingArguments = TrainingArguments
    package = types.ModuleType("transformers")
    package.training_args = module
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "transformers", package)
        patch.setitem(sys.modules, module.__name__, module)
        torch.save(TrainingArguments(), path)


def hf_trainer_folder(tmp_path, monkeypatch, weights: str = "model.safetensors"):
    net, opt, sched, order = trained()
    folder = tmp_path / "out" / "checkpoint-500"
    folder.mkdir(parents=True)
    if weights == "model.safetensors":
        save_file(net.state_dict(), str(folder / weights), metadata={"format": "pt"})
    else:
        torch.save(net.state_dict(), folder / weights)
    torch.save(opt.state_dict(), folder / "optimizer.pt")
    torch.save(sched.state_dict(), folder / "scheduler.pt")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()},
               folder / "rng_state.pth")
    (folder / "trainer_state.json").write_text(json.dumps(TRAINER_STATE, indent=2))
    (folder / "config.json").write_text(json.dumps({"architectures": ["Net"]}))
    write_training_args(folder / "training_args.bin", monkeypatch)
    return folder, net, opt, sched, order


def check_optimizer(ckpt, opt, order, path, mapping="exact"):
    """Names against torch's; a safetensors model stores names sorted, so its order is a guess: the names of
    parameters whose shape another tensor shares are flagged guessed (here the guess is right)."""
    (found,) = find_optimizers(ckpt)
    assert list(found.path) == path
    assert found.mapping == mapping, found.note
    ids = [i for g in opt.state_dict()["param_groups"] for i in g["params"]]
    assert {p.id: p.name for p in found.params} == dict(zip(ids, order, strict=True))
    return found


def test_hf_trainer_checkpoint_folder(tmp_path, monkeypatch, transformers_unimported) -> None:
    folder, net, opt, sched, order = hf_trainer_folder(tmp_path, monkeypatch)
    ckpt = open_checkpoint(str(folder))
    assert ckpt.format == "training-folder"
    keys = [c.key for c in ckpt.root.children]
    assert set(keys) == {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                         "trainer_state.json", "training_args.bin", "config.json"}
    weights = load_file(str(folder / "model.safetensors"))
    for name, tensor in weights.items():
        assert same_values(read_values(ckpt.tensor(f"model.safetensors.{name}")), tensor), name
    exp_avg = opt.state_dict()["state"][0]["exp_avg"]
    assert same_values(read_values(ckpt.tensor("optimizer.pt.state.0.exp_avg")), exp_avg)
    rng = torch.load(folder / "rng_state.pth", weights_only=False)
    assert same_values(read_values(ckpt.tensor("rng_state.pth.cpu")), rng["cpu"])
    found = check_optimizer(ckpt, opt, order, ["optimizer.pt"], mapping="guessed")
    # encoder.0.bias, encoder.1.weight and encoder.1.bias all have shape (8,): only the order tells them apart
    assert sorted(p.name for p in found.params if p.guessed) == ["encoder.0.bias", "encoder.1.bias", "encoder.1.weight"]
    # training_args.bin is a full pickle: its class is reported, never imported or run
    assert "transformers.training_args.TrainingArguments" in ckpt.unsafe_globals
    assert "transformers.training_args" not in sys.modules and "transformers" not in sys.modules
    summary = training_summary(ckpt)
    facts = dict(summary.scalars)
    assert facts["global_step"] == 500 and facts["epoch"] == 1.6 and facts["best_metric"] == 0.25
    assert facts["log.learning_rate"] == 2e-05 and facts["log.loss"] == 0.5 and facts["log.eval_loss"] == 0.25
    assert ("learning_rate", "5e-05") in summary.hyper_parameters
    (scheduler,) = summary.schedulers
    assert scheduler.path == ("scheduler.pt",) and dict(scheduler.fields)["last_lr"] == sched.get_last_lr()
    data = json.loads(json.dumps(info_dict(ckpt)))
    assert [p["name"] for p in data["optimizers"][0]["params"]] == order
    assert {v["name"] for v in data["values"]} >= {"trainer_state.json.global_step", "config.json.architectures.0"}
    ckpt.close()


def test_hf_trainer_folder_with_pytorch_model_bin(tmp_path, monkeypatch) -> None:
    folder, net, opt, _, order = hf_trainer_folder(tmp_path, monkeypatch, weights="pytorch_model.bin")
    ckpt = open_checkpoint(str(folder))
    assert "pytorch_model.bin" in [c.key for c in ckpt.root.children]
    check_optimizer(ckpt, opt, order, ["optimizer.pt"])
    ckpt.close()


def test_optimizer_file_alone_is_named_by_the_model_beside(tmp_path, monkeypatch) -> None:
    folder, _net, opt, _sched, order = hf_trainer_folder(tmp_path, monkeypatch)
    ckpt = open_checkpoint(str(folder / "optimizer.pt"))
    found = check_optimizer(ckpt, opt, order, [], mapping="guessed")  # as in the folder: the same names
    assert "model.safetensors" in found.note, found.note
    ckpt.close()


def test_accelerate_save_state_folder(tmp_path) -> None:
    net, opt, sched, order = trained()
    folder = tmp_path / "checkpoint_3"
    folder.mkdir()
    save_file(net.state_dict(), str(folder / "model.safetensors"))
    torch.save(opt.state_dict(), folder / "optimizer.bin")
    torch.save(sched.state_dict(), folder / "scheduler.bin")
    torch.save({"step": 3, "random_state": random.getstate(), "numpy_random_seed": np.random.get_state(),
                "torch_manual_seed": torch.get_rng_state()}, folder / "random_states_0.pkl")
    with open(folder / "custom_checkpoint_0.pkl", "wb") as fh:
        pickle.dump({"ema_decay": 0.999}, fh)
    ckpt = open_checkpoint(str(folder))
    assert {c.key for c in ckpt.root.children} == {"model.safetensors", "optimizer.bin", "scheduler.bin",
                                                   "random_states_0.pkl", "custom_checkpoint_0.pkl"}
    check_optimizer(ckpt, opt, order, ["optimizer.bin"], mapping="guessed")
    summary = training_summary(ckpt)
    assert [s.path for s in summary.schedulers] == [("scheduler.bin",)]
    assert dict(summary.scalars)["step"] == 3
    ckpt.close()


def test_dcp_step_folder_with_lightning_meta(tmp_path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    net, opt, _, order = trained()
    folder = tmp_path / "epoch=1-step=120.ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model_sd, optim_sd = get_state_dict(net, opt)
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(folder))
    torch.save({"epoch": 1, "global_step": 120, "pytorch-lightning_version": "2.4.0"}, folder / "meta.pt")
    ckpt = open_checkpoint(str(folder))
    assert ckpt.format == "training-folder"
    assert [c.key for c in ckpt.root.children] == [".metadata", "meta.pt"]
    (found,) = find_optimizers(ckpt)
    assert found.mapping == "exact" and [p.name for p in found.params] == order
    summary = training_summary(ckpt)
    assert dict(summary.scalars)["global_step"] == 120
    assert ("pytorch-lightning_version", "2.4.0") in summary.versions
    for entry in ckpt.tensors():
        if entry.path[1] == "model":
            assert same_values(read_values(entry.info), model_sd[entry.path[2]]), entry.name
    ckpt.close()


def test_training_folder_diffs_by_its_model(tmp_path, monkeypatch, capsys) -> None:
    from ckptview.cli import main

    folder, net, *_ = hf_trainer_folder(tmp_path, monkeypatch)
    torch.save(net.state_dict(), tmp_path / "weights.pt")
    assert main(["diff", str(folder), str(tmp_path / "weights.pt"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["strip"]["a"] == "model.safetensors."
    assert {t["name"] for t in data["tensors"]} == set(net.state_dict())
    assert all(t["status"] == "identical" for t in data["tensors"])
    assert main(["diff", str(folder), str(folder)]) == 0
    result_rows = capsys.readouterr().out
    assert "6 model weights: 6 identical" in result_rows


def test_sorted_safetensors_names_still_map_by_shape(tmp_path) -> None:
    """safetensors sorts names: `zeta` (defined first) is stored after `alpha`; no order guess fits, shapes do."""
    torch.manual_seed(0)
    net = nn.Sequential()
    net.add_module("zeta", nn.Linear(4, 8))
    net.add_module("alpha", nn.Linear(8, 3))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.randn(2, 4)).sum().backward()
    opt.step()
    folder = tmp_path / "checkpoint-1"
    folder.mkdir()
    save_file(net.state_dict(), str(folder / "model.safetensors"))
    torch.save(opt.state_dict(), folder / "optimizer.pt")
    ckpt = open_checkpoint(str(folder))
    (found,) = find_optimizers(ckpt)
    assert found.mapping == "exact" and "state shape" in found.note  # every shape once: names are sure
    assert not any(p.guessed for p in found.params)
    assert [p.name for p in found.params] == [n for n, _ in net.named_parameters()]
    ckpt.close()


def test_broken_files_in_a_training_folder(tmp_path, capsys) -> None:
    """A truncated optimizer, garbage JSON, a hostile pickle: each a warning or a value, the rest opens."""
    net, opt, _, order = trained()
    folder = tmp_path / "checkpoint-7"
    folder.mkdir()
    save_file(net.state_dict(), str(folder / "model.safetensors"))
    torch.save(opt.state_dict(), folder / "optimizer.pt")
    raw = (folder / "optimizer.pt").read_bytes()
    (folder / "optimizer.pt").write_bytes(raw[: len(raw) // 2])
    (folder / "trainer_state.json").write_bytes(b"\x00\xff{not json")
    (folder / "scheduler.pt").write_bytes(b"\x80\x04cos\nsystem\n(S'echo pwned'\ntR.")
    ckpt = open_checkpoint(str(folder))
    entries = {c.key: c for c in ckpt.root.children}
    assert set(entries) == {"model.safetensors", "optimizer.pt", "trainer_state.json", "scheduler.pt"}
    # cut in half: listed from its records before the cut (issue 45), what the cut took marked broken
    assert any(w.startswith("optimizer.pt: salvaged") for w in ckpt.warnings), ckpt.warnings
    assert "not valid JSON" in entries["trainer_state.json"].value
    assert "os.system" in ckpt.unsafe_globals
    model = [e for e in ckpt.tensors() if e.name.startswith("model.safetensors.")]
    assert len(model) == len(net.state_dict())
    ckpt.close()
    # Nothing readable at all: one line naming the first problem, exit status 2.
    (folder / "model.safetensors").unlink()
    (folder / "scheduler.pt").unlink()
    (folder / "optimizer.pt").write_bytes(raw[:40])  # inside data.pkl: nothing to salvage
    from ckptview.cli import main

    assert main(["info", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "optimizer.pt" in err[0]


def test_accelerate_fsdp_sharded_state_folder(tmp_path) -> None:
    """accelerate with FSDP SHARDED_STATE_DICT: DCP subfolders for the model and the optimizer."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    net, opt, sched, order = trained()
    folder = tmp_path / "checkpoint_0"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model_sd, optim_sd = get_state_dict(net, opt)
        dcp.save({"model": model_sd}, checkpoint_id=str(folder / "pytorch_model_fsdp_0"))
        dcp.save({"optimizer": optim_sd}, checkpoint_id=str(folder / "optimizer_0"))
    torch.save(sched.state_dict(), folder / "scheduler.bin")
    torch.save({"step": 3}, folder / "random_states_0.pkl")
    ckpt = open_checkpoint(str(folder))
    assert ckpt.format == "training-folder"
    assert {c.key for c in ckpt.root.children} == {"pytorch_model_fsdp_0", "optimizer_0", "scheduler.bin",
                                                   "random_states_0.pkl"}
    (found,) = find_optimizers(ckpt)
    assert found.mapping == "exact", found.note
    assert [p.name for p in found.params] == order and all(p.param is not None for p in found.params)
    ckpt.close()

"""A run's story (issue 45): the loss, learning rate, epoch and metrics a run logged, read as data beside the
tensor figures, equal to what the HF Trainer, Lightning and a plain loop logged (read back with the libraries'
own readers where they have one: `trainer.state.log_history`, tensorboard's EventAccumulator, `torch.load`)."""

from __future__ import annotations

import math
import os

import pytest
import torch

from ckptview.core.series.live import run_live
from tests.support.logged_runs import event_scalars, hf_trainer_run, lightning_run, plain_run


def curve(data: dict, name: str, source: str | None = None) -> dict:
    found = [c for c in data["scalars"] if c["name"] == name and (source is None or c["source"].startswith(source))]
    assert len(found) == 1, (name, source, [(c["name"], c["source"]) for c in data["scalars"]])
    return found[0]


def points(c: dict) -> list[tuple[int, float]]:
    return list(zip(c["steps"], c["values"], strict=True))


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return plain_run(str(tmp_path_factory.mktemp("plain") / "run"))


def test_plain_loop_values_are_the_saved_ones(plain) -> None:
    data = run_live([plain.folder]).to_json()
    assert data["order"]["by"] == "epoch"
    assert [c["epoch"] for c in data["checkpoints"]] == list(range(8))
    for key in ("loss", "lr", "last_lr"):
        c = curve(data, key, "checkpoint")
        assert c["kind"] == "checkpoint"
        assert c["values"] == [record[key] for record in plain.logged], key
        # The same axis as the tensor figures: each checkpoint's epoch, and its own value there.
        assert c["x"] == [float(e) for e in range(8)] and c["at_checkpoints"] == c["values"]
    for path, ref in zip(plain.checkpoints, data["checkpoints"], strict=True):
        saved = torch.load(path, weights_only=True)
        assert ref["values"]["loss"] == saved["loss"]
        assert ref["values"]["lr"] == saved["optimizer_state_dict"]["param_groups"][0]["lr"]
        assert ref["values"]["last_lr"] == saved["scheduler_state_dict"]["_last_lr"][0]
    assert data["log_files"] == [] and data["best_checkpoint"] is None


def test_a_loss_spike_is_joined_with_the_module_that_jumped(tmp_path) -> None:
    run = plain_run(str(tmp_path / "run"), epochs=10, spike_at=6)
    losses = [r["loss"] for r in run.logged]
    assert losses[6] > 3 * max(losses[2:6])  # the loop's own loss spiked there
    result = run_live([run.folder])
    spikes = [f for f in result.findings if f.kind == "loss_spike"]
    assert [f.index for f in spikes] == [6], [f.detail for f in result.findings]
    assert spikes[0].module == "model_state_dict.2" and "where model_state_dict.2 updated" in spikes[0].detail
    assert "loss (checkpoint) spiked to" in spikes[0].detail and "at epoch 6" in spikes[0].detail
    assert result.to_json()["findings"][[f.kind for f in result.findings].index("loss_spike")]["module"] == spikes[0].module


def test_a_run_without_a_spike_has_no_loss_finding(plain) -> None:
    assert not [f for f in run_live([plain.folder]).findings if f.kind.startswith("loss_")]


@pytest.mark.slow
def test_lightning_run_with_tensorboard_logger(tmp_path) -> None:
    pytest.importorskip("lightning")
    pytest.importorskip("tensorboard")
    run = lightning_run(str(tmp_path / "pl"))
    data = run_live([run.folder]).to_json()
    assert data["order"]["by"] == "step"
    logged = event_scalars(run.extra["log_dir"])  # tensorboard's own reader
    assert {"train_loss", "lr-Adam", "epoch"} <= set(logged)
    for tag, expected in logged.items():
        c = curve(data, tag, "events: ")
        assert points(c) == expected, tag
        assert c["x"] == [float(s) for s, _ in expected]
    epochs = dict(logged["epoch"])
    assert curve(data, "train_loss", "events: ")["epochs"] == [epochs[s] for s, _ in logged["train_loss"]]
    for path, ref in zip(run.checkpoints, data["checkpoints"], strict=True):
        saved = torch.load(path, weights_only=False)  # the test's own file: Lightning's reference reading
        state = next(v for k, v in saved["callbacks"].items() if k.startswith("ModelCheckpoint"))
        assert ref["values"]["train_loss"] == float(state["current_score"])
        assert ref["values"]["lr"] == saved["optimizer_states"][0]["param_groups"][0]["lr"]
        assert ref["values"]["last_lr"] == saved["lr_schedulers"][0]["_last_lr"][0]
        assert ref["values"]["epoch"] == saved["epoch"] and ref["step"] == saved["global_step"]
    # Each checkpoint marked on the dense curve: the last value logged at or before its step.
    loss = curve(data, "train_loss", "events: ")
    for ref, at in zip(data["checkpoints"], loss["at_checkpoints"], strict=True):
        assert at == [v for s, v in logged["train_loss"] if s <= ref["step"]][-1]
    best = data["best_checkpoint"]
    assert best["path"] == run.extra["best"] and best["value"] == run.extra["best_score"]
    assert best["metric"] == "train_loss" and data["checkpoints"][best["index"]]["path"] == run.extra["best"]
    import yaml

    with open(os.path.join(run.extra["log_dir"], "hparams.yaml")) as fh:
        hparams = yaml.safe_load(fh)
    assert {h["name"]: h["value"] for h in data["hyper_parameters"]} == {k: str(v) for k, v in hparams.items()}
    assert all(f["error"] is None for f in data["log_files"]) and {f["kind"] for f in data["log_files"]} == {
        "tfevents", "hparams"}


@pytest.mark.slow
def test_hf_trainer_run(tmp_path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("tensorboard")
    run = hf_trainer_run(str(tmp_path / "hf"))
    data = run_live([run.folder]).to_json()
    assert [c["step"] for c in data["checkpoints"]] == [2, 4, 6]
    history = run.logged  # the Trainer's own state.log_history
    for key in ("loss", "learning_rate", "grad_norm", "eval_loss"):
        expected = [(e["step"], e[key]) for e in history if key in e]
        assert expected and points(curve(data, key, "trainer_state.json")) == expected, key
    assert curve(data, "loss", "trainer_state.json")["epochs"] == [e["epoch"] for e in history if "loss" in e]
    (events,) = {os.path.dirname(f["path"]) for f in data["log_files"] if f["kind"] == "tfevents"}
    for tag, expected in event_scalars(events).items():
        assert points(curve(data, tag, "events: ")) == expected, tag
    for path, ref in zip(run.checkpoints, data["checkpoints"], strict=True):
        saved = torch.load(os.path.join(path, "optimizer.pt"), weights_only=True)
        assert ref["values"]["lr"] == saved["param_groups"][0]["lr"]
    best = data["best_checkpoint"]
    assert best["path"] == run.extra["best"] and best["value"] == run.extra["best_metric"]
    assert data["checkpoints"][best["index"]]["path"] == run.extra["best"]
    loss = curve(data, "loss", "trainer_state.json")
    assert loss["at_checkpoints"] == [[e["loss"] for e in history if "loss" in e and e["step"] <= s][-1]
                                      for s in (2, 4, 6)]
    assert all(math.isfinite(v) for v in loss["values"])

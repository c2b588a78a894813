"""`diff` lists the values beside the tensors that changed (issue 45): epoch, step, lr, loss, hyper-parameters,
in `--json` as `values`, in the table above the tensors; equal to what `torch.load` reads from the files."""

from __future__ import annotations

import json

import pytest
import torch

from ckptview.cli import main
from ckptview.core.compare.diff import plan_diff
from ckptview.core.compare.values import value_changes
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.open import open_checkpoint
from tests.support.logged_runs import plain_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return plain_run(str(tmp_path_factory.mktemp("values") / "run"))


def test_epoch_lr_and_loss_changes_are_the_files(run) -> None:
    first, last = run.checkpoints[0], run.checkpoints[7]
    a, b = (open_checkpoint(p, ReaderContext()) for p in (first, last))
    changes = {c.name: c for c in value_changes(a, b)}
    sa, sb = (torch.load(p, weights_only=True) for p in (first, last))
    assert (changes["epoch"].a, changes["epoch"].b) == (0, 7)
    assert (changes["loss"].a, changes["loss"].b) == (sa["loss"], sb["loss"])
    lr = changes["optimizer_state_dict.param_groups.0.lr"]
    assert (lr.a, lr.b) == (0.003, 0.00075) == (sa["optimizer_state_dict"]["param_groups"][0]["lr"],
                                                 sb["optimizer_state_dict"]["param_groups"][0]["lr"])
    assert changes["scheduler_state_dict._last_lr.0"].b == sb["scheduler_state_dict"]["_last_lr"][0]
    assert changes["scheduler_state_dict.last_epoch"].rank == 0 and lr.rank == 0 and lr.status == "changed"
    # Per-parameter optimizer state (its step counters) and the weights are the tensor rows' business.
    assert not [n for n in changes if ".state." in n or n.startswith("model_state_dict")]
    assert plan_diff(a, b).values == value_changes(a, b)
    a.close()
    b.close()


def test_diff_json_and_table_show_them_above_the_tensors(run, capsys) -> None:
    first, last = run.checkpoints[0], run.checkpoints[7]
    assert main(["diff", first, last, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    values = {v["name"]: v for v in data["values"]}
    assert values["epoch"] == {"name": "epoch", "path": ["epoch"], "a": 0, "b": 7, "status": "changed"}
    assert values["optimizer_state_dict.param_groups.0.lr"]["a"] == 0.003
    assert list(data).index("values") < list(data).index("tensors")
    assert main(["diff", first, last]) == 1
    out = capsys.readouterr().out
    assert out.index("values beside the tensors differ") < out.index("0.weight  changed")
    assert "  epoch" in out and "0 -> 7" in out and "0.003 -> 0.00075" in out
    assert main(["diff", first, first]) == 0
    assert "beside the tensors" not in capsys.readouterr().out


def test_one_sided_values_and_a_grown_log(tmp_path) -> None:
    log = [{"step": 1, "loss": 2.0, "epoch": 0.5}, {"step": 2, "loss": 1.5, "epoch": 1.0}]
    weights = {"w": torch.ones(3)}
    torch.save({"model": weights, "trainer": {"log_history": log}, "note": "a"}, tmp_path / "a.pt")
    torch.save({"model": weights, "trainer": {"log_history": log + [{"step": 3, "loss": 9.0, "epoch": 1.5}]},
                "best_model_score": torch.tensor(0.25), "hp": {"dropout": 0.1}}, tmp_path / "b.pt")
    a, b = (open_checkpoint(str(tmp_path / n), ReaderContext()) for n in ("a.pt", "b.pt"))
    changes = {c.name: c for c in value_changes(a, b)}
    assert (changes["note"].status, changes["note"].b) == ("only_a", None)
    assert (changes["best_model_score"].status, changes["best_model_score"].b) == ("only_b", 0.25)
    grown = changes["trainer.log_history"]
    assert (repr(grown.a), repr(grown.b)) == ("2 records", "3 records")
    assert (changes["trainer.log_history (last loss)"].a, changes["trainer.log_history (last loss)"].b) == (1.5, 9.0)
    assert not [n for n in changes if n.startswith("trainer.log_history.2")]  # the new record: its length says it
    assert changes["trainer.log_history (last loss)"].to_json()["path"] == ["trainer", "log_history", "(last)", "loss"]
    a.close()
    b.close()

"""A series of one checkpoint says a series needs two (issue 45, defect 8), instead of a one-step "timeline"."""

from __future__ import annotations

import json

import torch

from ckptview.cli import main


def test_the_command_line_says_a_series_needs_two(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"w": torch.ones(3)}, run / "step1.pt")
    assert main(["series", str(run)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "at least two checkpoints" in err and "step1.pt" in err and "ckptview info" in err
    assert main(["series", str(run), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "not_a_series"
    torch.save({"w": torch.zeros(3)}, run / "step2.pt")
    assert main(["series", str(run)]) == 0  # two: a series
    assert "2 checkpoints" in capsys.readouterr().out

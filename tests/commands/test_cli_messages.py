"""Command-line messages that say what a folder holds and what to do, the window's usage in --help, one
way of writing sizes and counts (issue 25, finding 7)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from ckptview.cli import main


def test_info_on_a_run_folder_names_its_checkpoints_and_series(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for step in (10, 20, 30):
        torch.save({"w": torch.full((2,), float(step))}, run / f"step{step}.pth")
    assert main(["info", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # one line
    assert "3 checkpoints" in err and "step10.pth" in err and f"ckptview series {run}" in err


def test_info_on_a_mixed_folder_says_what_else_is_there(tmp_path, capsys):
    folder = tmp_path / "mixed"
    folder.mkdir()
    save_file({"w": torch.ones(2)}, str(folder / "model.safetensors"))
    torch.save({"w": torch.ones(3)}, folder / "ema.pt")
    torch.save({"w": torch.ones(4)}, folder / "other.pth")
    (folder / "config.json").write_text("{}")
    assert main(["info", str(folder)]) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if "also holds" in x]
    assert "2 other checkpoints" in line and "ema.pt" in line and "other.pth" in line
    assert "model.safetensors" not in line


def test_help_shows_the_window_usage(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for usage in ("ckptview [FILE ...]", "--diff A B", "--series PATH", "--install-desktop"):
        assert usage in out, usage


def test_a_subcommand_option_given_to_the_window_points_at_the_command(capsys):
    assert main(["model.pth", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`ckptview info model.pth --json`" in err


def test_counts_are_plural_only_when_more_than_one(tmp_path, capsys):
    torch.save({"w": torch.ones(2)}, tmp_path / "one.pt")
    assert main(["export", str(tmp_path / "one.pt"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("wrote 1 tensor (8 B) ")
    assert main(["info", str(tmp_path / "one.pt")]) == 0
    assert ", 1 tensor, " in capsys.readouterr().out

"""How commands fail (issue 45, defects 5 and 6): a subcommand's usage names the subcommand, not the window's
whole usage; under `--json` every failure prints one object `{"error": {"kind": ..., "message": ...}}` on
stdout (a stable machine word per class of error) besides its one line on stderr."""

from __future__ import annotations

import json

import pytest
import torch

from ckptview import cli
from ckptview.cli import SUBCOMMANDS, main
from ckptview.core.errors import Cancelled, RemoteError


def error_object(out: str) -> dict:
    """The one JSON object on stdout, which must be a failure's."""
    data = json.loads(out)  # the whole of stdout is one object
    assert set(data) == {"error"}, data
    assert set(data["error"]) == {"kind", "message"} and data["error"]["message"], data
    return data["error"]


# --- defect 5: usage and --help of a subcommand ------------------------------------------------------------
def test_a_subcommand_usage_error_names_the_subcommand(tmp_path, capsys):
    one = tmp_path / "one.pt"
    torch.save({"w": torch.ones(2)}, one)
    with pytest.raises(SystemExit) as exit_:
        main(["diff", str(one)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ckptview diff "), err
    assert "ckptview diff: error: " in err
    assert "the window" not in err and "[--install-desktop]" not in err and "{info,diff" not in err


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_help_starts_with_its_own_usage(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith(f"usage: ckptview {command} "), first
    assert "[--install-desktop]" not in out.split("\n\n")[0]  # the window's usage is not the program's name


# --- defect 6: --json failures --------------------------------------------------------------------------
def test_json_failure_of_a_file_that_is_no_checkpoint(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 100)
    assert main(["info", str(text), "--json"]) == 2
    out, err = capsys.readouterr()
    error = error_object(out)
    assert error["kind"] == "not_a_checkpoint"
    assert err.count("\n") == 1 and error["message"] in err  # the stderr line as before, same words


def test_json_failure_of_a_truncated_file_and_a_missing_one(tmp_path, capsys):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(100)}, path)
    path.write_bytes(path.read_bytes()[:40])  # nothing left to read but the first record's header
    assert main(["info", str(path), "--json"]) == 2
    assert error_object(capsys.readouterr().out)["kind"] == "format"
    assert main(["graph", str(tmp_path / "absent.pt"), "--json"]) == 2
    error = error_object(capsys.readouterr().out)
    assert error["kind"] == "not_found" and "absent.pt" in error["message"]


@pytest.mark.parametrize("argv", [
    ["info", "{path}", "--json", "--filter", "norm>>"],  # a filter the language refuses
    ["diff", "{path}", "{path}", "--json", "--map", "nonsense"],
    ["series", "--json"],  # no PATH
    ["run", "{path}", "--device", "cpu", "--json", "--model-kwargs", "[1"],
    ["{path}", "--json"],  # a window launch given a command's option
    ["info", "{path}", "--json", "--deadline", "soon"],  # a remote option's value
])
def test_json_usage_errors_are_objects_of_kind_usage(tmp_path, capsys, argv):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(2)}, path)
    assert main([a.format(path=path) for a in argv]) == (1 if argv[0] == "run" else 2)  # run's own statuses
    out, err = capsys.readouterr()
    assert error_object(out)["kind"] == "usage"
    assert err.count("\n") == 1


@pytest.mark.parametrize("argv", [
    ["diff", "{path}", "--json"],  # B missing
    ["info", "--json"],  # PATH missing
    ["graph", "{path}", "--json", "--dot"],
    ["series", "{path}", "--json", "--explode-factor", "0.5"],
])
def test_json_argument_errors_are_objects_of_kind_usage(tmp_path, capsys, argv):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(SystemExit) as exit_:
        main([a.format(path=path) for a in argv])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    error = error_object(out)
    assert error["kind"] == "usage"
    said = err.splitlines()[-1]
    assert said.startswith(f"ckptview {argv[0]}: error: ")  # argparse's lines, as without --json
    assert error["message"] == said.replace(": error: ", ": ", 1)


@pytest.mark.parametrize(("raised", "kind", "status"), [
    (RemoteError("cannot reach https://example.invalid/m.pt: name not known"), "remote", 2),
    (Cancelled(), "cancelled", 130),
    (KeyboardInterrupt(), "cancelled", 130),
    (RuntimeError("a bug"), "internal", 2),
    (PermissionError(13, "Permission denied", "/x/m.pt"), "permission", 2),
])
def test_json_failures_name_their_kind(monkeypatch, capsys, tmp_path, raised, kind, status):
    from ckptview.commands import info

    def fail(*_args, **_kwargs):
        raise raised

    monkeypatch.delenv("CKPTVIEW_DEBUG", raising=False)
    monkeypatch.setattr(info, "open_given", fail)  # how every command opens its path
    assert main(["info", str(tmp_path / "m.pt"), "--json"]) == status
    out, err = capsys.readouterr()
    assert error_object(out)["kind"] == kind
    assert err.count("\n") == 1


def test_without_json_a_failure_prints_nothing_on_stdout(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert main(["info", str(text)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1


def test_every_kind_is_documented():
    from pathlib import Path

    from ckptview.commands.failures import KINDS

    page = (Path(cli.__file__).parents[2] / "docs" / "cli.md").read_text()
    for kind in KINDS:
        assert f"`{kind}`" in page, kind


def test_every_class_named_for_a_kind_exists():
    import importlib

    from ckptview.commands.failures import CLASSES, KINDS, RUN_ERROR

    for name, kind in {**CLASSES, RUN_ERROR: "usage"}.items():
        module, _, cls = name.rpartition(".")
        assert isinstance(getattr(importlib.import_module(module), cls), type), name
        assert kind in KINDS

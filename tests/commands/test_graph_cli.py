"""`ckptview graph PATH [--json | --dot]`: the contract's JSON, DOT for scripts, a summary escaped for people."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from ckptview import cli
from ckptview.core.graph import ModelGraph, read_graph
from ckptview.core.read.open import open_checkpoint

ESC = "\x1b]0;pwned\x07"
FORGED = "x\nfake line"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("graph_cli")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    pt2 = str(folder / "mlp.pt2")
    torch.export.save(torch.export.export(model, (torch.randn(2, 4),)), pt2)
    hostile = str(folder / "hostile.pth")
    torch.save({f"enc{ESC}.w": torch.zeros(2), f"dec{FORGED}.w": torch.zeros(2), 'q"uote\\.w': torch.zeros(1)},
               hostile)
    text = folder / "notes.pt"
    text.write_text("hello, not a checkpoint\n")
    return {"pt2": pt2, "hostile": hostile, "text": str(text)}


def _run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    status = cli.main(["graph", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_json_is_the_contract_whole(files: dict[str, str], capsys: pytest.CaptureFixture) -> None:
    status, out, err = _run(capsys, files["pt2"], "--json")
    assert status == 0 and err == ""
    data = json.loads(out)
    # Contracts only grow: the fields scripts read first stay first, new facts come after.
    assert list(data)[:4] == ["source", "nodes", "unread", "notes"] and data["source"] == "exported-program"
    assert list(data)[4:] == ["classes", "blocks"]
    for node in data["nodes"]:
        assert list(node) == ["id", "op", "module", "inputs", "params", "shape", "dtype"]
    checkpoint = open_checkpoint(files["pt2"])
    blocks = data.pop("blocks")
    assert data == read_graph(checkpoint).to_json()
    checkpoint.close()
    assert ModelGraph.from_json(data).to_json() == data  # what scripts read back is what was printed
    assert [(b["module"], b["repeat"], b["parameters"]) for b in blocks] == [("0", 1, 4 * 8 + 8), ("1", 1, 0),
                                                                          ("2", 1, 8 * 2 + 2)]
    ops = [n["op"] for n in data["nodes"]]
    assert ops == ["input", "aten.linear.default", "aten.relu.default", "aten.linear.default", "output"]
    assert [n["params"] for n in data["nodes"]][1] == ["0.weight", "0.bias"]


def test_the_summary_counts_ops_and_keys(files: dict[str, str], capsys: pytest.CaptureFixture) -> None:
    status, out, _ = _run(capsys, files["pt2"])
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == files["pt2"]
    assert lines[1] == "  graph from exported-program: 5 nodes, 3 ops of 2 kinds, 4 keys placed, 0 unread"
    assert "    aten.linear.default  2" in lines and "  inputs: input float32[2, 4]" in lines


def test_dot_clusters_by_module_and_is_valid_dot(files: dict[str, str], capsys: pytest.CaptureFixture,
                                                 tmp_path) -> None:
    status, out, _ = _run(capsys, files["pt2"], "--dot")
    assert status == 0 and out.startswith('digraph "exported-program" {')
    assert 'label="0";' in out and '"input" -> "linear" [label="2x4 float32"];' in out
    assert '"linear_1" -> "output" [label="2x2 float32"];' in out  # each edge says the tensor it carries
    dot = os.path.join(os.path.dirname(sys.executable), "graphviz-pure")
    if os.path.exists(dot):  # the dot command as a wheel, where installed: the text is DOT it lays out
        (tmp_path / "g.dot").write_text(out)
        done = subprocess.run([dot, "-Tsvg", str(tmp_path / "g.dot")], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "<svg" in done.stdout


def test_names_from_the_file_are_escaped_in_every_output(files: dict[str, str], capsys: pytest.CaptureFixture) -> None:
    """A key with terminal escapes, a newline or DOT quotes: the summary and the DOT text hold none raw, and
    a forged line or DOT statement cannot appear; JSON escapes them as JSON does."""
    for args in ((), ("--dot",), ("--json",)):
        status, out, _ = _run(capsys, files["hostile"], *args)
        assert status == 0
        assert not {c for c in out if c != "\n" and not c.isprintable()}, args
        assert "\nfake line" not in out
    _, dot, _ = _run(capsys, files["hostile"], "--dot")
    assert '"q\\"uote\\\\"' in dot  # the quote and the backslash escaped: still one DOT string
    _, out, _ = _run(capsys, files["hostile"], "--json")
    assert {n["module"] for n in json.loads(out)["nodes"]} == {f"enc{ESC}", f"dec{FORGED}", 'q"uote\\'}


def test_a_bad_file_is_one_line_and_a_nonzero_status(files: dict[str, str], capsys: pytest.CaptureFixture,
                                                     tmp_path) -> None:
    for path in (files["text"], str(tmp_path / "missing.pt2")):
        status, out, err = _run(capsys, path, "--json")
        assert status == 2 and set(json.loads(out)) == {"error"}  # one object on stdout (docs/cli.md)
        assert err.count("\n") == 1 and err.startswith("ckptview: "), err


def test_json_and_dot_exclude_each_other(files: dict[str, str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(["graph", files["pt2"], "--json", "--dot"])
    assert stop.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert cli.main([files["pt2"], "--dot"]) == 2  # a window launch given graph's option: a hint
    assert "--dot is an option of `ckptview graph`" in capsys.readouterr().err

"""`ckptview info --filter EXPR`: the window's filter language on the command line, the same entries."""

from __future__ import annotations

import json

import pytest
import torch

from ckptview import cli


@pytest.fixture
def model_file(tmp_path) -> tuple[str, dict]:
    g = torch.Generator().manual_seed(0)
    state = {
        "encoder.layers.0.attn.q_proj.weight": torch.randn(16, 16, generator=g).to(torch.bfloat16),
        "encoder.layers.0.attn.q_proj.bias": torch.randn(16, generator=g),
        "encoder.layers.1.attn.q_proj.weight": torch.randn(16, 16, generator=g),
        "encoder.layers.12.mlp.fc.weight": torch.randn(64, 16, generator=g).to(torch.bfloat16),
        "decoder.embed.weight": torch.randn(1000, 16, generator=g),
        "step": torch.tensor(5),
    }
    path = tmp_path / "model.pt"
    torch.save({"model": state, "epoch": 3}, path)
    return str(path), state


def listed(capsys, *args: str) -> tuple[int, dict | None, str]:
    status = cli.main(["info", *args])
    out = capsys.readouterr()
    return status, (json.loads(out.out) if status == 0 and "--json" in args else None), out.err


@pytest.mark.parametrize(("expr", "keep"), [
    ("encoder bf16", lambda k, t: "encoder" in k and t.dtype == torch.bfloat16),
    ("*.q_proj.weight", lambda k, t: k.endswith(".q_proj.weight")),
    (r"/layers\.1\d\./", lambda k, t: ".layers.12." in k),
    (">10KB", lambda k, t: t.numel() * t.element_size() > 10_000),
    ("16x16", lambda k, t: tuple(t.shape) == (16, 16)),
])
def test_filter_keeps_what_the_expression_names(model_file, capsys, expr, keep) -> None:
    path, state = model_file
    status, data, err = listed(capsys, path, "--json", "--filter", expr)
    assert status == 0, err
    want = {f"model.{k}" for k, t in state.items() if keep(k, t)}
    assert want and {t["name"] for t in data["tensors"]} == want
    assert data["values"] == []  # `epoch` matches none of these


def test_filter_matches_the_window_and_the_table_is_filtered_too(model_file, capsys) -> None:
    from ckptview.core import open_checkpoint
    from ckptview.core.inspect.grouping import group_tree
    from ckptview.core.inspect.query import parse_query, visible_rows

    path, _ = model_file
    ckpt = open_checkpoint(path)
    try:
        top = group_tree(ckpt.root)
        shown, _ = visible_rows(top, parse_query("attn"))
        window = {r.name for r in top.walk() if id(r) in shown and r.node is not None and r.node.kind == "tensor"}
    finally:
        ckpt.close()
    status, data, _ = listed(capsys, path, "--json", "--filter", "attn")
    assert status == 0 and {t["name"] for t in data["tensors"]} == window
    assert cli.main(["info", path, "--filter", "decoder"]) == 0
    text = capsys.readouterr().out
    assert "decoder.embed.weight" in text and "q_proj" not in text


def test_a_bad_filter_is_one_line(model_file, capsys) -> None:
    path, _ = model_file
    status, _, err = listed(capsys, path, "--json", "--filter", "/[bad/")
    assert status == 2 and err.count("\n") == 1 and "--filter" in err and "regular expression" in err

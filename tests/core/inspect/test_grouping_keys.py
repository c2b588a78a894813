"""Only keys the file stores as strings are module paths: a float or tuple key is one row, whatever its dots."""

from __future__ import annotations

import json

import torch

from ckptview.core.inspect.grouping import group_tree
from ckptview.core.read.open import open_checkpoint


def _labels(row) -> list:
    return [(child.label, child.kind, _labels(child)) if child.children else (child.label, child.kind)
            for child in row.children]


def test_float_and_tuple_keys_are_not_split_at_their_dots(tmp_path) -> None:
    path = tmp_path / "keys.pt"
    torch.save({2.5: torch.ones(2), (0.5, "a.b"): torch.ones(3), "enc.w": torch.ones(1), 7: torch.ones(1)}, path)
    ckpt = open_checkpoint(str(path))
    try:
        top = group_tree(ckpt.root)
        assert _labels(top) == [("2.5", "tensor"), ("(0.5, 'a.b')", "tensor"),
                                ("enc", "group", [("w", "tensor")]), ("7", "tensor")]
        # The contract names are unchanged: path components joined by '.'.
        assert [e.name for e in ckpt.tensors()] == ["2.5", "(0.5, 'a.b')", "enc.w", "7"]
        assert [json.loads(json.dumps(list(e.path))) for e in ckpt.tensors()] == [
            ["2.5"], ["(0.5, 'a.b')"], ["enc.w"], [7]]
        assert [r.name for r in top.walk() if r.node is not None and r.node.kind == "tensor"] == [
            "2.5", "(0.5, 'a.b')", "enc.w", "7"]
    finally:
        ckpt.close()


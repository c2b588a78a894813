"""Checkpoint.tensors(), value_entries() and sharing() against plain walks of the same tree.

The listing walks are written for 100,000-leaf trees (names grown by one key, leaves checked in place);
here they must give exactly what a straightforward walk of the tree gives, in the same order.
"""

from __future__ import annotations

import pytest
import torch

from ckptview.core import open_checkpoint
from ckptview.core.checkpoint import join_path


def plain_walk(root):
    """(path, node) of every node, depth first in file order (the reference walk)."""
    stack = [(root, ())]
    while stack:
        node, path = stack.pop()
        yield path, node
        stack.extend((c, (*path, c.key)) for c in reversed(node.children))


def mixed():
    w = torch.randn(4, 3)
    return {
        "model": {"enc.0.weight": w, "enc.0.bias": torch.zeros(3), "tied": w, "view": w[1:3]},
        "list": [torch.ones(2), 3, "x", [torch.zeros(1), None, {"deep": torch.ones(1), 7: 2.5}]],
        "tuple": (1, torch.ones(1), (2, 3)),
        5: torch.ones(2),
        "epoch": 3,
        "empty": {},
        "empty_list": [],
    }


@pytest.mark.parametrize("make", [mixed, lambda: 5, lambda: torch.ones(3), lambda: [], lambda: {"a": {}}],
                         ids=["mixed", "int-root", "tensor-root", "empty-list", "nested-empty"])
def test_walks_match_a_plain_walk(tmp_path, make) -> None:
    torch.save(make(), tmp_path / "c.pt")
    ckpt = open_checkpoint(str(tmp_path / "c.pt"))
    try:
        nodes = list(plain_walk(ckpt.root))
        want_tensors = [(join_path(p), p, n) for p, n in nodes if n.kind == "tensor" and n.tensor is not None]
        assert [(e.name, e.path, e.node) for e in ckpt.tensors()] == want_tensors
        assert all(e.info is e.node.tensor for e in ckpt.tensors())
        want_values = [(join_path(p), p, n) for p, n in nodes if n.kind == "value"
                       and all(a.kind != "value" for a in _ancestors(n))]
        assert list(ckpt.value_entries()) == want_values
        groups: dict[int, list[str]] = {}
        for name, _path, node in want_tensors:
            groups.setdefault(id(node.tensor.storage), []).append(name)
        want_sharing = {n: [m for m in names if m != n] for names in groups.values() if len(names) > 1 for n in names}
        assert ckpt.sharing() == want_sharing
    finally:
        ckpt.close()


def _ancestors(node):
    node = node.parent
    while node is not None:
        yield node
        node = node.parent


def test_mixed_file_has_what_the_walks_must_find(tmp_path) -> None:
    torch.save(mixed(), tmp_path / "c.pt")
    ckpt = open_checkpoint(str(tmp_path / "c.pt"))
    try:
        names = [e.name for e in ckpt.tensors()]
        assert names == ["model.enc.0.weight", "model.enc.0.bias", "model.tied", "model.view", "list.0",
                         "list.3.0", "list.3.2.deep", "tuple.1", "5"]
        assert sorted(ckpt.sharing()["model.tied"]) == ["model.enc.0.weight", "model.view"]
        values = [name for name, _p, _n in ckpt.value_entries()]
        assert values == ["list.1", "list.2", "list.3.1", "list.3.2.7", "tuple.0", "tuple.2.0", "tuple.2.1",
                          "epoch"]
    finally:
        ckpt.close()

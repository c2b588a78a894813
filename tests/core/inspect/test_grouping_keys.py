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



def test_an_empty_module_part_is_a_level_of_its_own(tmp_path) -> None:
    # `.x.y.w` is not `x.y.w`: grouping it under another key's `x.y` put two tensors in one module, and left
    # an empty group behind. Each group's name is its dotted prefix exactly.
    path = tmp_path / "empty_parts.pt"
    torch.save({"x.y.0.a": torch.ones(2), ".x.y.w": torch.ones(3), "a..b.c": torch.ones(4), "a..b.d": torch.ones(5)},
               path)
    ckpt = open_checkpoint(str(path))
    try:
        top = group_tree(ckpt.root)
        assert _labels(top) == [
            ("x", "group", [("y", "group", [("0", "group", [("a", "tensor")])])]),
            ("", "group", [("x", "group", [("y", "group", [("w", "tensor")])])]),
            ("a", "group", [("", "group", [("b", "group", [("c", "tensor"), ("d", "tensor")])])])]
        groups = {r.name: (r.tensors, r.numel) for r in top.walk() if r.is_group}
        assert groups == {"x": (1, 2), "x.y": (1, 2), "x.y.0": (1, 2), "": (1, 3), ".x": (1, 3), ".x.y": (1, 3),
                          "a": (2, 9), "a.": (2, 9), "a..b": (2, 9)}
        assert (top.tensors, top.numel) == (4, 14)
    finally:
        ckpt.close()


def test_totals_add_up_through_nested_containers(tmp_path) -> None:
    # Every row's totals are its subtree's: containers inside containers, groups inside both.
    path = tmp_path / "nested.pt"
    torch.save({"model": {"enc.l0.w": torch.ones(2, 3), "enc.l1.w": torch.ones(4), "head": torch.ones(5)},
                "opt": {"state": {0: {"exp_avg": torch.ones(6, dtype=torch.float64)}}}, "step": 3}, path)
    ckpt = open_checkpoint(str(path))
    try:
        top = group_tree(ckpt.root)
        for row in top.walk():
            tensors = [r for r in row.walk() if r.node is not None and r.node.kind == "tensor"]
            assert row.tensors == len(tensors), row.name
            assert row.numel == sum(r.node.tensor.numel for r in tensors), row.name
            assert row.nbytes == sum(r.node.tensor.nbytes for r in tensors), row.name
        assert (top.tensors, top.numel, top.nbytes) == (4, 21, 4 * 15 + 8 * 6)
    finally:
        ckpt.close()


def test_a_training_folders_file_names_are_one_row_each(tmp_path) -> None:
    # `model.safetensors` read as a module `model` holding `safetensors`, `optimizer.pt` as `optimizer > pt`.
    from safetensors.torch import save_file

    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    save_file({"model.embed.weight": torch.ones(4, 2)}, str(folder / "model.safetensors"))
    torch.save({"state": {0: {"step": torch.tensor(2.0), "exp_avg": torch.ones(4, 2)}},
                "param_groups": [{"lr": 0.1, "params": [0]}]}, folder / "optimizer.pt")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    ckpt = open_checkpoint(str(folder))
    try:
        assert ckpt.format == "training-folder"
        top = group_tree(ckpt.root)
        assert [r.label for r in top.children] == ["model.safetensors", "optimizer.pt", "trainer_state.json"]
        model = top.children[0]
        assert [r.label for r in model.children] == ["model"]  # inside a file, keys are module paths again
        assert [e.name for e in ckpt.tensors()][0] == "model.safetensors.model.embed.weight"
    finally:
        ckpt.close()

"""The logical tensor of a quantized weight in the tree: one row with its parts beneath it, totals counted once,
module figures over the real values, the parts' own figures one click away."""

from __future__ import annotations

import numpy as np
import torch

from ckptview.core.figures.stats import tensor_stats
from ckptview.core.inspect.grouping import ModuleGroup, find_row, group_tree
from ckptview.core.inspect.modules import module_figures
from ckptview.core.read import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.quantized import fp8_quantizer, write_folder


def _folder(tmp_path):
    torch.manual_seed(0)
    w = torch.randn(256, 256) * 0.02
    codes, scale = fp8_quantizer([128, 128])._quantize_one("m.lin.weight", w).values()
    # a part sorted before the codes (`a_scale_inv` < `weight`) must still sit beneath its weight
    tensors = {"m.lin.weight": codes, "m.lin.weight_scale_inv": scale, "m.lin.bias": torch.zeros(256),
               "m.a": codes.clone(), "m.a_scale_inv": scale.clone()}
    write_folder(tmp_path, tensors, {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})
    return open_checkpoint(str(tmp_path))


def test_parts_sit_beneath_their_weight_and_count_once(tmp_path):
    ckpt = _folder(tmp_path)
    top = group_tree(ckpt.root)
    weight = find_row(top, "m.lin.weight")
    assert weight is not None and weight.node.tensor.quant is not None
    assert [(r.label, r.node.tensor.dtype) for r in weight.children] == [
        ("weight", "float8_e4m3fn"), ("weight_scale_inv", "float32")]
    module = find_row(top, "m")
    assert module.tensors == 3  # lin.weight, lin.bias, a: their parts are not tensors of their own
    assert module.numel == 256 * 256 * 2 + 256
    assert module.nbytes == 2 * (256 * 256 + 4 * 4) + 256 * 4  # the bytes the file holds
    a = find_row(top, "m.a")
    assert [r.name for r in a.children] == ["m.a", "m.a_scale_inv"]
    group = ModuleGroup.of_row(module)
    assert sorted(n.tensor.dtype for n in group.nodes) == ["float32", "float32", "float32"]
    ckpt.close()


def test_module_figures_are_over_the_real_values(tmp_path):
    ckpt = _folder(tmp_path)
    top = group_tree(ckpt.root)
    found = {m.path: m for m in module_figures(top, tensor_stats)}
    lin = found["m.lin"]
    assert lin.tensors == 2
    values = np.concatenate([read_values(ckpt.tensor("m.lin.weight")).reshape(-1), np.zeros(256, np.float32)])
    assert lin.stats.numel == values.size and abs(lin.stats.max - values.max()) == 0
    assert lin.stats.max < 1  # not the codes (up to 448)
    ckpt.close()


def test_a_part_keeps_its_own_figures(tmp_path):
    ckpt = _folder(tmp_path)
    codes = next(e.info for e in ckpt.tensors(with_parts=True) if e.info.dtype == "float8_e4m3fn")
    assert codes.part_of == "m.a" or codes.part_of == "m.lin.weight"
    assert tensor_stats(codes).max == 448.0  # the raw codes, as stored
    ckpt.close()


def test_listing_a_plain_checkpoint_is_unchanged(tmp_path):
    write_folder(tmp_path, {"a.weight": torch.ones(3, 3), "a.qweight": torch.ones(2, dtype=torch.int32)}, {})
    ckpt = open_checkpoint(str(tmp_path))
    assert [e.name for e in ckpt.tensors()] == [e.name for e in ckpt.tensors(with_parts=True)]
    assert sorted(e.name for e in ckpt.tensors()) == ["a.qweight", "a.weight"]
    assert all(e.info.quant is None and e.info.part_of is None for e in ckpt.tensors())
    ckpt.close()

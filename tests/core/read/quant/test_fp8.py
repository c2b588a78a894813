"""FP8 weights (per-tensor, per-channel, 128x128 blocks; e4m3 and e5m2; float32, bf16 and E8M0 scales), written
with transformers' own `Fp8Quantize` and held bit for bit to its own dequantization (`Fp8Dequantize`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ckptview.core.figures.heatmap import heatmap, iter_tensor_heatmap
from ckptview.core.figures.histogram import histogram_of_array, sample_positions, tensor_sample_histogram
from ckptview.core.figures.stats import tensor_stats
from ckptview.core.inspect.summary import size_facts
from ckptview.core.jobs import drain
from ckptview.core.read import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_region, read_values
from tests.support.quantized import fp8_llama, fp8_quantizer, fp8_reference, model_parameters, write_folder

W = "model.layers.0.mlp.down_proj.weight"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fp8")
    base, config, reference = fp8_llama(folder)
    ckpt = open_checkpoint(str(folder))
    yield folder, base, config, reference, ckpt
    ckpt.close()


def test_every_weight_equals_transformers_dequantization(llama):
    _folder, _base, _config, reference, ckpt = llama
    assert len(reference) == 7  # q, k, v, o, gate, up, down
    for name, ref in reference.items():
        info = ckpt.tensor(name)
        assert info.quant is not None and info.quant.scheme == "fp8", name
        assert info.shape == tuple(ref.shape) and info.dtype == "float32"
        values = read_values(info)
        assert values.dtype == np.float32
        assert np.array_equal(values.view(np.uint32), ref.numpy().view(np.uint32)), name  # bit for bit


def test_the_logical_tensor_names_its_parts(llama):
    _folder, _base, _config, _reference, ckpt = llama
    info = ckpt.tensor(W)
    quant = info.quant
    assert quant.label == "fp8 e4m3, block 128x128"
    assert quant.parts == (("codes", W), ("scale_inv", W + "_scale_inv"))
    assert quant.bits == 8 and quant.dtype == "bfloat16"
    assert quant.stored_bytes == 256 * 512 + 2 * 4 * 4
    assert quant.bits_per_weight == pytest.approx(8 * quant.stored_bytes / (256 * 512), abs=1e-4)
    assert info.nbytes == quant.stored_bytes  # what the file holds for it
    listed = [(e.name, e.info.dtype, e.info.part_of) for e in ckpt.tensors(with_parts=True) if e.name.startswith(W)]
    assert listed == [(W, "float32", None), (W, "float8_e4m3fn", W), (W + "_scale_inv", "float32", W)]
    assert not any(e.info.part_of for e in ckpt.tensors())  # the figures' listing: logical tensors only
    assert [e.name for e in ckpt.parts_of(info)] == [W, W + "_scale_inv"]


def test_parameters_are_the_models(llama):
    _folder, _base, config, _reference, ckpt = llama
    facts = size_facts(ckpt)
    assert facts.parameters == model_parameters(config)
    by_dtype = dict(facts.bytes_by_dtype)
    assert "float32" not in by_dtype or by_dtype["float32"] < 1024 * 1024  # only the scales are float32
    assert by_dtype["float8_e4m3fn"] > 0 and by_dtype["bfloat16"] > 0


def test_figures_read_the_real_values(llama):
    _folder, base, _config, reference, ckpt = llama
    info = ckpt.tensor(W)
    ref = reference[W].numpy().astype(np.float64)
    stats = tensor_stats(info, chunk_elems=1000)  # many blocks, each a few rows
    assert stats.numel == ref.size
    assert stats.mean == pytest.approx(ref.mean(), rel=1e-9, abs=1e-12)
    assert stats.std == pytest.approx(ref.std(ddof=1), rel=1e-9)  # as torch.std
    assert stats.min == ref.min() and stats.max == ref.max()
    assert abs(stats.std - float(base[W].float().std())) < 0.002  # the weight's spread, not the codes' (~100)
    chunks = np.concatenate(list(iter_chunks(info, chunk_elems=777)))
    assert np.array_equal(chunks, ref.astype(np.float32).reshape(-1))
    assert np.array_equal(read_region(info, (slice(3, 200, 7), slice(10, 300, 3))), ref.astype(np.float32)[3:200:7, 10:300:3])
    assert np.array_equal(read_region(info, (slice(200, 3, -5), 17)), ref.astype(np.float32)[200:3:-5, 17])
    assert np.array_equal(read_region(info, (255,)), ref.astype(np.float32)[255])
    hist = tensor_sample_histogram(info, bins=10, max_count=1000)  # the sampled runs of the real values
    flat = sample_positions(ref.size, 1000, seed=0)
    assert np.array_equal(hist.counts, histogram_of_array(ref.astype(np.float32).reshape(-1)[flat], 10).counts)
    shown = drain(iter_tensor_heatmap(info, max_shape=(16, 16)))
    assert np.array_equal(shown.image, heatmap(ref.astype(np.float32), max_shape=(16, 16)).image)


def _single(tmp_path, codes, scale, scale_name="weight_scale_inv", method="fp8", block=None, name="lin.weight"):
    stem = name[: -len("weight")] if name.endswith("weight") else name + "_"
    tensors = {name: codes, (stem + scale_name if name.endswith("weight") else name + scale_name[6:]): scale}
    qc = {"quant_method": method}
    if block is not None:
        qc["weight_block_size"] = block
    write_folder(tmp_path, tensors, {"quantization_config": qc})
    return open_checkpoint(str(tmp_path))


@pytest.mark.parametrize("case", ["per-tensor", "per-channel", "bf16 block scales", "e5m2", "experts",
                                  "fp16 per-channel", "e8m0 block scales"])
def test_scale_layouts_equal_transformers(tmp_path, case):
    torch.manual_seed(1)
    w = torch.randn(256, 384) * 0.02
    if case == "per-tensor":
        codes, scale = fp8_quantizer(None)._quantize_one("lin.weight", w).values()
        scale = scale.reshape(1)
    elif case in ("per-channel", "fp16 per-channel"):
        amax = w.abs().amax(dim=1, keepdim=True)
        scale = amax / 448.0
        codes = (w / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        scale = scale.to(torch.float16) if case.startswith("fp16") else scale
    elif case == "e5m2":
        codes, scale = fp8_quantizer([128, 128])._quantize_one("lin.weight", w).values()
        codes = (codes.float()).to(torch.float8_e5m2)
    elif case == "experts":
        w = torch.randn(3, 256, 384) * 0.02
        codes, scale = fp8_quantizer([128, 128])._quantize_one("lin.weight", w).values()
    elif case == "e8m0 block scales":
        codes, scale = fp8_quantizer([128, 128], scale_fmt="ue8m0")._quantize_one("lin.weight", w).values()
        assert scale.dtype == torch.float8_e8m0fnu
    else:
        codes, scale = fp8_quantizer([128, 128])._quantize_one("lin.weight", w).values()
        scale = scale.to(torch.bfloat16)
    ckpt = _single(tmp_path, codes, scale)
    info = ckpt.tensor("lin.weight")
    ref = fp8_reference(codes, scale).float().numpy()
    assert info.quant is not None and info.quant.problem is None, info.quant
    assert np.array_equal(read_values(info).view(np.uint32), ref.view(np.uint32)), case
    expected_kind = {"per-tensor": "tensor", "per-channel": "channel", "fp16 per-channel": "channel"}.get(case, "block")
    assert info.quant.facts["granularity"] == expected_kind
    ckpt.close()


def test_partial_blocks_follow_the_last_block_rule(tmp_path):
    """200x300 in 128x128 blocks: the last block of each row and column is partial (DeepSeek-V3's shapes),
    as transformers' own `_dequantize_fp8_weight` reads it."""
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight

    torch.manual_seed(2)
    w = torch.randn(200, 300) * 0.02
    scale = torch.rand(2, 3) * 1e-4 + 1e-5
    codes = (w / scale.repeat_interleave(128, 0)[:200].repeat_interleave(128, 1)[:, :300]).to(torch.float8_e4m3fn)
    ckpt = _single(tmp_path, codes, scale, block=[128, 128])
    info = ckpt.tensor("lin.weight")
    ref = _dequantize_fp8_weight(codes, scale, [128, 128], torch.float32).numpy()
    assert np.array_equal(read_values(info), ref)
    ckpt.close()


def test_a_missing_scale_is_one_line_and_the_codes_stay_listed(tmp_path):
    codes = (torch.randn(64, 64) * 10).to(torch.float8_e4m3fn)
    write_folder(tmp_path, {"lin.weight": codes}, {"quantization_config": {"quant_method": "fp8"}})
    ckpt = open_checkpoint(str(tmp_path))
    info = ckpt.tensor("lin.weight")
    assert info.quant is not None
    assert info.broken == "fp8 weight 'lin.weight' has no scale ('lin.weight_scale_inv' is missing)"
    assert [(e.name, e.info.dtype) for e in ckpt.tensors(with_parts=True)] == [
        ("lin.weight", "float32"), ("lin.weight", "float8_e4m3fn")]
    with pytest.raises(Exception, match="has no scale"):
        read_values(info)
    ckpt.close()


def test_a_scale_of_the_wrong_shape_is_one_line(tmp_path):
    codes = (torch.randn(256, 512)).to(torch.float8_e4m3fn)
    ckpt = _single(tmp_path, codes, torch.ones(2, 3), block=[128, 128])
    info = ckpt.tensor("lin.weight")
    assert info.broken == ("scale 'lin.weight_scale_inv' is 2x3; blocks of 128x128 over 256x512 need 2x4")
    assert [e.name for e in ckpt.tensors(with_parts=True)] == ["lin.weight", "lin.weight", "lin.weight_scale_inv"]
    ckpt.close()


def test_an_fp8_tensor_without_scale_or_config_is_itself(tmp_path):
    codes = (torch.randn(8, 8)).to(torch.float8_e4m3fn)
    write_folder(tmp_path, {"t": codes}, {})
    ckpt = open_checkpoint(str(tmp_path))
    assert ckpt.tensor("t").quant is None and ckpt.tensor("t").dtype == "float8_e4m3fn"
    ckpt.close()


def test_info_json_gains_the_fields(llama):
    from ckptview.commands.info import info_dict

    folder, _base, config, _reference, ckpt = llama
    data = json.loads(json.dumps(info_dict(ckpt)))
    rows = [t for t in data["tensors"] if t["name"].startswith(W)]
    logical, codes, scale = rows
    assert logical["shape"] == [256, 512] and logical["dtype"] == "float32" and "part_of" not in logical
    q = logical["quantization"]
    assert q["scheme"] == "fp8" and q["bits"] == 8 and q["block"] == [128, 128] and q["format"] == "e4m3"
    assert q["parts"] == [W, W + "_scale_inv"] and q["label"] == "fp8 e4m3, block 128x128"
    assert codes["part_of"] == W and codes["dtype"] == "float8_e4m3fn" and "quantization" not in codes
    assert scale["part_of"] == W and scale["shape"] == [2, 4]
    assert data["parameters"] == model_parameters(config)


def test_the_command_line_lists_weights_and_parts(llama):
    """`info --json` as the command writes it (the streamed text, not only the dict), and the table."""
    import subprocess
    import sys

    folder, _base, config, _reference, _ckpt = llama
    proc = subprocess.run([sys.executable, "-m", "ckptview", "info", str(folder), "--json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    rows = [t for t in data["tensors"] if t["name"] == W]
    assert [("quantization" in t, t.get("part_of")) for t in rows] == [(True, None), (False, W)]
    assert data["parameters"] == model_parameters(config)
    table = subprocess.run([sys.executable, "-m", "ckptview", "info", str(folder)], capture_output=True, text=True,
                           timeout=120).stdout
    assert "quantized: 7 weights (fp8 e4m3, block 128x128)" in table and "bytes per parameter" in table
    assert "  model.layers.0.mlp.down_proj.weight_scale_inv" in table or "(part)" in table

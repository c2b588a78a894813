"""ckptview.core.compare.diff / align and `ckptview diff`: every figure checked against torch on the same tensors."""

from __future__ import annotations

import json
import math
from collections import namedtuple

import numpy as np
import pytest
import torch

from ckptview.cli import main
from ckptview.core import open_checkpoint
from ckptview.core.compare.align import (
    align,
    common_wrapper_prefix,
    match_prefixes,
    parse_mapping,
    strip_prefixes,
)
from ckptview.core.compare.diff import compare_arrays, diff_checkpoints, iter_diff, paired_chunks
from ckptview.core.errors import Cancelled
from ckptview.core.jobs import CancelToken


def make_model() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 8))
    return {k: v.clone() for k, v in model.state_dict().items()}


def torch_figures(ta: torch.Tensor, tb: torch.Tensor) -> dict[str, float | None]:
    """The documented figures, computed with torch in float64 (complex128)."""
    wide = torch.complex128 if ta.is_complex() or tb.is_complex() else torch.float64
    a, b = ta.to(wide).reshape(-1), tb.to(wide).reshape(-1)
    fin = torch.isfinite(a) & torch.isfinite(b)
    both_nan = torch.isnan(a) & torch.isnan(b)
    changed = int(((a != b) & ~both_nan).sum())
    af, bf = a[fin], b[fin]
    d = (bf - af).abs()
    na, nb = float(torch.linalg.vector_norm(af)), float(torch.linalg.vector_norm(bf))
    if changed == 0:
        rel, cos = 0.0, 1.0
    else:
        rel = float(torch.linalg.vector_norm(bf - af)) / na
        cos = float(torch.sum(af.conj() * bf).real) / (na * nb)
    return {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()), "rel_l2": rel,
            "cosine": cos, "frac_changed": changed / a.numel()}


def assert_figures(row: object, ta: torch.Tensor, tb: torch.Tensor) -> None:
    expected = torch_figures(ta, tb)
    for key, value in expected.items():
        got = getattr(row, key)
        assert got == pytest.approx(value, rel=1e-9, abs=1e-12), (row.name, key, got, value)


@pytest.fixture
def model_pair(tmp_path):
    sd = make_model()
    a = tmp_path / "a.pth"
    torch.save(sd, a)
    gen = torch.Generator().manual_seed(1)
    sd_b = {}
    for k, v in sd.items():
        if v.is_floating_point() and "weight" in k:
            v = v + 0.01 * torch.randn(v.shape, generator=gen)
        sd_b[k] = v.clone()
    sd_b["0.weight"][0, :3] = torch.tensor([float("nan"), float("inf"), 5.0])  # non-finite rules
    sd_b["0.bias"][2] = float("nan")
    b = tmp_path / "b.pth"
    torch.save(sd_b, b)
    return a, b, sd, sd_b


def test_perturbed_copy_figures_match_torch(model_pair):
    a, b, sd, sd_b = model_pair
    ca, cb = open_checkpoint(a), open_checkpoint(b)
    # A tiny chunk size forces many chunks per tensor and an uneven last one.
    result = diff_checkpoints(ca, cb, chunk_elems=37)
    rows = {t.name: t for t in result.tensors}
    assert list(rows) == list(sd)  # model order
    for name, row in rows.items():
        assert_figures(row, sd[name], sd_b[name])
    assert rows["0.weight"].status == "changed"
    assert rows["0.weight"].nonfinite_changed == 2
    assert rows["0.bias"].status == "changed" and rows["0.bias"].frac_changed == pytest.approx(1 / 32)
    assert rows["1.running_mean"].status == "identical"
    assert rows["1.num_batches_tracked"].status == "identical"  # int64 path
    assert result.summary() == {"changed": 4, "identical": 5}
    assert not result.identical
    # Overall change over the learnable parameters (torch's named_parameters of make_model's model: the
    # BatchNorm buffers apart), finite positions only (like the per-tensor figures).
    torch.manual_seed(0)
    params = [name for name, _ in torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32),
                                                      torch.nn.ReLU(), torch.nn.Linear(32, 8)).named_parameters()]
    assert [t.name for t in result.parameters] == params
    dd = aa = 0.0
    for name in params:
        x, y = sd[name].double().reshape(-1), sd_b[name].double().reshape(-1)
        fin = torch.isfinite(x) & torch.isfinite(y)
        dd += float(((y - x)[fin] ** 2).sum())
        aa += float((x[fin] ** 2).sum())
    assert result.overall_rel_l2() == pytest.approx(math.sqrt(dd / aa), rel=1e-9)


def test_ddp_prefixed_copy_is_identical(tmp_path):
    sd = make_model()
    torch.save(sd, tmp_path / "a.pth")
    torch.save({"module." + k: v for k, v in sd.items()}, tmp_path / "b.pth")
    result = diff_checkpoints(open_checkpoint(tmp_path / "a.pth"), open_checkpoint(tmp_path / "b.pth"))
    assert (result.alignment.strip_a, result.alignment.strip_b) == ("", "module.")
    assert result.identical and result.summary() == {"identical": len(sd)}
    assert [t.name_b for t in result.tensors] == ["module." + k for k in sd]


def test_added_removed_layer_and_changed_shape(tmp_path):
    sd = make_model()
    torch.save(sd, tmp_path / "a.pth")
    sd_b = dict(sd)
    del sd_b["3.bias"]  # removed
    sd_b["4.weight"] = torch.ones(2, 8)  # added, right after 3.weight in B's order
    sd_b["0.weight"] = torch.zeros(31, 16)  # changed shape
    torch.save(sd_b, tmp_path / "b.pth")
    result = diff_checkpoints(open_checkpoint(tmp_path / "a.pth"), open_checkpoint(tmp_path / "b.pth"))
    rows = {t.name: t for t in result.tensors}
    assert rows["3.bias"].status == "only_a" and rows["3.bias"].shape_b is None
    assert rows["4.weight"].status == "only_b" and rows["4.weight"].shape_b == [2, 8]
    shape = rows["0.weight"]
    assert shape.status == "shape_mismatch" and (shape.shape_a, shape.shape_b) == ([32, 16], [31, 16])
    assert all(getattr(shape, k) is None for k in ("rel_l2", "cosine", "max_abs_diff", "frac_changed"))
    names = [t.name for t in result.tensors]
    assert names.index("4.weight") == names.index("3.weight") + 1
    assert result.summary() == {"shape_mismatch": 1, "identical": 7, "only_a": 1, "only_b": 1}


def test_bf16_copy_of_fp32(tmp_path):
    sd = make_model()
    torch.save(sd, tmp_path / "a.pth")
    sd_b = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in sd.items()}
    torch.save(sd_b, tmp_path / "b.pth")
    result = diff_checkpoints(open_checkpoint(tmp_path / "a.pth"), open_checkpoint(tmp_path / "b.pth"),
                              chunk_elems=100)
    for row in result.tensors:
        if row.name.endswith("num_batches_tracked"):
            assert row.status == "identical"
            continue
        assert row.status == "dtype_mismatch" and (row.dtype_a, row.dtype_b) == ("float32", "bfloat16")
        assert_figures(row, sd[row.name], sd_b[row.name])
    assert 0 < result.tensors[0].rel_l2 < 0.01  # bf16 keeps ~3 significant digits


def test_pth_against_safetensors_and_noncontiguous(tmp_path):
    from safetensors.torch import save_file

    sd = make_model()
    sd["t"] = torch.arange(12.0).reshape(3, 4)
    save_file({k: v.contiguous() for k, v in sd.items()}, tmp_path / "b.safetensors")
    sd_a = dict(sd)
    sd_a["t"] = torch.arange(12.0).reshape(4, 3).t()  # a transposed (non-contiguous) view
    torch.save(sd_a, tmp_path / "a.pth")
    result = diff_checkpoints(open_checkpoint(tmp_path / "a.pth"), open_checkpoint(tmp_path / "b.safetensors"),
                              chunk_elems=5)
    rows = {t.name: t for t in result.tensors}
    assert all(rows[k].status == "identical" for k in sd if k != "t")
    assert_figures(rows["t"], sd_a["t"], sd["t"])
    assert rows["t"].status == "changed"


def test_training_checkpoint_against_state_dict(tmp_path):
    sd = make_model()
    torch.save(sd, tmp_path / "plain.pth")
    lightning = {"state_dict": {"model." + k: v for k, v in sd.items()}, "epoch": 3,
                 "optimizer_states": [{"state": {0: {"exp_avg": torch.zeros(4)}}}]}
    torch.save(lightning, tmp_path / "l.ckpt")
    training = {"model_state_dict": sd, "optimizer_state_dict": {"state": {0: {"exp_avg": torch.ones(4)}}}}
    torch.save(training, tmp_path / "t.pth")
    plain, light, train = (open_checkpoint(tmp_path / n) for n in ("plain.pth", "l.ckpt", "t.pth"))
    r1 = diff_checkpoints(light, plain)
    assert (r1.alignment.strip_a, r1.alignment.strip_b) == ("state_dict.model.", "")
    assert r1.identical and r1.alignment.not_compared_a == ["optimizer_states.0.state.0.exp_avg"]
    # Both sides have tensors outside the model weights: those are compared by full name too.
    r2 = diff_checkpoints(train, light)
    assert r2.summary() == {"identical": len(sd)} and r2.identical  # the headline is about the weights
    assert r2.summary(r2.other) == {"only_a": 1, "only_b": 1}
    r3 = diff_checkpoints(train, train)
    extra = [t for t in r3.tensors if t.extra]
    assert [t.name for t in extra] == ["optimizer_state_dict.state.0.exp_avg"] and r3.identical


Entry = namedtuple("Entry", "name path")


def entries(*names: str) -> list[Entry]:
    return [Entry(n, (n,)) for n in names]


def test_align_prefix_rules():
    # HF: a causal-LM head file against its base model; only the matching part is stripped.
    al = align(entries("model.layers.0.w", "model.norm.w", "lm_head.weight"), entries("layers.0.w", "norm.w"))
    assert (al.strip_a, al.strip_b) == ("model.", "")
    assert [(p.key, p.a is not None, p.b is not None) for p in al.pairs] == [
        ("layers.0.w", True, True), ("norm.w", True, True), ("lm_head.weight", True, False)]
    # torch.compile of a DDP model against a plain one.
    al = align(entries("_orig_mod.module.x", "_orig_mod.module.y"), entries("x", "y"))
    assert al.strip_a == "_orig_mod.module." and all(p.a and p.b for p in al.pairs)
    # Both sides wrapped alike: nothing needs stripping.
    al = align(entries("module.x"), entries("module.x"))
    assert (al.strip_a, al.strip_b) == ("", "")
    # A stripped prefix must never merge two names.
    assert match_prefixes(["model.x", "x"], ["x"])[:2] == ("", "")
    # Manual mapping after stripping.
    al = align(entries("module.encoder.w", "module.head.w"), entries("backbone.w", "head.w"),
               mapping=parse_mapping(["encoder.=backbone."]))
    assert al.strip_a == "module." and all(p.a and p.b for p in al.pairs)
    with pytest.raises(ValueError, match="A_PREFIX=B_PREFIX"):
        parse_mapping(["nonsense"])


def test_public_strip_helpers():
    assert common_wrapper_prefix(["module.a.b", "module.c"]) == "module."
    assert common_wrapper_prefix(["module._orig_mod.a", "module._orig_mod.b"]) == "module._orig_mod."
    assert common_wrapper_prefix(["module.a", "b"]) == ""
    stripped, prefix = strip_prefixes({"_orig_mod.a": 1, "_orig_mod.b": 2})
    assert stripped == {"a": 1, "b": 2} and prefix == "_orig_mod."
    assert strip_prefixes({"model.a": 1, "a": 2}, "model.") == ({"model.a": 1, "a": 2}, "")


def test_nan_rules_and_complex_in_memory():
    a = np.array([np.nan, np.inf, -np.inf, 1.0, 2.0, np.nan], np.float32)
    b = np.array([np.nan, np.inf, np.inf, 1.0, 3.0, 0.0], np.float32)
    s = compare_arrays(a, b)
    assert (s.changed, s.nonfinite_changed, s.finite) == (3, 2, 2)
    figures = s.figures()
    assert figures["max_abs_diff"] == 1.0 and figures["mean_abs_diff"] == 0.5
    assert figures["frac_changed"] == pytest.approx(3 / 6)
    za = np.array([1 + 2j, 3 - 1j, 0.5j], np.complex64)
    zb = np.array([1 + 2.5j, 3 - 1j, 0.25j], np.complex64)
    row = type("Row", (), compare_arrays(za, zb).figures())
    row.name = "z"
    assert_figures(row, torch.from_numpy(za), torch.from_numpy(zb))
    # -0.0 and 0.0 are equal values even though their bytes differ.
    assert compare_arrays(np.array([0.0, 1.0]), np.array([-0.0, 1.0])).changed == 0


def test_paired_chunks_recuts_unequal_streams():
    xs = [np.arange(0, 3), np.arange(3, 10)]
    ys = [np.arange(0, 5), np.arange(5, 6), np.arange(6, 10)]
    pairs = list(paired_chunks(xs, ys))
    assert all(np.array_equal(x, y) for x, y in pairs)
    assert sum(x.size for x, _ in pairs) == 10


def test_progress_and_cancel(model_pair):
    a, b, _, _ = model_pair
    ca, cb = open_checkpoint(a), open_checkpoint(b)
    steps = list(iter_diff(ca, cb, chunk_elems=64))
    assert steps[-1].done == steps[-1].total > 0
    assert {s.index for s in steps if s.index >= 0} == set(range(9))
    token = CancelToken()
    gen = iter_diff(ca, cb, token=token, chunk_elems=64)
    next(gen)
    token.cancel()
    with pytest.raises(Cancelled):
        for _ in gen:
            pass


def test_cli_json_and_exit_codes(model_pair, tmp_path, capsys):
    a, b, sd, _ = model_pair
    assert main(["diff", str(a), str(b), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"a", "b", "strip", "summary", "tensors"}
    assert data["strip"] == {"a": "", "b": ""}
    assert data["summary"] == {"changed": 4, "dtype_mismatch": 0, "shape_mismatch": 0, "only_a": 0, "only_b": 0,
                               "error": 0, "identical": 5}
    row = data["tensors"][0]
    assert set(row) >= {"name", "status", "shape_a", "shape_b", "dtype_a", "dtype_b", "max_abs_diff",
                        "mean_abs_diff", "rel_l2", "cosine", "frac_changed"}
    assert row["name"] == "0.weight" and row["shape_a"] == [32, 16]
    assert main(["diff", str(a), str(a)]) == 0
    out = capsys.readouterr().out
    assert "9 identical" in out
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert out.index("0.weight") < out.index("4 changed")  # changed rows listed, then the summary line
    # Shape mismatch: figures are null in JSON.
    torch.save({"0.weight": torch.zeros(3)}, tmp_path / "c.pth")
    assert main(["diff", str(a), str(tmp_path / "c.pth"), "--json", "--strip-b", ""]) == 1
    data = json.loads(capsys.readouterr().out)
    shape = next(t for t in data["tensors"] if t["name"] == "0.weight")
    assert shape["status"] == "shape_mismatch" and shape["rel_l2"] is None
    (tmp_path / "junk.pth").write_text("hello")
    assert main(["diff", str(a), str(tmp_path / "junk.pth")]) == 2
    assert "not a checkpoint" in capsys.readouterr().err
    assert main(["diff", str(a), str(a), "--map", "oops"]) == 2

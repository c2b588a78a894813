"""What quantization cost: `diff base/ quantized/` per weight (relative error, SQNR, max |error|, cosine) and over
the model, worst first, equal to a float64 computation on the base and the library's own dequantized weights."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from ckptview.core.compare.diff import SideView, diff_checkpoints
from ckptview.core.read import open_checkpoint
from tests.support.quantized import fp8_llama, packed_llama, write_folder


def _reference(base: dict[str, torch.Tensor], dequantized: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    out = {}
    for name, q in dequantized.items():
        w, qd = base[name].double().reshape(-1), q.double().reshape(-1)
        err = qd - w
        out[name] = {"rel_error": float(err.norm() / w.norm()), "sqnr_db": float(10 * math.log10(w.dot(w) / err.dot(err))),
                     "max_abs_error": float(err.abs().max()), "cosine": float(w.dot(qd) / (w.norm() * qd.norm()))}
    return out


def _overall(base: dict[str, torch.Tensor], dequantized: dict[str, torch.Tensor]) -> dict[str, float]:
    ww = sum(float(base[n].double().pow(2).sum()) for n in dequantized)
    ee = sum(float((q.double() - base[n].double()).pow(2).sum()) for n, q in dequantized.items())
    return {"rel_error": math.sqrt(ee / ww), "sqnr_db": 10 * math.log10(ww / ee)}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("cost")
    base, config, fp8_ref = fp8_llama(root / "fp8")
    write_folder(root / "base", base, {**config.to_dict(), "dtype": "bfloat16"})
    gbase, gconfig, gptq_ref = packed_llama(root / "gptq", "gptq", group_size=32, act_order=True)
    write_folder(root / "gbase", gbase, {**gconfig.to_dict(), "dtype": "float16"})
    return root, (base, fp8_ref), (gbase, gptq_ref)


@pytest.mark.parametrize("which", ["fp8", "gptq"])
def test_each_weight_and_the_model_equal_float64(folders, which):
    root, fp8, gptq = folders
    (base, dequantized), base_dir = (fp8, "base") if which == "fp8" else (gptq, "gbase")
    a, b = open_checkpoint(str(root / base_dir)), open_checkpoint(str(root / which))
    result = diff_checkpoints(a, b)
    data = json.loads(json.dumps(result.to_json()))
    expected = _reference(base, dequantized)
    cost = data["quantization"]
    assert cost["tensors"] == cost["compared"] == len(expected)
    for row in cost["worst"]:
        want = expected[row["name"]]
        for key in ("rel_error", "sqnr_db", "max_abs_error", "cosine"):
            assert row[key] == pytest.approx(want[key], rel=1e-9, abs=1e-15), (row["name"], key)
    errors = [r["rel_error"] for r in cost["worst"]]
    assert errors == sorted(errors, reverse=True)  # worst first
    overall = _overall(base, dequantized)
    assert cost["rel_error"] == pytest.approx(overall["rel_error"], rel=1e-9)
    assert cost["sqnr_db"] == pytest.approx(overall["sqnr_db"], rel=1e-9)
    rows = {t["name"]: t for t in data["tensors"]}
    name = next(iter(expected))
    assert rows[name]["quantization"]["scheme"] == which and rows[name]["quantization"]["side"] == "b"
    assert rows[name]["sqnr_db"] == pytest.approx(expected[name]["sqnr_db"], rel=1e-9)
    assert rows[name]["rel_l2"] == pytest.approx(expected[name]["rel_error"], rel=1e-9)
    assert "quantization" not in rows["model.norm.weight"]  # not quantized: compared as ever, identical
    assert rows["model.norm.weight"]["status"] == "identical"
    a.close()
    b.close()


def test_the_command_line_says_what_it_cost(folders):
    root = folders[0]
    proc = subprocess.run([sys.executable, "-m", "ckptview", "diff", str(root / "base"), str(root / "fp8")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "What quantization cost (fp8 e4m3, block 128x128): 7 quantized weights compared, relative error" in proc.stdout
    assert "worst first" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "ckptview", "diff", str(root / "base"), str(root / "fp8"), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert json.loads(proc.stdout)["quantization"]["compared"] == 7


def test_a_side_view_maps_names_and_values(folders):
    """The hook a format with names and layouts of its own plugs in (GGUF: its names, its q/k rows)."""
    root = folders[0]
    a, b = open_checkpoint(str(root / "base")), open_checkpoint(str(root / "fp8"))
    renamed = SideView(rename=lambda name: None if name == "model.norm.weight" else "x." + name)
    result = diff_checkpoints(a, b, mapping=[("", "x.")], views=(None, renamed))
    assert {t.name_a for t in result.weights if t.status == "only_a"} == {"model.norm.weight"}
    assert result.quantization_cost()["compared"] == 7
    a.close()
    b.close()

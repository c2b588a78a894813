"""Buffers fed by a file stay bounded: warnings per checkpoint, nesting of index files."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from ckptview.core.checkpoint import MAX_WARNINGS, BoundedWarnings
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.open import open_checkpoint


def test_bounded_warnings_keep_the_first_and_count_the_rest():
    w = BoundedWarnings()
    for i in range(1000):
        w.append(f"w{i}")
    assert len(w) == MAX_WARNINGS + 1 and w[0] == "w0" and w[MAX_WARNINGS - 1] == f"w{MAX_WARNINGS - 1}"
    assert w[-1] == f"... and {1000 - MAX_WARNINGS} more warnings"
    w.insert(0, "first")  # a reader's leading summary still leads; the last kept one is counted instead
    assert w[0] == "first" and len(w) == MAX_WARNINGS + 1 and w[-1].startswith("... and 901 more")
    w += ["x", "y"]
    assert w[-1] == "... and 903 more warnings"


def test_checkpoint_warnings_are_bounded_whatever_a_reader_assigns(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(2)}, path)
    ckpt = open_checkpoint(path)
    ckpt.warnings = [f"w{i}" for i in range(5000)]
    assert len(ckpt.warnings) == MAX_WARNINGS + 1 and ckpt.warnings[-1] == "... and 4900 more warnings"
    ckpt.warnings.extend(["a"] * 10)
    assert len(ckpt.warnings) == MAX_WARNINGS + 1


def test_index_with_a_million_missing_entries_keeps_few_warnings(tmp_path, monkeypatch):
    from ckptview.core.read.formats import hf_sharded

    # More names than its one small shard can hold are refused before parsing (test_index_bounds.py);
    # with that floor raised, the names that are parsed and missing still give few warnings.
    monkeypatch.setattr(hf_sharded, "MIN_INDEX_ENTRIES", 1_000_000)
    save_file({"real": torch.ones(3)}, str(tmp_path / "model-00001-of-00001.safetensors"))
    weight_map = {f"layer.{i}.weight": "model-00001-of-00001.safetensors" for i in range(200_000)}
    weight_map["real"] = "model-00001-of-00001.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    ckpt = open_checkpoint(tmp_path)
    assert [e.name for e in ckpt.tensors()] == ["real"]
    assert len(ckpt.warnings) <= MAX_WARNINGS + 2
    assert ckpt.warnings[0].startswith("tensor 'layer.0.weight' is listed in the index but missing")
    assert ckpt.warnings[-1] == f"... and {200_000 - MAX_WARNINGS} more warnings"


def _index(path, shard: str) -> None:
    path.write_text(json.dumps({"weight_map": {"w": shard}}))


@pytest.mark.parametrize("layout", ["self", "cycle", "chain"])
def test_index_naming_an_index_is_one_line_without_recursion(tmp_path, layout):
    a = tmp_path / "a.index.json"
    if layout == "self":
        _index(a, "a.index.json")
    elif layout == "cycle":
        _index(a, "b.index.json")
        _index(tmp_path / "b.index.json", "a.index.json")
    else:
        save_file({"w": torch.ones(3)}, str(tmp_path / "real.safetensors"))
        _index(a, "b.index.json")
        _index(tmp_path / "b.index.json", "real.safetensors")
    with pytest.raises(CheckpointFormatError, match="is an index file, named as a shard by another index") as err:
        open_checkpoint(a)
    assert err.value.__traceback__ is not None and len(str(err.value).splitlines()) == 1
    proc = subprocess.run([sys.executable, "-m", "ckptview", "info", str(a)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "index file" in proc.stderr


def _figures(a: torch.Tensor, b: torch.Tensor) -> dict:
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    d = b - a
    return {"max_abs_diff": float(d.abs().max()), "mean_abs_diff": float(d.abs().mean()),
            "rel_l2": float(d.norm() / a.norm()), "cosine": float(a @ b / (a.norm() * b.norm())),
            "frac_changed": float((d != 0).double().mean())}


def test_diff_of_expanded_tensors_reads_what_is_stored(tmp_path, monkeypatch):
    from ckptview.core.compare.diff import diff_checkpoints
    from ckptview.core.read.values import reading as values

    base_a = torch.randn(5, 1, 3, generator=torch.Generator().manual_seed(0))
    base_b = base_a.clone()
    base_b[0, 0, 1] += 0.5
    base_b[3, 0, 2] = -1.0
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    rows = 10**9
    torch.save({"e": base_a.expand(5, 40, 3), "h": torch.arange(1.0, 1001.0).expand(rows, 1000)}, a)
    torch.save({"e": base_b.expand(5, 40, 3), "h": torch.arange(2.0, 1002.0).expand(rows, 1000)}, b)
    from ckptview.core.compare import diff

    read = []
    real = values.iter_chunks  # as the comparison reads values
    monkeypatch.setattr(diff, "iter_chunks", lambda i, n=1 << 22, ahead=None, **kw: (read.append(c.size) or c for c in real(i, n, ahead, **kw)))
    result = diff_checkpoints(open_checkpoint(a), open_checkpoint(b))
    rows_by_name = {t.name: t for t in result.tensors}
    assert sum(read) == 2 * (15 + 1000)  # each side's stored values, once
    want = _figures(torch.load(a)["e"].contiguous(), torch.load(b)["e"].contiguous())
    got = rows_by_name["e"]
    for key, value in want.items():
        assert getattr(got, key) == pytest.approx(value, rel=1e-9), key
    huge = rows_by_name["h"]
    assert huge.status == "changed" and huge.frac_changed == 1.0
    assert huge.max_abs_diff == 1.0 and huge.mean_abs_diff == pytest.approx(1.0)
    stored = torch.arange(1.0, 1001.0, dtype=torch.float64)
    assert huge.rel_l2 == pytest.approx(math.sqrt(1000) / float(stored.norm()), rel=1e-9)

"""A training run saved quantized: the series' figures are of the real weights (their logical tensors), not of
the packed integers, and the parts are not tensors of their own in it."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.support.quantized import packed_llama

W = "model.layers.0.mlp.down_proj.weight"


def test_the_run_is_of_the_real_weights(tmp_path):
    references = [packed_llama(tmp_path / f"checkpoint-{step}", "gptq", group_size=32, seed=step)[2]
                  for step in (1, 2)]
    proc = subprocess.run([sys.executable, "-m", "ckptview", "series", str(tmp_path), "--json", "--no-cache"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    rows = {t["name"]: t for t in data["tensors"]}
    assert not any(name.endswith((".qweight", ".qzeros", ".scales", ".g_idx")) for name in rows)
    row = rows[W]
    assert row["shape"] == [256, 512] and row["dtypes"] == ["float32", "float32"]
    for i, ref in enumerate(references):
        assert row["norm"][i] == pytest.approx(np.linalg.norm(ref[W].double().numpy()), rel=1e-12)
    a, b = (r[W].double().numpy() for r in references)
    assert row["update_ratio"][1] == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a), rel=1e-9)

"""Weight spectra in a training run (issue 28): ``series --spectral`` adds each 2-D weight's alpha and stable
rank per checkpoint, equal to ``spectrum()`` of that tensor opened alone, the same on every executor and
through the cache, and a finding where a layer's alpha leaves [2, 6]."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ckptview.cli import main
from ckptview.core import open_checkpoint
from ckptview.core.figures.spectral import spectrum
from ckptview.core.jobs import drain
from ckptview.core.series import executor as series_executor
from ckptview.core.series import live as series_live
from ckptview.core.series.cache import SeriesCache
from ckptview.core.series.findings import find_findings
from ckptview.core.series.live import LiveRun, checkpoint_event, run_live
from ckptview.core.series.model import SeriesResult, TensorSeries

CHUNK = 37
STEPS = (1000, 2000, 3000, 4000, 5000)
ALPHAS = (4.0, 3.0, 2.5, 1.7, 1.5)  # of layers.7.mlp.weight: below 2 from step 4000 on
WEIGHT = "layers.7.mlp.weight"


def controlled(rows: int, cols: int, alpha: float, seed: int = 0) -> torch.Tensor:
    """A matrix whose eigenvalues of W^T W are the quantiles of a power law of exponent ``alpha`` (the fit
    finds alpha within a few percent)."""
    rng = np.random.default_rng(seed)
    n = min(rows, cols)
    lam = ((np.arange(n) + 0.5) / n) ** (-1.0 / (alpha - 1.0))
    q1, _ = np.linalg.qr(rng.standard_normal((rows, n)))
    q2, _ = np.linalg.qr(rng.standard_normal((cols, n)))
    return torch.from_numpy(((q1 * np.sqrt(lam)) @ q2.T).astype(np.float32))


def save_run(folder, alphas=ALPHAS) -> list[str]:
    """A run whose ``layers.7.mlp.weight`` follows ``alphas``; a conv kernel, a bias, a counter and a
    float64 head alongside."""
    folder.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(3)
    paths = []
    for i, (step, alpha) in enumerate(zip(STEPS, alphas, strict=True)):
        state = {
            WEIGHT: controlled(120, 80, alpha, seed=i),
            "layers.7.mlp.bias": torch.randn(120, generator=gen),
            "conv.weight": torch.randn(8, 3, 3, 3, generator=gen),
            "head.weight": torch.randn(10, 30, generator=gen, dtype=torch.float64),
            "bn.num_batches_tracked": torch.tensor(step),
            "ids": torch.arange(12).reshape(3, 4),
        }
        path = folder / f"step_{step}.pt"
        torch.save(state, path)
        paths.append(str(path))
    return paths


@pytest.fixture()
def run_dir(tmp_path):
    save_run(tmp_path / "run")
    return str(tmp_path / "run")


def _json(result: SeriesResult) -> dict:
    return json.loads(json.dumps(result.to_json(), allow_nan=False))


def test_figures_equal_the_spectrum_of_each_tensor_opened_alone(run_dir):
    out = _json(run_live([run_dir], workers=1, chunk_elems=CHUNK, spectral=True))
    tensors = {t["name"]: t for t in out["tensors"]}
    paths = [c["path"] for c in out["checkpoints"]]
    for name in (WEIGHT, "conv.weight", "head.weight"):
        expected_alpha, expected_rank = [], []
        for path in paths:
            ck = open_checkpoint(path)
            try:
                info = next(e.info for e in ck.tensors() if e.name == name)
                found = spectrum(info)
            finally:
                ck.close()
            expected_alpha.append(found.alpha)
            expected_rank.append(found.stable_rank)
        assert tensors[name]["alpha"] == expected_alpha, name
        assert tensors[name]["stable_rank"] == expected_rank, name
    assert [round(a, 1) for a in tensors[WEIGHT]["alpha"]] == [4.0, 3.0, 2.5, 1.7, 1.5]
    # Not a 2-D floating weight: null throughout.
    for name in ("layers.7.mlp.bias", "bn.num_batches_tracked", "ids"):
        assert tensors[name]["alpha"] == [None] * len(STEPS)
        assert tensors[name]["stable_rank"] == [None] * len(STEPS)


def test_without_spectral_the_json_is_unchanged(run_dir):
    out = _json(run_live([run_dir], workers=1, chunk_elems=CHUNK))
    assert all("alpha" not in t and "stable_rank" not in t for t in out["tensors"])
    assert not any(f["kind"] == "alpha" for f in out["findings"])


def test_a_layer_whose_alpha_falls_below_2_is_a_finding(run_dir):
    out = _json(run_live([run_dir], workers=1, chunk_elems=CHUNK, spectral=True))
    found = [f for f in out["findings"] if f["kind"] == "alpha"]
    weight = [f for f in found if f["tensor"] == WEIGHT]
    assert len(weight) == 1  # the first checkpoint below 2, not every one after it
    assert weight[0]["step"] == 4000 and weight[0]["index"] == 3
    alpha = {t["name"]: t for t in out["tensors"]}[WEIGHT]["alpha"][3]
    assert weight[0]["detail"] == f"alpha fell below 2 ({alpha:.3g})"
    assert weight[0]["detail"].startswith("alpha fell below 2 (1.7")
    # Every alpha finding names a tensor whose alpha at that checkpoint is outside [2, 6].
    tensors = {t["name"]: t for t in out["tensors"]}
    for f in found:
        a = tensors[f["tensor"]]["alpha"][f["index"]]
        assert a < 2 or a > 6


def _result(alphas: list[float | None], dtype: str = "float32", spectral: bool = True) -> SeriesResult:
    from ckptview.core.series.discover import Position
    from ckptview.core.series.model import CheckpointRef

    count = len(alphas)
    refs = [CheckpointRef(f"/run/step_{i}.pt", Position(step=i)) for i in range(count)]
    result = SeriesResult(refs, "step", spectral=spectral)
    s = TensorSeries.empty("w", count)
    s.shapes, s.dtypes = [(4, 4)] * count, [dtype] * count
    for t, a in enumerate(alphas):
        s.set_spectral(t, a, None)
    result.tensors = {"w": s}
    result.done = count
    return result


def test_alpha_findings_below_2_and_above_6_each_once():
    found = find_findings(_result([3.0, 6.5, 7.0, None, 1.9, 1.5, 4.0, 1.2]))
    assert [(f.kind, f.index, f.detail) for f in found] == [
        ("alpha", 1, "alpha rose above 6 (6.5)"), ("alpha", 4, "alpha fell below 2 (1.9)")]
    assert find_findings(_result([3.0, 1.0], spectral=False)) == []  # read without spectra: not judged
    assert find_findings(_result([2.0, 6.0])) == []  # the bounds are inside the range


@pytest.mark.slow
def test_serial_pool_and_dask_agree_with_spectral(run_dir, monkeypatch):
    expected = _json(run_live([run_dir], workers=1, chunk_elems=CHUNK, spectral=True))
    monkeypatch.setattr(series_live, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(series_executor, "MIN_SEGMENT", 2)  # cut the run: boundary files read as "previous"
    assert _json(run_live([run_dir], workers=2, chunk_elems=CHUNK, spectral=True)) == expected
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        assert _json(run_live([run_dir], scheduler=client, chunk_elems=CHUNK, spectral=True)) == expected


def test_the_cache_knows_whether_spectra_were_computed(run_dir, tmp_path, monkeypatch):
    cache = SeriesCache(str(tmp_path / "cache" / "series.sqlite3"))
    try:
        plain = _json(run_live([run_dir], workers=1, chunk_elems=CHUNK, cache=cache))
        spectral = _json(run_live([run_dir], workers=1, chunk_elems=CHUNK, cache=cache, spectral=True))
        assert spectral == _json(run_live([run_dir], workers=1, chunk_elems=CHUNK, spectral=True))
        assert any(a is not None for t in spectral["tensors"] for a in t["alpha"])

        def no_reading(*args, **kwargs):
            raise AssertionError("read again although cached")

        monkeypatch.setattr(series_live, "run_tasks", no_reading)
        assert _json(run_live([run_dir], workers=1, chunk_elems=CHUNK, cache=cache, spectral=True)) == spectral
        assert _json(run_live([run_dir], workers=1, chunk_elems=CHUNK, cache=cache)) == plain
    finally:
        cache.close()


def test_watch_lines_carry_alpha_and_stable_rank(run_dir):
    run = LiveRun([run_dir], workers=1, chunk_elems=CHUNK, spectral=True)
    try:
        run.discover()
        result = drain(run.update())
    finally:
        run.close()
    series = result.tensors[WEIGHT]
    event = checkpoint_event(result, 3)
    assert event["tensors"][WEIGHT]["alpha"] == series.alpha[3]
    assert event["tensors"][WEIGHT]["stable_rank"] == series.stable_rank[3]
    assert event["tensors"]["layers.7.mlp.bias"]["alpha"] is None
    assert [f["kind"] for f in event["findings"] if f["tensor"] == WEIGHT] == ["alpha"]
    plain = checkpoint_event(run_live([run_dir], workers=1, chunk_elems=CHUNK), 3)
    assert "alpha" not in plain["tensors"][WEIGHT]


def test_cli_series_spectral_json(run_dir, capsys):
    assert main(["series", run_dir, "--json", "--spectral", "--no-cache", "--workers", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    weight = {t["name"]: t for t in out["tensors"]}[WEIGHT]
    assert len(weight["alpha"]) == len(weight["stable_rank"]) == len(STEPS)
    assert any(f["kind"] == "alpha" and f["tensor"] == WEIGHT and f["step"] == 4000 for f in out["findings"])
    assert main(["series", run_dir, "--spectral", "--no-cache", "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "alpha (last)  stable rank (last)" in text
    row = next(line for line in text.splitlines() if line.startswith(WEIGHT + " "))
    assert row.split()[-2] == "1.505"  # the last checkpoint's alpha (1.5 as built), 4 digits
    line = next(line for line in text.splitlines() if WEIGHT + ": alpha" in line)
    assert line.split()[:3] == ["step", "4000", "alpha"]
    assert line.endswith(f"{WEIGHT}: alpha fell below 2 (1.71)")


def test_progress_counts_the_fits(run_dir):
    """A spectral run's progress goes on moving while the weights are fitted (not stuck at the end of reading)."""
    run = LiveRun([run_dir], workers=1, chunk_elems=CHUNK, spectral=True)
    seen = []
    try:
        run.discover()
        drain(run.update(), seen.append)
    finally:
        run.close()
    total = seen[-1].total
    assert total == 2 * sum(ref.nbytes for ref in run.result.checkpoints)  # read, then fitted
    assert seen[-1].done == total
    assert any(total / 2 < p.done < total for p in seen)

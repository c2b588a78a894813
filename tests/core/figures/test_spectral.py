"""Weight spectra against WeightWatcher's own figures and numpy's SVD, on files saved by torch."""

from __future__ import annotations

import contextlib
import io
import json
import math
import warnings

import numpy as np
import pytest
import torch

from ckptview.core import open_checkpoint
from ckptview.core.errors import Cancelled, TensorDataError
from ckptview.core.figures.analysis import Analysis, SpectrumReady, TargetFailed
from ckptview.core.figures.spectral import iter_spectrum, matrix_of, spectrum, trap_threshold
from ckptview.core.figures.spectral_fit import EVALS_THRESH, power_law_fit
from ckptview.core.jobs import CancelToken, drain


@contextlib.contextmanager
def quiet():
    """WeightWatcher prints, logs and changes the warning filters when imported: all of it kept in here."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def ww_module():
    with quiet():
        return pytest.importorskip("weightwatcher")


def heavy(rows: int, cols: int, seed: int, df: float = 3.0) -> torch.Tensor:
    """A heavy-tailed matrix (Student t elements): a tail with alpha well inside the fitted range."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.standard_t(df, size=(rows, cols)).astype(np.float32) * 0.05)


def tensor_named(ck, name):
    for entry in ck.tensors():
        if entry.name == name:
            return entry.info
    raise KeyError(name)


@pytest.fixture
def linear_model(tmp_path):
    """Linear layers of several shapes (tall, wide, square, fewer than 20 eigenvalues), saved by torch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(300, 200), torch.nn.ReLU(), torch.nn.Linear(200, 500),
                                torch.nn.Linear(500, 40), torch.nn.Linear(40, 12), torch.nn.Linear(12, 64))
    with torch.no_grad():
        model[2].weight.copy_(heavy(500, 200, 1))
        model[3].weight.copy_(heavy(40, 500, 2, df=2.5))
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    return model, path


def test_alpha_xmin_norms_match_weightwatcher(linear_model) -> None:
    model, path = linear_model
    ww = ww_module()
    with quiet():
        details = ww.WeightWatcher(model=model).analyze()
    assert len(details) == 5
    ck = open_checkpoint(str(path))
    try:
        for _, row in details.iterrows():
            info = tensor_named(ck, f"{row['name']}.weight")
            got = spectrum(info)
            assert got.method == "exact"
            assert got.alpha == pytest.approx(row["alpha"], rel=1e-9)
            assert got.fit.xmin == pytest.approx(row["xmin"], rel=1e-9)
            assert got.fit.ks_distance == pytest.approx(row["D"], rel=1e-9, abs=1e-12)
            assert got.fit.tail_size == row["num_pl_spikes"]
            # WeightWatcher's "spectral_norm" is lambda_max = sigma_max^2; its stable rank is ours.
            assert got.lambda_max == pytest.approx(row["spectral_norm"], rel=1e-12)
            assert got.spectral_norm == pytest.approx(row["sv_max"], rel=1e-12)
            assert got.stable_rank == pytest.approx(row["stable_rank"], rel=1e-12)
            assert got.log_spectral_norm == pytest.approx(row["log_spectral_norm"], rel=1e-12)
            assert got.log_norm == pytest.approx(row["log_norm"], rel=1e-12)
            assert got.alpha_weighted == pytest.approx(row["alpha_weighted"], rel=1e-9)
            assert got.singular_values.size == row["num_evals"]
            assert got.rank == row["matrix_rank"]
    finally:
        ck.close()


@pytest.mark.slow
def test_fit_matches_weightwatcher_fit_on_many_sizes() -> None:
    ww_module()
    from weightwatcher.WW_powerlaw import WWFit  # the fit WeightWatcher runs by default (pl_package="ww")

    rng = np.random.default_rng(7)
    for n in (2, 3, 7, 8, 12, 19, 20, 21, 64, 333, 1000):
        for trial in range(3):
            x = rng.standard_t(2 + trial, size=(2 * n, n))
            evals = np.linalg.svd(x, compute_uv=False) ** 2
            with quiet():
                ref = WWFit(evals[evals > EVALS_THRESH])
            got = power_law_fit(evals)
            assert got is not None
            assert got.alpha == pytest.approx(ref.alpha, rel=1e-9), n
            assert got.xmin == ref.xmin, n
            assert got.ks_distance == pytest.approx(ref.D, rel=1e-9, abs=1e-12), n
            assert got.sigma == pytest.approx(ref.sigma, rel=1e-9, abs=1e-12), n
    assert power_law_fit(np.array([0.0, 1e-7, 3.0])) is None  # one eigenvalue above the threshold: no fit


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_singular_values_match_numpy_svd(tmp_path, dtype) -> None:
    g = torch.Generator().manual_seed(1)
    sd = {"wide": torch.randn(30, 70, generator=g).to(dtype),
          "tall": torch.randn(90, 25, generator=g).to(dtype),
          "conv": torch.randn(16, 3, 5, 5, generator=g).to(dtype),
          "view": torch.randn(40, 60, generator=g).to(dtype).t()}  # a transposed view: non-contiguous
    torch.save(sd, tmp_path / "m.pt")
    ref = torch.load(tmp_path / "m.pt", weights_only=True)
    ck = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        for name, tensor in ref.items():
            matrix = tensor.double().reshape(tensor.shape[0], -1).numpy()
            expected = np.linalg.svd(matrix, compute_uv=False)
            got = spectrum(tensor_named(ck, name))
            assert got.shape == matrix.shape
            assert got.singular_values.size == min(matrix.shape)
            np.testing.assert_allclose(got.singular_values, expected, rtol=1e-9, atol=1e-6 * expected[0])
            assert got.spectral_norm == pytest.approx(expected[0], rel=1e-12)
            assert got.frobenius_norm == pytest.approx(np.linalg.norm(matrix), rel=1e-12)
            assert got.stable_rank == pytest.approx((expected ** 2).sum() / expected[0] ** 2, rel=1e-12)
            assert got.rank == np.linalg.matrix_rank(matrix) == min(matrix.shape)
    finally:
        ck.close()


@pytest.mark.slow
def test_randomized_states_its_error_and_holds_to_it(tmp_path) -> None:
    torch.save({"w": heavy(600, 300, 5)}, tmp_path / "m.pt")
    ck = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        info = tensor_named(ck, "w")
        got = drain(iter_spectrum(info, exact_limit=100))
        exact = spectrum(info)
    finally:
        ck.close()
    assert got.method == "randomized" and got.rank is None and exact.method == "exact"
    k = got.singular_values.size
    true = exact.singular_values[:k] ** 2
    low = got.singular_values ** 2
    # Each true eigenvalue lies in [computed, computed + stated error].
    assert np.all(true >= low * (1 - 1e-9))
    assert np.all(true <= low + got.eigenvalue_error + 1e-9 * true[0])
    assert got.spectral_norm == pytest.approx(exact.spectral_norm, rel=1e-6)
    assert got.frobenius_norm == pytest.approx(exact.frobenius_norm, rel=1e-12)
    assert got.to_json()["method"] == "randomized" and got.to_json()["rank"] is None


def test_rank_collapse_is_flagged_as_numpy_counts_the_rank(tmp_path) -> None:
    g = torch.Generator().manual_seed(2)
    low = (torch.randn(80, 5, generator=g) @ torch.randn(5, 120, generator=g))  # rank 5, float32
    dead = torch.randn(40, 50, generator=g)
    dead[10:20] = 0  # ten dead output units
    torch.save({"low": low, "dead": dead, "full": torch.randn(50, 40, generator=g)}, tmp_path / "m.pt")
    ck = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        got = {name: spectrum(tensor_named(ck, name)) for name in ("low", "dead", "full")}
    finally:
        ck.close()
    assert got["low"].rank == np.linalg.matrix_rank(low.numpy()) == 5
    assert got["dead"].rank == np.linalg.matrix_rank(dead.numpy()) == 30
    assert "rank_collapse" in got["low"].flags and "rank_collapse" in got["dead"].flags
    assert got["full"].rank == 40 and "rank_collapse" not in got["full"].flags


@pytest.mark.slow
def test_correlation_traps_are_the_outliers_of_the_shuffled_matrix(tmp_path) -> None:
    rng = np.random.default_rng(4)
    clean = rng.standard_normal((200, 300)).astype(np.float32)
    trapped = clean.copy()
    limit = trap_threshold(trapped.shape, float(trapped.std()))
    trapped[[3, 50, 120], [7, 200, 33]] = [2.5 * limit, -3 * limit, 4 * limit]
    torch.save({"clean": torch.from_numpy(clean), "trapped": torch.from_numpy(trapped),
                "tall": torch.from_numpy(trapped.T.copy())}, tmp_path / "m.pt")
    ck = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        got = {name: spectrum(tensor_named(ck, name)) for name in ("clean", "trapped", "tall")}
    finally:
        ck.close()
    assert got["clean"].traps == 0 and "correlation_trap" not in got["clean"].flags
    assert got["trapped"].traps == 3 and "correlation_trap" in got["trapped"].flags
    # A tall matrix is summed into its Gram matrix as it is read, and its traps counted by a second pass.
    assert got["tall"].traps == 3 and "correlation_trap" in got["tall"].flags
    # What WeightWatcher calls traps: eigenvalues of the element-shuffled matrix above its bulk edge.
    for name, matrix, expected in (("clean", clean, 0), ("trapped", trapped, 3)):
        shuffled = rng.permutation(matrix.astype(np.float64).ravel()).reshape(matrix.shape)
        shuffled -= shuffled.mean()
        evals = np.linalg.svd(shuffled, compute_uv=False) ** 2
        edge = shuffled.var() * (math.sqrt(200) + math.sqrt(300)) ** 2
        assert np.count_nonzero(evals > 1.1 * edge) == expected, name


def test_alpha_flags(tmp_path) -> None:
    g = torch.Generator().manual_seed(0)
    torch.save({"init": torch.randn(300, 200, generator=g), "trained": heavy(500, 200, 1)}, tmp_path / "m.pt")
    ck = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        init = spectrum(tensor_named(ck, "init"))
        trained = spectrum(tensor_named(ck, "trained"))
    finally:
        ck.close()
    assert init.alpha > 6 and "alpha_above_6" in init.flags
    assert 2 <= trained.alpha <= 6 and not {"alpha_above_6", "alpha_below_2"} & set(trained.flags)


def test_what_is_analysed_and_what_is_refused(tmp_path) -> None:
    w = torch.randn(8, 8)
    w[2, 3] = math.nan
    torch.save({"bias": torch.zeros(8), "ints": torch.ones(8, 8, dtype=torch.int64), "row": torch.ones(1, 50),
                "nan": w, "emb": torch.randn(100, 16), "conv1d": torch.randn(4, 3, 5)}, tmp_path / "m.pt")
    ck = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        assert matrix_of(tensor_named(ck, "bias")) is None
        assert matrix_of(tensor_named(ck, "ints")) is None
        assert matrix_of(tensor_named(ck, "row")) is None
        assert matrix_of(tensor_named(ck, "emb")) == (100, 16)
        assert matrix_of(tensor_named(ck, "conv1d")) == (4, 15)
        with pytest.raises(TensorDataError, match="1 NaN/Inf value in the matrix"):
            spectrum(tensor_named(ck, "nan"))
        with pytest.raises(TensorDataError, match="not a floating matrix"):
            spectrum(tensor_named(ck, "bias"))
    finally:
        ck.close()


def test_tall_matrices_stream_in_blocks_of_rows(tmp_path, monkeypatch) -> None:
    """The Gram matrix of a tall weight is summed a block of rows at a time: the same figures, and a
    NaN anywhere is counted whole."""
    from ckptview.core.figures import spectral

    g = torch.Generator().manual_seed(9)
    w = torch.randn(301, 40, generator=g)
    bad = w.clone()
    bad[[0, 150, 300], [1, 2, 3]] = torch.tensor([math.nan, math.inf, -math.inf])
    torch.save({"w": w, "bad": bad}, tmp_path / "m.pt")
    monkeypatch.setattr(spectral, "_BLOCK_ELEMS", 40 * 7)  # 7 rows a block: 43 blocks, the last one short
    ck = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        got = spectrum(tensor_named(ck, "w"))
        with pytest.raises(TensorDataError, match="3 NaN/Inf values"):
            spectrum(tensor_named(ck, "bad"))
    finally:
        ck.close()
    expected = np.linalg.svd(w.double().numpy(), compute_uv=False)
    np.testing.assert_allclose(got.singular_values, expected, rtol=1e-9, atol=1e-6 * expected[0])
    assert got.frobenius_norm == pytest.approx(float(w.double().norm()), rel=1e-12)


def test_a_shape_larger_than_its_storage_fails_before_anything_is_allocated(tmp_path) -> None:
    """A file may declare a 200,000 x 300,000 matrix over 64 bytes: one clear error, no 480 GB allocation."""
    from ckptview.core.checkpoint import TensorInfo

    torch.save({"w": torch.ones(4, 4)}, tmp_path / "m.pt")
    ck = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        real = tensor_named(ck, "w")
        for shape in ((200_000, 300_000), (300_000, 2_000), (3, 5_000_000_000)):
            lying = TensorInfo(dtype="float32", shape=shape, stride=(shape[1], 1), offset=0, storage=real.storage)
            with pytest.raises(TensorDataError, match="storage"):
                spectrum(lying)
    finally:
        ck.close()


def test_cancel_stops_the_job(tmp_path) -> None:
    torch.save({"w": torch.randn(400, 300)}, tmp_path / "m.pt")
    ck = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        token = CancelToken()
        gen = iter_spectrum(tensor_named(ck, "w"), token)
        next(gen)
        token.cancel()
        with pytest.raises(Cancelled):
            drain(gen)
    finally:
        ck.close()


def test_analysis_caches_each_spectrum(tmp_path) -> None:
    torch.save({"a": torch.randn(60, 40), "b": torch.randn(30, 30), "bad": torch.full((4, 4), math.inf)},
               tmp_path / "m.pt")
    ck = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        analysis = Analysis()
        infos = [tensor_named(ck, name) for name in ("a", "bad", "b")]
        events = []
        results = drain(analysis.spectral_job(infos), events.append)
        assert analysis.spectral_passes == 3
        ready = [e for e in events if isinstance(e, SpectrumReady)]
        failed = [e for e in events if isinstance(e, TargetFailed)]
        assert [e.index for e in ready] == [0, 2] and [e.index for e in failed] == [1]
        assert "NaN/Inf" in failed[0].message and results[1] is None
        again = drain(analysis.spectral_job([infos[0], infos[2]]))
        assert analysis.spectral_passes == 3  # reopening reads nothing
        assert again[0] is results[0] and analysis.cached_spectrum(infos[2]) is results[2]
    finally:
        ck.close()


def test_info_spectral_json_contract(linear_model, capsys) -> None:
    from ckptview.cli import main

    _model, path = linear_model
    assert main(["info", str(path), "--spectral", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_name = {t["name"]: t for t in data["tensors"]}
    ref = torch.load(path, weights_only=True)
    for name, tensor in ref.items():
        if tensor.dim() == 1:
            assert "spectral" not in by_name[name]
            continue
        s = by_name[name]["spectral"]
        assert list(s) == ["spectral_norm", "stable_rank", "frobenius_norm", "alpha", "xmin", "ks_distance",
                           "num_singular_values", "rank", "method", "flags"]
        sv = np.linalg.svd(tensor.double().numpy(), compute_uv=False)
        assert s["spectral_norm"] == pytest.approx(sv[0], rel=1e-12)
        assert s["stable_rank"] == pytest.approx((sv ** 2).sum() / sv[0] ** 2, rel=1e-12)
        assert s["num_singular_values"] == sv.size and s["rank"] == sv.size and s["method"] == "exact"
        assert isinstance(s["alpha"], float) and isinstance(s["flags"], list)
    assert main(["info", str(path), "--json"]) == 0  # without the flag: no key at all
    assert all("spectral" not in t for t in json.loads(capsys.readouterr().out)["tensors"])


def test_info_spectral_human_table(linear_model, capsys) -> None:
    from ckptview.cli import main

    _model, path = linear_model
    assert main(["info", str(path), "--spectral"]) == 0
    out = capsys.readouterr().out
    assert "weight spectra" in out
    table = out.split("weight spectra", 1)[1].splitlines()
    lines = [line for line in table if line.startswith("0.weight ")]
    assert len(lines) == 1 and "200x300" in lines[0] and "exact" in lines[0] and "200/200" in lines[0]
    assert not [line for line in table if line.startswith("0.bias")]


def test_info_spectral_analyses_weights_not_optimizer_moments(tmp_path, capsys, monkeypatch) -> None:
    """Adam's moments have their weight's shape, but their spectrum judges nothing: no "spectral" key."""
    from ckptview.cli import main

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 12)).sum().backward()
    opt.step()
    path = tmp_path / "train.pt"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
    import sys

    for terminal in (False, True):  # the streamed rows (a pipe) and the whole object (a terminal) alike
        monkeypatch.setattr(sys.stdout, "isatty", lambda terminal=terminal: terminal)
        assert main(["info", str(path), "--spectral", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        analysed = sorted(t["name"] for t in data["tensors"] if "spectral" in t)
        assert analysed == ["model.0.weight", "model.1.weight"]

"""Spectra in bounded steps: progress that moves, and Cancel honoured at the next step (issue 43, finding 12).

Before: a 16,384 x 16,384 weight's randomized SVD was eight whole-matrix BLAS products and LAPACK calls in a row;
the job said "50%" for minutes and Cancel could not stop it. Here the products run in blocks of rows, every
step (and every factorisation) is abandoned on Cancel, and no step starts after it. The matrices are small, the
block size made small to match, so that every path has many steps; nothing here measures time.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from ckptview.core import jobs
from ckptview.core.errors import Cancelled
from ckptview.core.figures import linalg_steps, spectral
from ckptview.core.figures.spectral import iter_spectrum
from ckptview.core.jobs import CancelToken, Progress, abandonable, drain
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values

# name: (shape, exact_limit): the three ways a spectrum is computed
PATHS = {"tall exact (streamed)": ((400, 120), 4096), "wide exact": ((90, 300), 4096),
         "randomized": ((400, 300), 50)}


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    g = torch.Generator().manual_seed(0)
    path = tmp_path_factory.mktemp("spectra") / "w.safetensors"
    save_file({name: torch.randn(*shape, generator=g) for name, (shape, _) in PATHS.items()}, str(path))
    checkpoint = open_checkpoint(str(path))
    yield {e.name: e.info for e in checkpoint.tensors()}
    checkpoint.close()


@pytest.fixture
def small_steps(monkeypatch):
    """Blocks of a few rows (many steps even on small matrices), and every step counted as it starts."""
    started: list[bool] = []  # for each step started: whether its job had been cancelled already
    hooks: list = []
    real = jobs.abandonable

    def counting(call, token, waiting, every=0.5):
        started.append(token is not None and token.cancelled)
        for hook in hooks:
            hook(len(started), token)
        return real(call, token, waiting, every)

    monkeypatch.setattr(linalg_steps, "BLOCK_FLOPS", 1 << 16)
    monkeypatch.setattr(linalg_steps, "MIN_BLOCK_ROWS", 8)
    monkeypatch.setattr(spectral, "_BLOCK_ELEMS", 1 << 12)
    monkeypatch.setattr(linalg_steps, "abandonable", counting)
    monkeypatch.setattr(spectral, "abandonable", counting)
    return started, hooks


@pytest.mark.parametrize("path", list(PATHS))
def test_progress_moves_through_every_phase(weights, small_steps, path):
    started, _ = small_steps
    values: list[int] = []
    result = drain(iter_spectrum(weights[path], CancelToken(), exact_limit=PATHS[path][1]),
                   lambda p: values.append(p.done))
    assert result.method == ("randomized" if path == "randomized" else "exact")
    assert values == sorted(values) and values[-1] == 1000
    computing = {v for v in values if 0 < v < 700}  # reading and the products, before the fit
    assert len(computing) >= 4, sorted(computing)
    assert len(started) >= 4  # the products and factorisations ran as steps


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("at", [1, 3])
def test_no_step_starts_after_cancel(weights, small_steps, path, at):
    """Cancel as step `at` starts: that step is abandoned, no later one starts, the job ends Cancelled."""
    started, hooks = small_steps
    hooks.append(lambda count, token: token.cancel() if count == at else None)
    with pytest.raises(Cancelled):
        drain(iter_spectrum(weights[path], CancelToken(), exact_limit=PATHS[path][1]))
    assert len(started) == at and not any(started)


def test_the_results_are_those_of_one_call(weights, small_steps):
    """Summed in blocks or in one call, the figures agree with numpy's SVD (and between paths)."""
    for path, (_, limit) in PATHS.items():
        info = weights[path]
        s = drain(iter_spectrum(info, CancelToken(), exact_limit=limit))
        matrix = np.asarray(read_values(info), dtype=np.float64).reshape(info.shape[0], -1)
        want = np.linalg.svd(matrix, compute_uv=False)
        k = 20 if s.method == "randomized" else s.singular_values.size  # the top ones: a sketch's sharpest
        assert np.allclose(s.singular_values[:k], want[:k], rtol=1e-6 if s.method == "randomized" else 1e-9), path
        assert s.frobenius_norm == pytest.approx(float(np.linalg.norm(matrix)), rel=1e-12)


def test_a_call_that_cannot_look_at_the_token_is_abandoned():
    """One LAPACK call cannot be interrupted: the job stops waiting for it at once, the call finishes later."""
    entered, release = threading.Event(), threading.Event()

    def lapack():
        entered.set()
        release.wait()
        return 42

    token = CancelToken()
    gen = abandonable(lapack, token, lambda waited: Progress(0, 0, f"{waited:.0f} s"), every=0.0)
    first = next(gen)  # it runs: the job reports that it waits
    assert isinstance(first, Progress) and entered.is_set()
    token.cancel()
    with pytest.raises(Cancelled):
        next(gen)
    assert not release.is_set()  # the call is still running: the job did not wait for it
    release.set()


def test_a_spectrum_waiting_on_lapack_stops_on_cancel(weights, monkeypatch):
    """The eigenvalue factorisation of the Gram matrix held (as a 16k x 16k one would hold it for minutes):
    Cancel ends the job while it is still running."""
    entered, release = threading.Event(), threading.Event()
    real = np.linalg.eigvalsh

    def held(a):
        entered.set()
        release.wait()
        return real(a)

    monkeypatch.setattr(np.linalg, "eigvalsh", held)
    token = CancelToken()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(drain, iter_spectrum(weights["tall exact (streamed)"], token))
        entered.wait()
        token.cancel()
        with pytest.raises(Cancelled):
            future.result()
        assert not release.is_set()
        release.set()

"""The power-law fit of an eigenvalue tail, computed as WeightWatcher computes it (Qt-free, numpy only).

WeightWatcher (0.7.x, its default ``pl_package='ww'``, ``xmax=None``) fits the ESD tail with its own
``WWFit``: the eigenvalues above ``EVALS_THRESH`` sorted ascending; every eigenvalue but the largest is a
candidate ``xmin``; for each, the continuous power-law maximum-likelihood exponent

    alpha = 1 + n / sum_{x >= xmin} ln(x / xmin)            (n = eigenvalues >= xmin)

and the Kolmogorov-Smirnov distance between the fitted CDF ``1 - (x / xmin)^(1 - alpha)`` and the empirical
CDF ``0, 1/n, ..., (n-1)/n`` (1 when alpha <= 1); the candidate with the smallest distance wins (the first
one on ties). With fewer than 20 eigenvalues it uses its small-N variant: the bias-corrected
``alpha = 1 + (n - 1) / sum ln(x / xmin)``, tails of at least 8 eigenvalues, and xmin chosen by
``D - 0.868 / sqrt(n)``. Both are reproduced here, the first vectorised (the same figures, to rounding).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptview.core.jobs import CancelToken, Progress, drain

if TYPE_CHECKING:
    import numpy as np

EVALS_THRESH = 1e-5  # WeightWatcher fits the eigenvalues above this (its CPU value; constants.EVALS_THRESH)
SMALL_N_CUTOFF = 20  # WeightWatcher's WW_powerlaw.SMALL_N_CUTOFF: fewer eigenvalues take the small-N fit
_SMALL_N_MIN_TAIL = 8  # fit_powerlaw_smallN(k_min=8)


@dataclass(frozen=True)
class PowerLawFit:
    """The fitted tail: exponent, where it starts, its KS distance, and how many eigenvalues it holds."""

    alpha: float
    xmin: float
    ks_distance: float
    sigma: float  # WeightWatcher's (alpha - 1) / sqrt(n): the MLE's standard error
    tail_size: int  # eigenvalues >= xmin (WeightWatcher's num_pl_spikes)


def iter_power_law_fit(evals: np.ndarray, token: CancelToken | None = None
                       ) -> Generator[Progress, None, PowerLawFit | None]:
    """Fit the tail of `evals` as WeightWatcher does; None when fewer than two eigenvalues exceed the threshold."""
    import numpy as np

    data = np.sort(np.asarray(evals, dtype=np.float64))
    data = data[data > EVALS_THRESH]
    if data.size < 2:
        return None
    if data.size < SMALL_N_CUTOFF:
        return _fit_small(data)
    return (yield from _fit_standard(data, token))


def power_law_fit(evals: np.ndarray) -> PowerLawFit | None:
    """Plain-function form of :func:`iter_power_law_fit`."""
    return drain(iter_power_law_fit(evals))


def _fit_standard(data: np.ndarray, token: CancelToken | None) -> Generator[Progress, None, PowerLawFit]:
    import numpy as np

    n_all = data.size
    logs = np.log(data)
    # Sum of ln(x) over each tail data[i:], for every candidate i (data[:-1]).
    suffix = np.cumsum(logs[::-1])[::-1]
    count = n_all - np.arange(n_all - 1, dtype=np.float64)  # tail sizes n
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        alphas = 1.0 + count / (suffix[:-1] - count * logs[:-1])
    ds = np.ones(n_all - 1)
    ramp = np.arange(n_all, dtype=np.float64)
    # The KS distance of each candidate, with WeightWatcher's own expression (so the figures agree to the
    # last bit); one candidate at a time is as fast as blocks here and needs no memory beyond the tail.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(n_all - 1):
            if i % 256 == 0:
                if token is not None:
                    token.check()
                yield Progress(i, n_all - 1, "power-law fit")
            alpha = alphas[i]
            if alpha > 1:
                n = count[i]
                ds[i] = np.max(np.abs(1 - (data[i:] / data[i]) ** (-alpha + 1) - ramp[: n_all - i] / n))
    sigmas = (alphas - 1.0) / np.sqrt(count)
    return _pick(data, alphas, ds, sigmas)


def _pick(data: np.ndarray, alphas: np.ndarray, ds: np.ndarray, sigmas: np.ndarray) -> PowerLawFit:
    """The candidate of smallest KS distance (np.argmin: the first on ties), as WWFit.__init__ picks it."""
    import numpy as np

    i = int(np.argmin(ds))
    xmin = float(data[i])
    return PowerLawFit(float(alphas[i]), xmin, float(ds[i]), float(sigmas[i]), int(np.count_nonzero(data >= xmin)))


def _fit_small(data: np.ndarray) -> PowerLawFit:
    """WeightWatcher's fit_powerlaw_smallN (k_min 8, no prior) followed by WWFit's own choice of xmin.

    fit_powerlaw_smallN picks a candidate by ``D - 0.868 / sqrt(n)``, but WWFit.__init__ then picks again
    by the smallest D over its arrays; that second choice is what WeightWatcher reports, so it is the one
    made here.
    """
    import numpy as np

    n_all = data.size
    logs = np.log(data)
    alphas = np.zeros(n_all - 1)
    ds = np.ones(n_all - 1)
    found = False
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(n_all - 1):
            n_int = n_all - i
            if n_int < _SMALL_N_MIN_TAIL:
                continue
            n = float(n_int)
            s = np.sum(logs[i:]) - n * logs[i]
            if s <= 1e-12:
                continue
            alpha = 1.0 + (n - 1.0) / s
            alphas[i] = alpha
            if alpha <= 1.0:
                continue
            fitted = 1.0 - (data[i:] / data[i]) ** (1.0 - alpha)
            ds[i] = float(np.max(np.abs(np.arange(n_int, dtype=np.float64) / n - fitted)))
            found = True
        # Computed before the fallback below, as WeightWatcher does (its sigma of the fallback keeps alpha 0).
        sigmas = (alphas - 1.0) / np.sqrt(n_all - np.arange(n_all - 1))
        if not found:  # no tail of 8 (or none valid): the whole data is the tail, WeightWatcher's fallback
            n = float(n_all)
            s = np.sum(logs) - n * logs[0]
            if s > 1e-12:
                alphas[0] = 1.0 + (n - 1.0) / s
                fitted = 1.0 - (data / data[0]) ** (1.0 - alphas[0])
                ds[0] = float(np.max(np.abs(np.arange(n_all, dtype=np.float64) / n - fitted)))
    return _pick(data, alphas, ds, sigmas)


def power_law_pdf(alpha: float, xmin: float, x: np.ndarray) -> np.ndarray:
    """The fitted density (alpha - 1) / xmin * (x / xmin)^-alpha, for drawing the tail over the ESD."""
    import numpy as np

    return (alpha - 1.0) / xmin * (np.asarray(x, dtype=np.float64) / xmin) ** (-alpha)

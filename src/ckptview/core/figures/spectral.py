"""Weight spectra: singular values, norms, ranks and the power-law tail of one 2-D weight (Qt-free).

A weight is viewed as a matrix ``shape[0] x prod(shape[1:])`` (a Linear ``out x in``; a conv kernel
``out x in*kh*kw``; an embedding ``vocab x dim``), read through the lazy value layer, one weight at a
time: a tall matrix is summed into its Gram matrix a block of rows at a time, a wide one is held as one
float64 copy. Its empirical spectral density (ESD) is the eigenvalues of ``W^T W`` (the squared
singular values, unnormalised, as WeightWatcher takes them), computed one of two ways:

- ``exact`` (the smaller dimension at most :data:`EXACT_LIMIT`): ``eigvalsh`` of the float64 Gram matrix
  (``W^T W`` or ``W W^T``, the smaller). Each eigenvalue is within about 1e-15 x lambda_max of the
  squared singular values LAPACK's SVD gives (tests compare with ``numpy.linalg.svd``), several times
  faster than the SVD WeightWatcher runs.
- ``randomized`` (larger): the top :data:`RANDOMIZED_RANK` singular values by randomized subspace iteration
  (Halko, Martinsson & Tropp 2011; seeded, so repeatable). The error is stated, not guessed: with ``R`` the
  part of ``W`` outside the subspace found, each true eigenvalue lies in ``[lambda_i, lambda_i + ||R||_F^2]``
  (``eigenvalue_error``), and the tail is fitted on the eigenvalues computed.

The power law of the tail (alpha, xmin, KS distance) is fitted as WeightWatcher fits it
(:mod:`ckptview.core.figures.spectral_fit`). Flags: ``alpha_below_2`` (over-fit), ``alpha_above_6``
(under-trained), ``rank_collapse`` (numerical rank below the smaller dimension) and ``correlation_trap``
(elements large enough that the element-shuffled matrix has eigenvalues outside its Marchenko-Pastur bulk).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptview.core import dtypes
from ckptview.core.blas_policy import one_blas_thread
from ckptview.core.errors import TensorDataError
from ckptview.core.figures.linalg_steps import Span, call, gram, product, transposed_product
from ckptview.core.figures.spectral_fit import PowerLawFit, iter_power_law_fit
from ckptview.core.jobs import CancelToken, Progress, abandonable, drain, relay
from ckptview.core.read.values.reading import iter_chunks
from ckptview.core.read.values.repeats import refusal
from ckptview.core.units import plural

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.checkpoint import TensorInfo

EXACT_LIMIT = 4096  # smaller matrix dimension up to which the whole ESD is computed
RANDOMIZED_RANK = 256  # singular values a randomized run computes
_OVERSAMPLE = 10
_POWER_ITERATIONS = 3
MAX_IN_MEMORY = 8 << 30  # bytes of the float64 copy a wide or randomized matrix may take
MIN_DIM = 2  # both matrix dimensions at least this, or the tensor is not analysed
MAX_NDIM = 5  # Linear/embedding (2), conv1d (3), conv2d (4), conv3d (5)
ALPHA_LOW, ALPHA_HIGH = 2.0, 6.0  # WeightWatcher's well-trained range
JSON_KEYS = ("spectral_norm", "stable_rank", "frobenius_norm", "alpha", "xmin", "ks_distance",
             "num_singular_values", "rank", "method", "flags")
_STEPS = 1000  # progress units of one matrix


@dataclass(frozen=True)
class Spectrum:
    """The figures of one weight matrix; see the module docstring for how each is computed."""

    shape: tuple[int, int]  # the matrix analysed: shape[0] x prod(shape[1:])
    method: str  # "exact" | "randomized"
    singular_values: np.ndarray  # descending; all of them (exact) or the top ones (randomized)
    frobenius_norm: float
    rank: int | None  # numerical rank; None when the randomized run cannot tell
    fit: PowerLawFit | None  # None: fewer than two eigenvalues above the fit's threshold
    traps: int  # elements beyond the correlation-trap threshold
    eigenvalue_error: float  # 0 (exact) or the bound on how much each computed eigenvalue may be low
    flags: tuple[str, ...]

    @property
    def eigenvalues(self) -> np.ndarray:
        """The ESD: eigenvalues of W^T W (squared singular values), ascending."""
        import numpy as np

        return np.asarray(self.singular_values[::-1] ** 2)

    @property
    def spectral_norm(self) -> float:
        """Largest singular value of W as stored."""
        return float(self.singular_values[0]) if self.singular_values.size else 0.0

    @property
    def lambda_max(self) -> float:
        """Largest eigenvalue of W^T W (what WeightWatcher calls spectral_norm)."""
        return self.spectral_norm ** 2

    @property
    def stable_rank(self) -> float | None:
        """||W||_F^2 / spectral_norm^2 (None for a zero matrix)."""
        return self.frobenius_norm ** 2 / self.lambda_max if self.lambda_max > 0 else None

    @property
    def log_spectral_norm(self) -> float | None:
        """log10(lambda_max), WeightWatcher's log_spectral_norm (twice log10 of the spectral norm)."""
        return math.log10(self.lambda_max) if self.lambda_max > 0 else None

    @property
    def log_norm(self) -> float | None:
        """log10(||W||_F^2), WeightWatcher's log_norm."""
        return math.log10(self.frobenius_norm ** 2) if self.frobenius_norm > 0 else None

    @property
    def alpha(self) -> float | None:
        """The power-law exponent of the ESD tail."""
        return self.fit.alpha if self.fit is not None else None

    @property
    def alpha_weighted(self) -> float | None:
        """alpha * log10(lambda_max), WeightWatcher's alpha_weighted."""
        log = self.log_spectral_norm
        return self.alpha * log if self.alpha is not None and log is not None else None

    def to_json(self) -> dict[str, Any]:
        """The contract's ``"spectral"`` object: exactly JSON_KEYS."""
        fit = self.fit
        out: dict[str, Any] = {
            "spectral_norm": self.spectral_norm,
            "stable_rank": self.stable_rank,
            "frobenius_norm": self.frobenius_norm,
            "alpha": fit.alpha if fit is not None else None,
            "xmin": fit.xmin if fit is not None else None,
            "ks_distance": fit.ks_distance if fit is not None else None,
            "num_singular_values": int(self.singular_values.size),
            "rank": self.rank,
            "method": self.method,
            "flags": list(self.flags),
        }
        for key, value in out.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = None  # JSON has no Inf (an alpha of a degenerate tail)
        return out


def matrix_of(info: TensorInfo) -> tuple[int, int] | None:
    """The matrix a tensor is analysed as (``shape[0] x prod(rest)``), or None when it is not analysed.

    Analysed: strided, readable, real floating tensors of 2 to 5 dimensions whose matrix has both
    dimensions at least :data:`MIN_DIM` (Linear and embedding weights, conv kernels).
    """
    shape = tuple(info.shape)
    if info.broken or info.layout != "strided" or not 2 <= len(shape) <= MAX_NDIM:
        return None
    if not dtypes.is_known(info.dtype) or not dtypes.is_floating(info.dtype):
        return None
    rows, cols = shape[0], math.prod(shape[1:])
    if min(rows, cols) < MIN_DIM:
        return None
    return rows, cols


def iter_spectrum(info: TensorInfo, token: CancelToken | None = None,
                  exact_limit: int = EXACT_LIMIT, expand: bool = False) -> Generator[Progress, None, Spectrum]:
    """The spectrum of one weight, reading it once; yields progress, checks `token` between steps.

    A view that repeats its storage (`values.repeats`) is refused in one line, its expanded size said,
    unless `expand`: the spectrum of every element it declares costs that many, not the bytes stored."""
    import numpy as np

    shape = matrix_of(info)
    if shape is None:
        raise TensorDataError(f"no spectrum: a {info.dtype} tensor of shape {list(info.shape)} is not a "
                              "floating matrix of at least 2 x 2")
    if not expand and (refused := refusal(info, "no spectrum")) is not None:
        raise refused
    rows, cols = shape
    small = min(rows, cols)
    size = f"{rows:,} x {cols:,}"
    eigen = Span(_STEPS * 6 // 10, _STEPS * 7 // 10, _STEPS, f"eigenvalues of a {small:,} x {small:,} Gram matrix")
    if small <= exact_limit and rows >= cols:
        # Tall (or square): W^T W summed over blocks of rows as they are read; memory is the n x n Gram
        # matrix and one block, whatever the number of rows (a 50,257-row head: 5 MB, not 309 MB).
        method, error = "exact", 0.0
        gram_matrix, moments = yield from _stream_gram(info, rows, cols, token, expand)
        fro2 = float(np.trace(gram_matrix))
        evals = yield from call(lambda: np.clip(np.linalg.eigvalsh(gram_matrix), 0.0, None), token, eigen)
        del gram_matrix
        traps = _count_traps_streamed(info, (rows, cols), moments, token, expand)
    else:
        matrix, moments = yield from _read_matrix(info, rows, cols, token, expand)
        fro2 = moments.squares
        if small <= exact_limit:
            method, error = "exact", 0.0
            summed = Span(_STEPS // 2, _STEPS * 6 // 10, _STEPS, f"Gram matrix of a {size} matrix")
            evals = yield from _exact_eigenvalues(matrix, token, summed, eigen)
        else:
            method = "randomized"
            steps = Span(_STEPS // 2, _STEPS * 7 // 10, _STEPS, f"randomized SVD of a {size} matrix")
            evals, error = yield from _randomized_eigenvalues(matrix, min(RANDOMIZED_RANK, small), fro2, token,
                                                              steps)
        if token is not None:
            token.check()
        traps = _count_traps(matrix, moments, token)
        del matrix
    sv = np.sqrt(evals[::-1])  # descending
    fit = yield from relay(iter_power_law_fit(evals, token),
                           lambda p: Progress(_STEPS * 7 // 10 + int(p.fraction * _STEPS * 3 // 10), _STEPS,
                                              "power-law fit"))
    rank = _rank(sv, rows, cols) if method == "exact" else None
    flags = []
    if fit is not None and fit.alpha < ALPHA_LOW:
        flags.append("alpha_below_2")
    if fit is not None and fit.alpha > ALPHA_HIGH:
        flags.append("alpha_above_6")
    if rank is not None and rank < small:
        flags.append("rank_collapse")
    if traps:
        flags.append("correlation_trap")
    yield Progress(_STEPS, _STEPS, "done")
    return Spectrum((rows, cols), method, sv, math.sqrt(fro2), rank, fit, traps, error, tuple(flags))


def spectrum(info: TensorInfo, exact_limit: int = EXACT_LIMIT, expand: bool = False) -> Spectrum:
    """Plain-function form of :func:`iter_spectrum`."""
    return drain(iter_spectrum(info, exact_limit=exact_limit, expand=expand))


def _read_matrix(info: TensorInfo, rows: int, cols: int, token: CancelToken | None,
                 expand: bool = False) -> Generator[Progress, None, tuple[np.ndarray, _Moments]]:
    """The values as a float64 rows x cols array, filled chunk by chunk (C order: conv kernels flatten
    to out x in*kh*kw), and their moments, gathered as they are read (no pass over the whole matrix that
    Cancel could not stop); NaN/Inf refused."""
    import numpy as np

    chunks = _checked_chunks(info, expand)
    need = rows * cols * 8
    if need > MAX_IN_MEMORY:
        raise TensorDataError(f"no spectrum: a {rows:,} x {cols:,} matrix needs {need / 2**30:.1f} GiB in memory "
                              f"as float64 (limit {MAX_IN_MEMORY / 2**30:.0f} GiB)")
    matrix = np.empty((rows, cols), dtype=np.float64)
    flat = matrix.reshape(-1)
    total = flat.size
    moments = _Moments()
    bad = 0
    pos = 0
    for chunk in chunks:
        if token is not None:
            token.check()
        n = chunk.size
        if pos + n > total:
            raise TensorDataError("no spectrum: the tensor yields more values than its shape holds")
        part = flat[pos : pos + n]
        part[...] = chunk if chunk.dtype.kind in "fiu" else chunk.astype(np.float64)
        bad += int(n - np.count_nonzero(np.isfinite(part)))
        if not bad:
            with one_blas_thread():  # its sum of squares: the same bits whoever computes it (blas_policy)
                moments.add(part)
        pos += n
        yield Progress(pos * (_STEPS // 2) // max(total, 1), _STEPS, "reading")
    if pos != total:
        raise TensorDataError(f"no spectrum: read {plural(pos, 'value')} of {total:,}")
    if bad:
        raise _non_finite(bad)
    return matrix, moments


def _checked_chunks(info: TensorInfo, expand: bool = False) -> Iterator[np.ndarray]:
    """`iter_chunks(info)` with its first chunk already read: the readers check that the whole view lies
    in its storage before they yield anything, so a shape the file lies about fails here, before a
    matrix of that shape is allocated."""
    chunks = iter_chunks(info, expand=expand)
    first = next(chunks, None)
    return chunks if first is None else itertools.chain((first,), chunks)


def _non_finite(count: int) -> TensorDataError:
    return TensorDataError(f"no spectrum: {count:,} NaN/Inf value{'s' if count != 1 else ''} in the matrix")


_BLOCK_ELEMS = 1 << 22  # elements of one block of rows added to the Gram matrix at a time


@dataclass
class _Moments:
    """What one pass gathers for the correlation-trap count: sum, sum of squares, extremes."""

    count: int = 0
    total: float = 0.0
    squares: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    def add(self, block: np.ndarray) -> None:
        import numpy as np

        self.count += block.size
        self.total += float(block.sum())
        self.squares += float(np.vdot(block, block))
        self.low = min(self.low, float(block.min()))
        self.high = max(self.high, float(block.max()))

    def mean_std(self) -> tuple[float, float]:
        mean = self.total / self.count
        return mean, math.sqrt(max(0.0, self.squares / self.count - mean * mean))


def _stream_gram(info: TensorInfo, rows: int, cols: int, token: CancelToken | None, expand: bool = False
                 ) -> Generator[Progress, None, tuple[np.ndarray, _Moments]]:
    """W^T W (float64) accumulated over blocks of whole rows, and the values' moments; one read."""
    import numpy as np

    chunks = _checked_chunks(info, expand)
    gram = np.zeros((cols, cols))
    moments = _Moments()
    block_rows = min(rows, max(1, _BLOCK_ELEMS // cols))  # a small matrix: no block larger than itself
    buffer = np.empty(block_rows * cols)
    filled = 0  # elements in `buffer`
    seen = 0
    total = rows * cols
    bad = [0]  # NaN/Inf met so far: once any, only counted (the message gives the whole count)

    def flush(values: np.ndarray) -> None:
        block = values.reshape(-1, cols)
        finite = int(np.count_nonzero(np.isfinite(block)))
        bad[0] += block.size - finite
        if not bad[0]:
            with one_blas_thread():
                moments.add(block)
                gram[...] += block.T @ block

    for chunk in chunks:
        if token is not None:
            token.check()
        values = chunk if chunk.dtype.kind in "fiu" else chunk.astype(np.float64)
        if seen + values.size > total:
            raise TensorDataError("no spectrum: the tensor yields more values than its shape holds")
        seen += values.size
        pos = 0
        while pos < values.size:
            take = min(buffer.size - filled, values.size - pos)
            buffer[filled : filled + take] = values[pos : pos + take]
            filled += take
            pos += take
            if filled == buffer.size:
                # One block's product is one BLAS call: Cancel abandons it rather than wait (linalg_steps).
                done = (seen - values.size + pos) * (_STEPS * 6 // 10) // max(total, 1)
                yield from abandonable(lambda: flush(buffer), token, functools.partial(_summing, done))
                filled = 0
                yield Progress(done, _STEPS, "summing W^T W")
        yield Progress(seen * (_STEPS * 6 // 10) // max(total, 1), _STEPS, "reading")
    if seen != total:
        raise TensorDataError(f"no spectrum: read {plural(seen, 'value')} of {total:,}")
    if filled:
        rest = buffer[:filled]
        yield from abandonable(lambda: flush(rest), token, functools.partial(_summing, _STEPS * 6 // 10))
    if bad[0]:
        raise _non_finite(bad[0])
    return gram, moments


def _summing(done: int, waited: float) -> Progress:
    """The progress said while a block of W^T W is summed (one BLAS call)."""
    return Progress(done, _STEPS, f"summing W^T W ({waited:.0f} s)")


def _count_traps_streamed(info: TensorInfo, shape: tuple[int, int], moments: _Moments,
                          token: CancelToken | None, expand: bool = False) -> int:
    """:func:`_count_traps` without the matrix in memory: no second read when even the extremes stay
    within the threshold (a healthy layer), else one more pass counting."""
    import numpy as np

    mean, std = moments.mean_std()
    if std == 0.0:
        return 0
    limit = trap_threshold(shape, std)
    if max(abs(moments.low - mean), abs(moments.high - mean)) <= limit:
        return 0
    count = 0
    for chunk in iter_chunks(info, expand=expand):
        if token is not None:
            token.check()
        values = chunk if chunk.dtype.kind in "fiu" else chunk.astype(np.float64)
        count += int(np.count_nonzero(np.abs(values.astype(np.float64, copy=False) - mean) > limit))
    return count


def _exact_eigenvalues(matrix: np.ndarray, token: CancelToken | None, summed: Span, eigen: Span
                       ) -> Generator[Progress, None, np.ndarray]:
    """All eigenvalues of W^T W, ascending and clipped at 0, from the smaller float64 Gram matrix (summed in
    steps, then one factorisation that Cancel abandons)."""
    import numpy as np

    gram_matrix = yield from gram(matrix, token, summed)
    evals: np.ndarray = yield from call(lambda: np.clip(np.linalg.eigvalsh(gram_matrix), 0.0, None), token, eigen)
    return evals


def _randomized_eigenvalues(matrix: np.ndarray, k: int, fro2: float, token: CancelToken | None, span: Span
                            ) -> Generator[Progress, None, tuple[np.ndarray, float]]:
    """The top `k` eigenvalues of W^T W (ascending) by seeded subspace iteration, and the bound
    ``||(I - QQ^T) W||_F^2`` by which each may be low (Weyl: A^T A = B^T B + R^T R, R^T R >= 0).

    Eight products with the whole matrix (the sketch, three power iterations of two, the projection), each
    in steps of rows; the QR and SVD factorisations of the thin results run whole, abandoned on Cancel."""
    import numpy as np

    tall = matrix if matrix.shape[0] >= matrix.shape[1] else matrix.T
    n = tall.shape[1]
    width = min(n, k + _OVERSAMPLE)
    rng = np.random.default_rng(0)
    parts = 2 + 2 * _POWER_ITERATIONS
    phase = iter(range(parts))

    def next_part(words: str) -> Span:
        index = next(phase)
        return span.part(index, parts, f"{span.words}: {words} ({index + 1} of {parts})")

    def qr(a: np.ndarray, part: Span) -> Generator[Progress, None, np.ndarray]:
        q: np.ndarray = (yield from call(lambda: np.linalg.qr(a), token, part.tail()))[0]  # after its product
        return q

    part = next_part("sketch")
    basis = yield from qr((yield from product(tall, rng.standard_normal((n, width)), token, part)), part)
    for _ in range(_POWER_ITERATIONS):
        part = next_part("power iteration")
        back = yield from qr((yield from transposed_product(tall, basis, token, part)), part)
        part = next_part("power iteration")
        basis = yield from qr((yield from product(tall, back, token, part)), part)
    part = next_part("projection")
    projected = yield from transposed_product(basis, tall, token, part)  # width x n
    sv = (yield from call(lambda: np.linalg.svd(projected, compute_uv=False), token, part.tail()))[:k]
    with one_blas_thread():
        residual = max(0.0, fro2 - float(np.vdot(projected, projected)))
    return np.sort(sv ** 2), residual


def trap_threshold(matrix_shape: tuple[int, int], std: float) -> float:
    """|w - mean| above which one element makes the element-shuffled matrix leave its bulk.

    A shuffled matrix is i.i.d. noise of the elements' std ``s`` plus, for each large element ``w``, a
    rank-one spike of singular value ``|w|``; by the BBP transition such a spike separates from the
    Marchenko-Pastur bulk of an ``m x n`` matrix when ``|w| > s (m n)^(1/4)``. Each element beyond that is
    one outlier eigenvalue of the randomized ESD, what WeightWatcher calls a correlation trap.
    """
    m, n = matrix_shape
    return float(std * (m * n) ** 0.25)


def _count_traps(matrix: np.ndarray, moments: _Moments, token: CancelToken | None = None) -> int:
    """Elements beyond :func:`trap_threshold`, counted a block of rows at a time (no full-size temporary),
    the token looked at between blocks."""
    import numpy as np

    mean, std = moments.mean_std()
    if std == 0.0:
        return 0
    limit = trap_threshold(matrix.shape, std)
    if max(abs(moments.low - mean), abs(moments.high - mean)) <= limit:
        return 0  # even the extremes stay within: no element can be beyond
    step = max(1, (1 << 20) // max(1, matrix.shape[1]))
    count = 0
    for r0 in range(0, matrix.shape[0], step):
        if token is not None:
            token.check()
        block = matrix[r0 : r0 + step]
        count += int(np.count_nonzero(np.abs(block - mean) > limit))
    return count


def _rank(sv: np.ndarray, rows: int, cols: int) -> int:
    """Singular values above ``4 sqrt(max(m, n) eps) sigma_max`` (eps of float64).

    numpy.linalg.matrix_rank's rule (``max(m, n) eps sigma_max``) moved to where the Gram matrix can
    resolve a singular value (its eigenvalues are exact to about eps * lambda_max): an exactly zero row
    or a product of low rank stored in float32 (trailing singular values ~1e-7 sigma_max) counts as rank
    lost, as it does for numpy on the float32 matrix.
    """
    import numpy as np

    if sv.size == 0 or sv[0] == 0:
        return 0
    big = max(rows, cols)
    eps = float(np.finfo(np.float64).eps)
    tol = sv[0] * max(big * eps, 4 * math.sqrt(big * eps))
    return int(np.count_nonzero(sv > tol))

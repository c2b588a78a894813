"""Dense linear algebra for the spectra in bounded steps that Cancel reaches and progress follows (Qt-free).

A 16,384 x 16,384 weight's randomized SVD is eight products with the whole matrix, each a single BLAS call of
tens of seconds on a laptop: the Spectrum panel sat at "computing spectra... 50%" for minutes and Cancel could
not stop it (issue 43, finding 12). Here every product is cut into blocks of rows of about `BLOCK_FLOPS`
floating-point operations, each one a step that reports progress, and each step (like every factorisation,
which LAPACK does in one call that nothing can interrupt) runs through `jobs.abandonable`: the job waits for it
looking at its token every 50 ms, so Cancel ends the job at once and the step in flight finishes in the
background, its result dropped. The results are those of the one-call forms: the same products, summed in the
same float64.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptview.core.blas_policy import one_blas_thread
from ckptview.core.jobs import CancelToken, Progress, abandonable

if TYPE_CHECKING:
    import numpy as np

BLOCK_FLOPS = 1 << 30  # floating-point operations of one step (tens of milliseconds on a laptop core)
MIN_BLOCK_ROWS = 64  # rows of a summed block at least (the sum is rewritten once per block)
COLUMN_BLOCKS_FROM = 256  # a.T @ b with at least this many result rows is cut by result rows, not summed


@dataclass(frozen=True)
class Span:
    """Where a phase's steps land on the job's progress: `start`..`end` of `total`, with words for it."""

    start: int
    end: int
    total: int
    words: str

    def at(self, done: int, steps: int, waited: float | None = None) -> Progress:
        """The progress after `done` of `steps` steps (`waited`: seconds the step in flight has run so far)."""
        value = self.start + (self.end - self.start) * min(done, steps) // max(steps, 1)
        message = self.words + (f" ({waited:.0f} s)" if waited is not None and waited >= 1 else "")
        return Progress(value, self.total, message)

    def tail(self) -> Span:
        """A span of no width at this one's end: a call that follows its steps (progress never goes back)."""
        return Span(self.end, self.end, self.total, self.words)

    def part(self, index: int, parts: int, words: str | None = None) -> Span:
        """The `index`-th of `parts` equal parts of this span."""
        width = self.end - self.start
        return Span(self.start + width * index // parts, self.start + width * (index + 1) // parts, self.total,
                    words or self.words)


def _abandonable(func: Callable[[], Any], token: CancelToken | None, waiting: Callable[[float], Progress]
                 ) -> Generator[Progress, None, Any]:
    """`jobs.abandonable` of `func` run on one BLAS thread (`blas_policy`): the same figures whoever computes
    them, this process or a worker."""

    def one_thread() -> Any:
        with one_blas_thread():
            return func()

    return (yield from abandonable(one_thread, token, waiting))


def _rows_per_block(rows: int, flops_per_row: int, floor: int = 1) -> int:
    return max(floor, min(rows, BLOCK_FLOPS // max(1, flops_per_row)))


def call(func: Callable[[], Any], token: CancelToken | None, span: Span) -> Generator[Progress, None, Any]:
    """One call that cannot be cut (a factorisation): abandoned on Cancel, its seconds said while it runs."""
    result = yield from _abandonable(func, token, lambda waited: span.at(0, 1, waited))
    yield span.at(1, 1)
    return result


def product(a: np.ndarray, b: np.ndarray, token: CancelToken | None, span: Span) -> Generator[Progress, None, Any]:
    """`a @ b` (float64), a block of `a`'s rows per step."""
    import numpy as np

    rows = a.shape[0]
    out = np.empty((rows, b.shape[1]), dtype=np.result_type(a, b))
    step = _rows_per_block(rows, 2 * a.shape[1] * b.shape[1])
    steps = math.ceil(rows / step) if rows else 0
    for k in range(steps):
        r0, r1 = k * step, min(rows, (k + 1) * step)

        def block(r0: int = r0, r1: int = r1) -> None:
            np.matmul(a[r0:r1], b, out=out[r0:r1])

        yield from _abandonable(block, token, functools.partial(_waiting, span, k, steps))
        yield span.at(k + 1, steps)
    return out


def _waiting(span: Span, done: int, steps: int, waited: float) -> Progress:
    return span.at(done, steps, waited)


def transposed_product(a: np.ndarray, b: np.ndarray, token: CancelToken | None, span: Span
                       ) -> Generator[Progress, None, Any]:
    """`a.T @ b` (float64) for `a` and `b` of the same rows, one block per step: a block of the result's rows
    (a block of `a`'s columns, each a whole product: nothing summed twice) when it has many rows, else the
    sum over blocks of rows (a sketch's thin result: each block of the large operand read once)."""
    import numpy as np

    inner, rows_out, cols_out = a.shape[0], a.shape[1], b.shape[1]
    if rows_out >= COLUMN_BLOCKS_FROM:
        out = np.empty((rows_out, cols_out), dtype=np.result_type(a, b))
        step = _rows_per_block(rows_out, 2 * inner * cols_out)
        steps = math.ceil(rows_out / step)
        for k in range(steps):
            c0, c1 = k * step, min(rows_out, (k + 1) * step)

            def block(c0: int = c0, c1: int = c1) -> None:
                np.matmul(a[:, c0:c1].T, b, out=out[c0:c1])

            yield from _abandonable(block, token, functools.partial(_waiting, span, k, steps))
            yield span.at(k + 1, steps)
        return out
    out = np.zeros((rows_out, cols_out), dtype=np.result_type(a, b))
    step = _rows_per_block(inner, 2 * rows_out * cols_out, MIN_BLOCK_ROWS)
    steps = math.ceil(inner / step) if inner else 0
    for k in range(steps):
        r0, r1 = k * step, min(inner, (k + 1) * step)

        def summed(r0: int = r0, r1: int = r1) -> None:
            out[...] += a[r0:r1].T @ b[r0:r1]

        yield from _abandonable(summed, token, functools.partial(_waiting, span, k, steps))
        yield span.at(k + 1, steps)
    return out


def gram(matrix: np.ndarray, token: CancelToken | None, span: Span) -> Generator[Progress, None, Any]:
    """The smaller Gram matrix of `matrix` (`W^T W` when it is tall, `W W^T` when wide), summed in steps."""
    if matrix.shape[0] >= matrix.shape[1]:
        return (yield from transposed_product(matrix, matrix, token, span))
    return (yield from transposed_product(matrix.T, matrix.T, token, span))

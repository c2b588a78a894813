"""Weight spectra of chosen tensors over a run's checkpoints, on demand (the series tab's Spectral lines; Qt-free).

``series --spectral`` fits every 2-D weight in the per-checkpoint task
(:mod:`ckptview.core.series.executor`); the window fits only the tensors it draws, one checkpoint
and one tensor at a time, with the same :func:`ckptview.core.figures.spectral.iter_spectrum`, so its
numbers are those of the command.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING

from ckptview.core import dtypes
from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.figures.spectral import MAX_NDIM, MIN_DIM, iter_spectrum, matrix_of
from ckptview.core.jobs import CancelToken, Progress, drain
from ckptview.core.read.bytes.remote.options import DEFAULT as DEFAULT_REMOTE
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.series.timeline import open_checkpoint, series_entries

if TYPE_CHECKING:
    from ckptview.core.checkpoint import Checkpoint, TensorInfo
    from ckptview.core.figures.analysis import Analysis
    from ckptview.core.session.workspace import Holdings

Figures = tuple[float | None, float | None]  # (alpha, stable rank)


def is_matrix(shape: tuple[int, ...] | None, dtype: str | None) -> bool:
    """True when a tensor of this shape and dtype is analysed (as :func:`spectral.matrix_of` decides,
    from the run's shapes alone)."""
    if shape is None or dtype is None or not 2 <= len(shape) <= MAX_NDIM:
        return False
    if not dtypes.is_known(dtype) or not dtypes.is_floating(dtype):
        return False
    return min(shape[0], math.prod(shape[1:])) >= MIN_DIM


def iter_spectra(wanted: list[tuple[str, str]], holdings: Holdings | None = None, token: CancelToken | None = None,
                 remote: RemoteOptions = DEFAULT_REMOTE) -> Generator[Progress, None, dict[tuple[str, str], Figures]]:
    """(alpha, stable rank) of each (checkpoint path, tensor name) in ``wanted``; (None, None) where the
    tensor is absent, not a matrix, or its spectrum cannot be computed (the run's findings say why).

    With `holdings` (the series tab's), checkpoints are the run's own opens and each spectrum is asked of its
    checkpoint's Analysis (computed once, shared with a tab showing that file); without, URLs are read
    with `remote`."""
    by_path: dict[str, list[str]] = {}
    for path, name in wanted:
        by_path.setdefault(path, []).append(name)
    out: dict[tuple[str, str], Figures] = {}
    done = 0
    for path, names in by_path.items():
        if token is not None:
            token.check()
        analysis: Analysis | None = None
        try:
            if holdings is not None:
                lease = holdings.lease(path)
                ckpt: Checkpoint = lease.checkpoint
                analysis = lease.analysis
            else:
                ckpt = open_checkpoint(path, remote)
        except Cancelled:
            raise
        except (CheckpointError, OSError, ValueError):
            out.update({(path, n): (None, None) for n in names})
            done += len(names)
            continue
        try:
            infos: dict[str, TensorInfo] = {}
            for entry_name, entry_info, _ in series_entries(ckpt):
                infos.setdefault(entry_name, entry_info)  # the first, if a name repeats (as the run reads it)
            for name in names:
                info = infos.get(name)
                figures: Figures = (None, None)
                if info is not None and matrix_of(info) is not None:
                    try:
                        steps = analysis.spectrum(info, token) if analysis is not None else iter_spectrum(info, token)
                        found = drain(steps)  # checks the token
                        figures = (found.alpha, found.stable_rank)
                    except Cancelled:
                        raise
                    except (CheckpointError, OSError, ValueError, ArithmeticError):
                        pass
                out[(path, name)] = figures
                done += 1
                yield Progress(done, len(wanted), f"spectrum of {name}")
        finally:
            if holdings is None:
                ckpt.close()
    return out

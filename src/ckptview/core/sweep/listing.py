"""A listing's figures (`info --stats`, `--spectral`) fanned out: statistics and spectra of the tensors it
shows, read where the placement says, or None when the work stays in the calling process (Qt-free)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.errors import TensorDataError
from ckptview.core.figures.stats import stored_part
from ckptview.core.jobs import CancelToken, drain
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.sweep import spectra, stats
from ckptview.core.sweep.runner import Placement, Sweep, SweepReport
from ckptview.core.sweep.source import task_path


@dataclass
class ListingFigures:
    """Each listed tensor's statistics and each weight's spectrum (or its error, one line), by the position
    of the tensor in `Checkpoint.tensors()`; and what the fan-out did."""

    stats: dict[int, stats.Found] = field(default_factory=dict)
    spectra: dict[int, spectra.Found] = field(default_factory=dict)
    report: SweepReport = field(default_factory=SweepReport)


def _stored(ckpt: Checkpoint, indexes: Sequence[int]) -> int:
    total = 0
    entries = ckpt.tensors()
    for i in indexes:
        try:
            total += stored_part(entries[i].info)[0].nbytes
        except TensorDataError:
            continue
    return total


def listing_figures(ckpt: Checkpoint, path: str, remote: RemoteOptions, placement: Placement,
                    stats_of: Sequence[int] = (), spectra_of: Sequence[int] = (), expand: bool = False,
                    token: CancelToken | None = None) -> ListingFigures | None:
    """The figures of tensors `stats_of` and spectra of weights `spectra_of` of `ckpt` (opened from `path`,
    which each worker opens again), computed where `placement` says; None when that is this process (the
    bytes to read do not pay for workers): the caller computes them as it always does."""
    total = _stored(ckpt, stats_of) + _stored(ckpt, spectra_of)
    with Sweep(placement, total) as sweep:
        if not sweep.fans_out:
            return None
        entries = ckpt.tensors()
        where = task_path(path)
        out = ListingFigures(report=sweep.report)
        if stats_of:
            out.stats = drain(stats.iter_stats([(i, entries[i]) for i in stats_of], where, remote, sweep, token))
        if spectra_of:
            out.spectra = drain(spectra.iter_spectra([(i, entries[i]) for i in spectra_of], where, remote, sweep,
                                                     expand, token))
        return out

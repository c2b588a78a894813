"""Weight spectra of a checkpoint's matrices as tasks: each task opens the checkpoint and computes the
spectra of its weights with `figures.spectral.spectrum`, the function the local listing calls (Qt-free).

A spectrum needs its whole matrix, so a weight is never cut; tasks group whole weights by their bytes.
The spectrum's linear algebra (a Gram matrix, `eigvalsh`, a seeded randomized SVD) gives the local
figures bit for bit where the workers run the same NumPy and BLAS on the same kind of CPU.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

from ckptview.core.checkpoint import TensorEntry, TensorInfo
from ckptview.core.errors import TensorDataError
from ckptview.core.figures.spectral import Spectrum, spectrum
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.sweep.plan import Piece, Work, cut, task_bytes
from ckptview.core.sweep.runner import Sweep
from ckptview.core.sweep.source import fingerprint, guarded, opened, pick

Found = Spectrum | str  # a weight's spectrum, or why it has none (one line)


@dataclass(frozen=True)
class SpectraTask:
    """Spectra of the weights `pieces` of the checkpoint at `path` (`expand`: views that repeat their
    storage too, on every element they declare)."""

    path: str
    remote: RemoteOptions
    pieces: tuple[Piece, ...]
    fingerprint: str
    expand: bool = False


@dataclass
class SpectraDone:
    """Per piece: its spectrum or its error; the bytes read."""

    found: list[Found]
    bytes_read: int


def measure_spectra(task: SpectraTask) -> SpectraDone:
    """What a worker runs: open the checkpoint, check it is the one planned, compute each spectrum."""
    return guarded(lambda: _measure(task))


def _measure(task: SpectraTask) -> SpectraDone:
    with opened(task.path, task.remote) as ckpt:
        infos = pick(ckpt, [p.index for p in task.pieces], [p.name for p in task.pieces], task.fingerprint)
        found: list[Found] = []
        nbytes = 0
        for info in infos:
            try:
                found.append(spectrum(info, expand=task.expand))
            except TensorDataError as exc:  # NaN values, a view that repeats, too large: this weight's error
                found.append(str(exc))
            nbytes += _cost(info, task.expand)
        return SpectraDone(found, nbytes)


def _cost(info: TensorInfo, expand: bool) -> int:
    return info.nbytes if expand else min(info.nbytes, info.storage.nbytes if info.storage is not None else 0)


def iter_spectra(entries: Sequence[tuple[int, TensorEntry]], path: str, remote: RemoteOptions, sweep: Sweep,
                 expand: bool = False, token: CancelToken | None = None) -> Generator[Progress, None, dict[int, Found]]:
    """Spectra of the weights `entries` of the checkpoint at `path`, computed where `sweep` runs its tasks;
    yields progress in bytes as tasks finish, returns each weight's spectrum (or its error) by index."""
    work = [Work(index, entry.name, _cost(entry.info, expand)) for index, entry in entries]
    total = sum(w.nbytes for w in work)
    infos = {index: entry.info for index, entry in entries}
    tasks = [SpectraTask(path, remote, pieces, fingerprint([(p.name, infos[p.index]) for p in pieces]), expand)
             for pieces in cut(work, task_bytes(total, sweep.slots), 1)]
    found: dict[int, Found] = {}
    read = 0
    yield Progress(0, total or 1, "spectra")
    for i, result in sweep.run(measure_spectra, tasks, token):
        for piece, spec in zip(tasks[i].pieces, result.found, strict=True):
            found[piece.index] = spec
        read += result.bytes_read
        sweep.report.bytes_read += result.bytes_read
        yield Progress(min(read, total), total or 1, "spectra")
    return found

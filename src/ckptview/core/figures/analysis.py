"""One analysis object per open checkpoint: result caches and single-flight streamed reads (Qt-free).

Every panel that needs figures or values of a tensor (statistics, histogram, spectrum, heat-map, the values
table, optimizer figures, diff histograms) asks the checkpoint's :class:`Analysis`; the window's workspace
(:mod:`ckptview.core.session.workspace`) keeps one per open checkpoint. A tensor's summary pass runs once: a second request for the same
tensor while the first pass is running waits for that pass instead of streaming the tensor again, and
later requests are answered from the cache. Jobs report typed events (the dataclasses below), never
tagged tuples, so a widget can tell them apart with ``isinstance``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.figures.heatmap import iter_tensor_heatmap
from ckptview.core.figures.histogram import iter_exact_histogram, tensor_sample_histogram
from ckptview.core.figures.spectral import iter_spectrum
from ckptview.core.figures.stats import chunk_source, iter_summary, merge_stats, stored_part
from ckptview.core.jobs import CancelToken, Progress, relay
from ckptview.core.message import message_of
from ckptview.core.read.bytes.files import read_ahead
from ckptview.core.read.values.repeats import repeats
from ckptview.core.read.values.slicing import LazySlice2D

if TYPE_CHECKING:  # both import numpy: at run time only when a job computes something
    import numpy as np

    from ckptview.core.figures.heatmap import HeatMap
    from ckptview.core.figures.histogram import Histogram
    from ckptview.core.figures.spectral import Spectrum
    from ckptview.core.figures.stats import Summary, TensorStats
    from ckptview.core.read.bytes.files import ReadAhead
    from ckptview.core.read.values.slicing import LazySlice2D

log = logging.getLogger(__name__)
T = TypeVar("T")
A = TypeVar("A")
R = TypeVar("R")
_WAIT_SLICE = 0.05  # seconds a follower waits between checks of its own cancel token
# A tensor up to this size keeps its values from the statistics pass, so its exact histogram (which needs
# the range that pass finds) is counted from memory instead of a second read of the file.
KEEP_VALUES_BYTES = 64 << 20
# Heat-maps kept per checkpoint (each up to 512 x 512 float64, 2 MiB): going back to a tensor just seen is
# immediate, and clicking through a thousand tensors does not keep a thousand pictures.
KEEP_HEATMAPS = 8


# ---------------------------------------------------------------------------------------------------
# Typed events of analysis jobs (what a job yields besides Progress).


@dataclass(frozen=True)
class StatsReady:
    """Statistics of target ``index`` of a request are known."""

    index: int
    stats: TensorStats


@dataclass(frozen=True)
class TargetFailed:
    """Target ``index`` of a request could not be read; ``message`` is one line for a person."""

    index: int
    message: str


@dataclass(frozen=True)
class PreviewReady:
    """A sampled (not exact) histogram of target ``index``, shown until the exact one arrives."""

    index: int
    histogram: Histogram


@dataclass(frozen=True)
class SpectrumReady:
    """The spectrum of target ``index`` of a spectral job is known."""

    index: int
    spectrum: Spectrum


# ---------------------------------------------------------------------------------------------------
# Single flight: one computation per key at a time, shared by every thread that asks.


@dataclass
class _Flight(Generic[T]):
    done: threading.Event = field(default_factory=threading.Event)
    result: T | None = None
    error: BaseException | None = None
    progress: Progress = field(default_factory=lambda: Progress(0, 0))


class _SingleFlight(Generic[T]):
    """Runs `compute` once per key; concurrent callers wait for the running one (and its progress)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[Any, _Flight[T]] = {}

    def run(self, key: Any, compute: Callable[[], Generator[Progress, None, T]],
            token: CancelToken | None) -> Generator[Progress, None, T]:
        while True:
            with self._lock:
                flight = self._flights.get(key)
                leader = flight is None
                if flight is None:
                    flight = self._flights[key] = _Flight()
            if leader:
                return (yield from self._lead(key, flight, compute))
            while not flight.done.wait(_WAIT_SLICE):
                if token is not None:
                    token.check()
                yield flight.progress
            if flight.error is None:
                return flight.result  # type: ignore[return-value]
            if isinstance(flight.error, (Cancelled, GeneratorExit, KeyboardInterrupt)):
                # The leader's own job was cancelled or closed (its worker stopped it), not ours: a
                # stop is never handed on to another job. Take the lead and read the tensor ourselves.
                continue
            if isinstance(flight.error, CheckpointError):
                raise type(flight.error)(str(flight.error))
            raise flight.error

    def _lead(self, key: Any, flight: _Flight[T],
              compute: Callable[[], Generator[Progress, None, T]]) -> Generator[Progress, None, T]:
        gen = compute()
        try:
            while True:
                try:
                    progress = next(gen)
                except StopIteration as stop:
                    result: T = stop.value
                    flight.result = result
                    return result
                flight.progress = progress
                yield progress
        except BaseException as exc:
            flight.error = exc
            gen.close()
            raise
        finally:
            with self._lock:
                self._flights.pop(key, None)
            flight.done.set()


# ---------------------------------------------------------------------------------------------------


class Analysis:
    """Statistics and histograms of one checkpoint's tensors, cached for the session, read once each."""

    def __init__(self, chunk_elems: int | None = None) -> None:
        self.chunk_elems = chunk_elems  # elements per streamed chunk (None: the readers' default)
        self._lock = threading.Lock()
        # TensorInfo hashes by identity: entries die with the checkpoint that owns the tensors.
        self._summaries: weakref.WeakKeyDictionary[TensorInfo, Summary] = weakref.WeakKeyDictionary()
        self._histograms: weakref.WeakKeyDictionary[TensorInfo, dict[tuple[int, bool], Histogram]] = (
            weakref.WeakKeyDictionary())
        self._summary_flights: _SingleFlight[Summary] = _SingleFlight()
        self._histogram_flights: _SingleFlight[Histogram] = _SingleFlight()
        self.passes = 0  # streamed passes over tensor values started so far (tests and benchmarks count)
        # The values of the last small tensor summarised, for its histogram's counting pass (one at a time).
        self._kept: tuple[TensorInfo, list[Any]] | None = None
        self._spectra: weakref.WeakKeyDictionary[TensorInfo, Spectrum] = weakref.WeakKeyDictionary()
        # Spectra of views that repeat their storage, computed on every element as the user asked: apart,
        # so a later plain request still gets its refusal (`values.repeats`).
        self._expanded_spectra: weakref.WeakKeyDictionary[TensorInfo, Spectrum] = weakref.WeakKeyDictionary()
        self._spectrum_flights: _SingleFlight[Spectrum] = _SingleFlight()
        self.spectral_passes = 0  # spectra computed (each reads its matrix once; cached ones read nothing)
        # (tensor, axis) -> its heat-map, the most recent last (the key holds the tensor: bounded by the count).
        self._heatmaps: OrderedDict[tuple[TensorInfo, int], HeatMap] = OrderedDict()
        self._heatmap_flights: _SingleFlight[HeatMap] = _SingleFlight()
        self.heatmap_passes = 0  # heat-maps computed (each reads its tensor once; cached ones read nothing)
        # Told of every summary computed (in the worker thread that computed it): a window marks the rows of
        # tensors found to hold NaN or Inf, whichever panel or filter read them.
        self._listeners: list[Callable[[TensorInfo, TensorStats], object]] = []
        self.nonfinite_found = 0  # summaries computed so far that count a NaN or an infinity

    # -- listeners -------------------------------------------------------------------------------------
    def add_listener(self, listener: Callable[[TensorInfo, TensorStats], object]) -> None:
        """Call `listener(info, stats)` after each summary computed from now on (in the computing thread)."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[TensorInfo, TensorStats], object]) -> None:
        """Stop calling `listener` (nothing when it was not added)."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _tell(self, info: TensorInfo, stats: TensorStats) -> None:
        with self._lock:
            listeners = list(self._listeners)
            if stats.nan or stats.posinf or stats.neginf:
                self.nonfinite_found += 1
        for listener in listeners:
            try:
                listener(info, stats)
            except Exception:  # noqa: BLE001 - a listener gone (its window closed) never fails the figures
                log.debug("an analysis listener failed", exc_info=True)

    # -- summaries -----------------------------------------------------------------------------------
    def cached_summary(self, info: TensorInfo) -> Summary | None:
        """The Summary computed earlier for ``info``, if any."""
        with self._lock:
            return self._summaries.get(info)

    def summary(self, info: TensorInfo, token: CancelToken | None = None,
                ahead: ReadAhead | None = None) -> Generator[Progress, None, Summary]:
        """A tensor's Summary (statistics, and the value table of small dtypes): cached, read once.

        `ahead`: the read-ahead of the walk asking (its small reads come from windows of the file)."""
        cached = self.cached_summary(info)
        if cached is not None:
            return cached
        return (yield from self._summary_flights.run(id(info), lambda: self._stream_summary(info, token, ahead),
                                                     token))

    def _stream_summary(self, info: TensorInfo, token: CancelToken | None,
                        ahead: ReadAhead | None = None) -> Generator[Progress, None, Summary]:
        part, weight = stored_part(info)  # an expanded (stride-0) tensor: only what it stores, counted
        chunks: Iterable[Any] = self._chunks(part, ahead)()
        kept: list[Any] | None = None
        if part.nbytes <= KEEP_VALUES_BYTES:  # small enough to keep: the histogram needs no second read
            kept = []
            chunks = _keeping(chunks, kept)
        summary = yield from iter_summary(chunks, total=part.numel, token=token, weight=weight)
        with self._lock:
            self._summaries[info] = summary
            if kept is not None and summary.table is None:  # a value table already gives the histogram
                self._kept = (info, kept)
        self._tell(info, summary.stats)
        return summary

    def stats(self, infos: Sequence[TensorInfo], token: CancelToken | None = None,
              ahead: ReadAhead | None = None) -> Generator[Progress, None, TensorStats]:
        """Statistics of one tensor, or the aggregate over several (a module), from cached summaries."""
        parts = []
        for info in infos:
            summary = yield from self.summary(info, token, ahead)
            parts.append(summary.stats)
        return parts[0] if len(parts) == 1 else merge_stats(parts)

    # -- histograms ----------------------------------------------------------------------------------
    def cached_histogram(self, info: TensorInfo, bins: int, log_x: bool) -> Histogram | None:
        """The exact Histogram computed earlier for these settings, if any."""
        with self._lock:
            return self._histograms.get(info, {}).get((bins, log_x))

    def histogram(self, info: TensorInfo, bins: int, log_x: bool = False,
                  token: CancelToken | None = None) -> Generator[Progress, None, Histogram]:
        """The exact histogram: the summary's value table when the dtype has one, else one counting pass."""
        cached = self.cached_histogram(info, bins, log_x)
        if cached is not None:
            return cached
        key = (id(info), bins, log_x)
        return (yield from self._histogram_flights.run(
            key, lambda: self._stream_histogram(info, bins, log_x, token), token))

    def _stream_histogram(self, info: TensorInfo, bins: int, log_x: bool,
                          token: CancelToken | None) -> Generator[Progress, None, Histogram]:
        summary = yield from self.summary(info, token)
        part, weight = stored_part(info)
        with self._lock:
            kept = self._kept[1] if self._kept is not None and self._kept[0] is info else None
        chunks = (lambda: iter(kept)) if kept is not None else self._chunks(part)
        hist = yield from iter_exact_histogram(chunks, bins, None, log_x, part.numel, token, summary, weight)
        with self._lock:
            self._histograms.setdefault(info, {})[(bins, log_x)] = hist
        return hist

    def preview(self, info: TensorInfo, bins: int, log_x: bool = False) -> Histogram:
        """A quick histogram from a bounded seeded sample (not a pass over the values)."""
        return tensor_sample_histogram(info, bins, log_x)

    # -- jobs panels run in a worker -----------------------------------------------------------------
    def stats_job(self, targets: Sequence[Sequence[TensorInfo]],
                  token: CancelToken | None = None
                  ) -> Generator[Progress | StatsReady | TargetFailed, None, list[TensorStats | None]]:
        """Statistics of each target in turn (a target of several tensors is a module); errors stay per target.

        A module's small tensors come from windows of the file read at once (`read_ahead`)."""
        return read_ahead(lambda ahead: self._stats_steps(targets, token, ahead))

    def _stats_steps(self, targets: Sequence[Sequence[TensorInfo]], token: CancelToken | None,
                     ahead: ReadAhead | None = None
                     ) -> Generator[Progress | StatsReady | TargetFailed, None, list[TensorStats | None]]:
        return (yield from _per_target(targets, lambda i, infos: self.stats(infos, token, ahead), StatsReady))

    def histogram_job(self, infos: Sequence[TensorInfo], bins: int, log_x: bool,
                      token: CancelToken | None = None) -> Generator[Progress | PreviewReady, None, list[Histogram]]:
        """Previews first (for tensors without a cached exact histogram), then the exact histograms."""
        cached = [self.cached_histogram(info, bins, log_x) for info in infos]
        for i, info in enumerate(infos):
            if cached[i] is None:
                if token is not None:
                    token.check()
                yield PreviewReady(i, self.preview(info, bins, log_x))
        exact: list[Histogram] = []
        for hist, info in zip(cached, infos, strict=True):
            exact.append(hist if hist is not None else (yield from self.histogram(info, bins, log_x, token)))
        return exact

    # -- spectra -------------------------------------------------------------------------------------
    def cached_spectrum(self, info: TensorInfo, expand: bool = False) -> Spectrum | None:
        """The Spectrum computed earlier for ``info``, if any (reopening a weight is immediate); `expand`:
        also one computed on every element of a view that repeats its storage."""
        with self._lock:
            found = self._spectra.get(info)
            return found if found is not None or not expand else self._expanded_spectra.get(info)

    def spectrum(self, info: TensorInfo, token: CancelToken | None = None,
                 expand: bool = False) -> Generator[Progress, None, Spectrum]:
        """A weight's spectrum (:mod:`ckptview.core.figures.spectral`): cached, computed once per tensor.
        A view that repeats its storage is refused (`RepeatedStorage`) unless `expand`."""
        cached = self.cached_spectrum(info, expand)
        if cached is not None:
            return cached
        return (yield from self._spectrum_flights.run((id(info), expand),
                                                      lambda: self._compute_spectrum(info, token, expand), token))

    def _compute_spectrum(self, info: TensorInfo, token: CancelToken | None,
                          expand: bool = False) -> Generator[Progress, None, Spectrum]:
        with self._lock:
            self.spectral_passes += 1
        result = yield from iter_spectrum(info, token, expand=expand)
        with self._lock:
            (self._expanded_spectra if expand and repeats(info) is not None else self._spectra)[info] = result
        return result

    def spectral_job(self, infos: Sequence[TensorInfo], token: CancelToken | None = None, expand: bool = False
                     ) -> Generator[Progress | SpectrumReady | TargetFailed, None, list[Spectrum | None]]:
        """Spectra of several weights in turn (a module's table); progress over all, errors stay per target.
        `expand`: views that repeat their storage too, on every element they declare."""
        total = len(infos)

        def one(i: int, info: TensorInfo) -> Generator[Progress, None, Spectrum]:
            def rebased(p: Progress) -> Progress:
                return Progress(i * 1000 + int(p.fraction * 1000), total * 1000, p.message)

            return relay(self.spectrum(info, token, expand), rebased)

        return (yield from _per_target(infos, one, SpectrumReady))

    # -- heat-maps -----------------------------------------------------------------------------------
    def cached_matrix_preview(self, info: TensorInfo, axis: int = 0) -> HeatMap | None:
        """The heat-map computed earlier for ``info`` viewed with rows along ``axis``, if kept."""
        with self._lock:
            found = self._heatmaps.get((info, axis))
            if found is not None:
                self._heatmaps.move_to_end((info, axis))
            return found

    def matrix_preview(self, info: TensorInfo, axis: int = 0,
                       token: CancelToken | None = None) -> Generator[Progress, None, HeatMap]:
        """A tensor as a 2-D picture, block max-abs downsampled (:mod:`ckptview.core.figures.heatmap`):
        read a group of rows at a time, computed once per (tensor, axis), the last few kept."""
        cached = self.cached_matrix_preview(info, axis)
        if cached is not None:
            return cached
        return (yield from self._heatmap_flights.run(
            (id(info), axis), lambda: self._compute_heatmap(info, axis, token), token))

    def _compute_heatmap(self, info: TensorInfo, axis: int,
                         token: CancelToken | None) -> Generator[Progress, None, HeatMap]:
        with self._lock:
            self.heatmap_passes += 1
        result = yield from iter_tensor_heatmap(info, axis, token=token)  # one group of rows in memory at a time
        with self._lock:
            self._heatmaps[(info, axis)] = result
            while len(self._heatmaps) > KEEP_HEATMAPS:
                self._heatmaps.popitem(last=False)
        return result

    # -- values ----------------------------------------------------------------------------------------
    def values_slice(self, info: TensorInfo, spec: str, token: CancelToken | None = None) -> LazySlice2D:
        """The 2-D slice ``spec`` selects of ``info`` (``[0, :, :]``), checked, nothing read yet: its pages
        come from :meth:`values_page`. Raises SliceError for a spec that does not fit the tensor."""
        if token is not None:
            token.check()
        return LazySlice2D(info, spec)

    def values_page(self, view: LazySlice2D, rows: slice, cols: slice) -> np.ndarray:
        """The values of ``rows`` x ``cols`` of a slice, reading only their bytes (never the whole tensor).

        Not cached here: a table keeps the pages it shows, and a value read again is read from the file as
        it is (a changed file raises `FileChangedError`)."""
        return view[rows, cols]

    # -- internals -----------------------------------------------------------------------------------
    def _chunks(self, info: TensorInfo, ahead: ReadAhead | None = None) -> Callable[[], Iterable[Any]]:
        source = chunk_source(info, ahead=ahead) if self.chunk_elems is None \
            else chunk_source(info, self.chunk_elems, ahead)

        def counted() -> Iterable[Any]:
            with self._lock:
                self.passes += 1
            return source()

        return counted


def _keeping(chunks: Iterable[Any], kept: list[Any]) -> Iterator[Any]:
    """The chunks, each also appended to `kept` (copied: a chunk may be a view of a reused buffer)."""
    for chunk in chunks:
        kept.append(chunk.copy())
        yield chunk


def _per_target(targets: Sequence[A], compute: Callable[[int, A], Generator[Progress, None, R]],
                ready: Callable[[int, R], Any]) -> Generator[Any, None, list[R | None]]:
    """Each target in turn: its progress, then `ready(i, result)`; a target that fails is a `TargetFailed`
    (its result None) and the others still run."""
    results: list[R | None] = []
    for i, target in enumerate(targets):
        try:
            found = yield from compute(i, target)
        except CheckpointError as exc:
            yield TargetFailed(i, message_of(exc))
            results.append(None)
            continue
        yield ready(i, found)
        results.append(found)
    return results

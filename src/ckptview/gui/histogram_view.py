"""Histogram of one or several tensors (pyqtgraph), plus the job slot and caches the value views share.

A sampled preview is drawn first; the exact streamed histogram replaces it when the worker finishes.
Every computation runs on the thread pool; a new request cancels the old one and a stale result is
dropped (generation counter + sender check), so a slow tensor never overwrites a newer selection.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.histogram import DEFAULT_BINS, Histogram, iter_tensor_histogram, tensor_sample_histogram
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.model import TensorInfo
from ckptview.core.stats import Summary, iter_tensor_summary
from ckptview.gui.workers import GeneratorWorker

# Results cached per tensor for the session (TensorInfo compares by identity; entries die with it).
_lock = threading.Lock()
_summaries: weakref.WeakKeyDictionary[TensorInfo, Summary] = weakref.WeakKeyDictionary()
_histograms: weakref.WeakKeyDictionary[TensorInfo, dict[tuple[int, bool], Histogram]] = weakref.WeakKeyDictionary()


def cached_summary(info: TensorInfo) -> Summary | None:
    """The Summary computed earlier this session for ``info``, if any."""
    with _lock:
        return _summaries.get(info)


def summary_job(info: TensorInfo, token: CancelToken) -> Generator[Progress, None, Summary]:
    """A tensor's Summary, from the cache or streamed (then cached)."""
    summary = cached_summary(info)
    if summary is None:
        summary = yield from iter_tensor_summary(info, token)
        with _lock:
            _summaries[info] = summary
    return summary


class JobSlot(QObject):
    """At most one running job for a widget: ``start`` cancels the previous one, stale signals are dropped."""

    yielded = Signal(object)
    returned = Signal(object)
    errored = Signal(object)
    busy = Signal(bool)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.generation = 0
        self._worker: GeneratorWorker | None = None

    def start(self, func: Callable[..., Any], *args: Any) -> int:
        """Run ``func(*args, token=...)`` in the pool; returns the job's generation."""
        self.cancel()
        self.generation += 1
        worker = GeneratorWorker(func, *args)
        worker.generation = self.generation  # type: ignore[attr-defined]
        sig = worker.signals
        sig.yielded.connect(self._on_yielded)
        sig.returned.connect(self._on_returned)
        sig.errored.connect(self._on_errored)
        sig.finished.connect(self._on_finished)
        self._worker = worker
        self.busy.emit(True)
        worker.start()
        return self.generation

    def cancel(self) -> None:
        """Cancel the running job; anything it still emits is ignored."""
        if self._worker is not None:
            self._worker.quit()
            self._worker = None
            self.generation += 1
            self.busy.emit(False)

    def _current(self) -> bool:
        w = self._worker
        return w is not None and self.sender() is w.signals and w.generation == self.generation  # type: ignore[attr-defined]

    @Slot(object)
    def _on_yielded(self, value: object) -> None:
        if self._current():
            self.yielded.emit(value)

    @Slot(object)
    def _on_returned(self, value: object) -> None:
        if self._current():
            self.returned.emit(value)

    @Slot(object)
    def _on_errored(self, exc: object) -> None:
        if self._current():
            self.errored.emit(exc)

    @Slot()
    def _on_finished(self) -> None:
        if self._current():
            self._worker = None
            self.busy.emit(False)


def _histogram_job(
    items: list[tuple[str, TensorInfo]], bins: int, log_x: bool, token: CancelToken
) -> Generator[object, None, list[Histogram]]:
    """Previews first (one tuple per tensor), then the exact histograms, honouring ``token``."""
    exact: list[Histogram | None] = []
    for _, info in items:
        with _lock:
            exact.append(_histograms.get(info, {}).get((bins, log_x)))
    if any(h is None for h in exact):
        for i, (_, info) in enumerate(items):
            token.check()
            if exact[i] is None:
                yield ("preview", i, tensor_sample_histogram(info, bins, log_x))
    for i, (_, info) in enumerate(items):
        if exact[i] is None:
            summary = yield from summary_job(info, token)
            hist = yield from iter_tensor_histogram(info, bins, log_x, summary=summary, token=token)
            with _lock:
                _histograms.setdefault(info, {})[(bins, log_x)] = hist
            exact[i] = hist
    return [h for h in exact if h is not None]


class HistogramView(QWidget):
    """Step histogram of the selected tensors with bin count, log y, log |x|, hover and PNG export."""

    exactReady = Signal()  # the exact histograms of the current request are drawn
    previewReady = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.items: list[tuple[str, TensorInfo]] = []
        self.histograms: list[Histogram] = []
        self.slot = JobSlot(self)
        self.slot.yielded.connect(self._on_yielded)
        self.slot.returned.connect(self._on_exact)
        self.slot.errored.connect(lambda exc: self.status.setText(f"error: {exc}"))
        self.slot.busy.connect(self._on_busy)

        self.bins = QSpinBox(minimum=1, maximum=10_000, value=DEFAULT_BINS)
        self.bins.setPrefix("bins ")
        self.log_y = QCheckBox("log y")
        self.log_x = QCheckBox("log |x|")
        self.export_button = QPushButton("Export PNG…")
        self.cancel_button = QPushButton("Cancel")
        self.progress = QProgressBar(maximum=1000, textVisible=False)
        self.progress.setMaximumWidth(120)
        controls = QHBoxLayout()
        for w in (self.bins, self.log_y, self.log_x, self.progress, self.cancel_button, self.export_button):
            controls.addWidget(w)
        controls.addStretch(1)

        self.plot = pg.PlotWidget()
        self.plot.setLabel("left", "count")
        self.legend = self.plot.plotItem.addLegend()
        self.curves: list[pg.PlotDataItem] = []
        self.status = QLabel()  # preview/exact, NaN/Inf counts
        self.status.setWordWrap(True)
        self.hover = QLabel(" ")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(controls)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.status)
        layout.addWidget(self.hover)

        self.bins.editingFinished.connect(self._restart)
        self.log_x.toggled.connect(self._restart)
        self.log_y.toggled.connect(self._apply_log_y)
        self.cancel_button.clicked.connect(self.slot.cancel)
        self.export_button.clicked.connect(self._ask_export)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse)
        self.destroyed.connect(self.slot.cancel)
        self._on_busy(False)

    # -- requests ------------------------------------------------------------------------------------
    def set_tensors(self, items: list[tuple[str, TensorInfo]]) -> None:
        """Show the histograms of ``items`` (name, info); several are overlaid with a legend."""
        self.items = list(items)
        self._restart()

    def _restart(self) -> None:
        self.slot.cancel()
        self.histograms = []
        self._draw([])
        if not self.items:
            self.status.setText("Select a tensor to see its histogram.")
            return
        self.status.setText("computing…")
        self.slot.start(_histogram_job, self.items, self.bins.value(), self.log_x.isChecked())

    # -- results -------------------------------------------------------------------------------------
    def _on_yielded(self, value: object) -> None:
        if isinstance(value, Progress):
            self.progress.setValue(int(value.fraction * 1000))
        elif isinstance(value, tuple) and value[0] == "preview":
            _, i, hist = value
            shown = list(self.histograms) + [None] * (len(self.items) - len(self.histograms))
            shown[i] = hist
            self.histograms = shown
            if all(h is not None for h in shown):
                self._draw(shown)
                self.previewReady.emit()

    def _on_exact(self, hists: object) -> None:
        assert isinstance(hists, list)
        self.histograms = hists
        self._draw(hists)
        self.exactReady.emit()

    def _on_busy(self, busy: bool) -> None:
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        if not busy:
            self.progress.setValue(0)

    # -- drawing -------------------------------------------------------------------------------------
    def _draw(self, hists: list[Histogram]) -> None:
        for curve in self.curves:
            self.plot.removeItem(curve)
        self.curves = []
        self.legend.clear()
        many = len(hists) > 1
        lines = []
        for i, (hist, (name, _)) in enumerate(zip(hists, self.items, strict=False)):
            color = pg.intColor(i, hues=max(3, len(hists)))
            brush = pg.mkBrush(color.red(), color.green(), color.blue(), 60 if many else 120)
            curve = self.plot.plot(
                hist.edges, hist.counts, stepMode="center", fillLevel=0 if not self.log_y.isChecked() else None,
                brush=brush, pen=pg.mkPen(color), name=name if many else None,
            )
            self.curves.append(curve)
            kind = "exact" if hist.exact else f"preview from {hist.looked_at:,} sampled values"
            extra = f", zeros {hist.zeros:,} (not on a log axis)" if hist.log_x else ""
            lines.append(f"{name}: {kind}; NaN {hist.nan:,}, +Inf {hist.posinf:,}, −Inf {hist.neginf:,}{extra}")
        self.plot.setLabel("bottom", "log10 |x|" if self.log_x.isChecked() else "value")
        if hists:
            self.status.setText("\n".join(lines))
        self._apply_log_y()

    def _apply_log_y(self) -> None:
        log_y = self.log_y.isChecked()
        for curve in self.curves:
            curve.setFillLevel(None if log_y else 0)
        self.plot.setLogMode(x=False, y=log_y)

    def plotted_counts(self) -> list[np.ndarray]:
        """The counts currently drawn, one array per curve (tests read the plot through this)."""
        return [np.asarray(curve.yData) for curve in self.curves]

    def hover_text(self, x: float) -> str:
        """'[lo, hi): count' of the bin under ``x`` for every drawn histogram ('' when outside)."""
        parts = []
        for hist, (name, _) in zip(self.histograms, self.items, strict=False):
            if hist is None or not hist.edges[0] <= x <= hist.edges[-1]:
                continue
            i = min(int(np.searchsorted(hist.edges, x, side="right")) - 1, hist.counts.size - 1)
            lo, hi = hist.edges[i], hist.edges[i + 1]
            label = f"{name}: " if len(self.items) > 1 else ""
            parts.append(f"{label}[{lo:.6g}, {hi:.6g}) count {int(hist.counts[i]):,}")
        return "; ".join(parts)

    def _on_mouse(self, pos: object) -> None:
        vb = self.plot.plotItem.vb
        if self.plot.sceneBoundingRect().contains(pos):
            self.hover.setText(self.hover_text(vb.mapSceneToView(pos).x()) or " ")

    def export_png(self, path: str) -> None:
        """Write the plot as a PNG image."""
        from pyqtgraph.exporters import ImageExporter

        ImageExporter(self.plot.plotItem).export(path)

    def _ask_export(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export histogram", "histogram.png", "PNG image (*.png)")
        if path:
            self.export_png(path)

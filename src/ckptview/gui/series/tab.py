"""The series tab: a training run's checkpoints as a timeline (File > Open Series…, ``ckptview --series DIR``).

A module tree and the findings on the left; on the right, lines of norm and update ratio over the steps,
the update-ratio heat-map (tensors x steps) and a selected tensor's histograms over the steps. The files
are read in a worker (:mod:`ckptview.core.series.timeline`); results appear as each checkpoint is done, and
closing the tab cancels the reading.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Generator
from functools import partial
from typing import Any

from PySide6.QtCore import QCoreApplication, Qt, QTimer, Signal
from PySide6.QtGui import QBrush
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFileDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ckptview.core import dtypes
from ckptview.core.checkpoint import module_prefixes
from ckptview.core.graph import GraphCache
from ckptview.core.jobs import CancelToken
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.series.cells import cell_kinds
from ckptview.core.series.findings import find_findings
from ckptview.core.series.log_files import read_run_log
from ckptview.core.series.model import SeriesProgress, SeriesResult, module_names, module_series
from ckptview.core.series.spectra import is_matrix, iter_spectra
from ckptview.core.series.timeline import iter_series, open_for_run, plan_series
from ckptview.core.series.view_state import Phase, SeriesViewState
from ckptview.core.session.workspace import Holdings, Workspace
from ckptview.core.text import printable
from ckptview.core.units import MISSING, figure, plural
from ckptview.gui.base.job_header import job_header
from ckptview.gui.base.palette import Theme, on_palette_change, theme
from ckptview.gui.base.tabs import OverflowTabWidget
from ckptview.gui.base.workers import GeneratorWorker, JobSlot
from ckptview.gui.base.wrap import LINE_CHARS, breakable
from ckptview.gui.graph import RunGraph
from ckptview.gui.series.follow import Follow
from ckptview.gui.series.plots import (
    HEAT_FLOOR,
    HIST_BINS,
    HistogramsOverSteps,
    LinePlots,
    UpdateHeatMap,
    histograms_job,
)
from ckptview.gui.series.scalars import ScalarPlots
from ckptview.gui.series.spectra import SpectralLines

KIND_ROLE = Qt.ItemDataRole.UserRole
NAME_ROLE = Qt.ItemDataRole.UserRole + 1
FINDING_ROLE = Qt.ItemDataRole.UserRole + 2
MAX_LINES = 8
DEFAULT_MODULES = 4  # selected when the run opens, so the plots are never empty
# A finding's row background, by kind (gui/base/palette.py: each keeps the palette's text readable on it).
FINDING_COLORS = {"nan": "finding_alarm", "inf": "finding_alarm", "explosion": "finding_growth",
                  "stalled": "finding_stalled", "unreadable": "finding_broken", "unsafe": "finding_broken",
                  "appeared": "finding_appeared", "disappeared": "finding_disappeared",
                  "shape_changed": "finding_changed", "dtype_changed": "finding_changed", "alpha": "finding_alpha"}


def _color_finding(item: QListWidgetItem, current: Theme) -> None:
    item.setBackground(QBrush(current.color(FINDING_COLORS.get(item.data(KIND_ROLE), "base"))))
    item.setForeground(QBrush(current.color("text")))


def series_job(paths: list[str], stall_threshold: float, explode_factor: float, holdings: Holdings | None = None,
               token: CancelToken | None = None) -> Generator[Any, None, SeriesResult]:
    """Find and order the checkpoints, yield the plan, then the reading's progress; returns the result.

    Each checkpoint is opened once, into `holdings` (the tab's), and read and plotted from there; URLs
    are listed and read as the window reads them (its workspace's remote options)."""
    remote = holdings.workspace.remote if holdings is not None else RemoteOptions()
    result = plan_series(paths, stall_threshold, explode_factor, holdings, remote)
    # What the run logged (trainer_state.json, event files, hparams.yaml): before the figures, so its
    # curves are drawn while the checkpoints are read.
    result.log = read_run_log(paths, [ref.path for ref in result.checkpoints], remote, token)
    yield ("plan", result)
    return (yield from iter_series(result, token, holdings=holdings))


class _Resources:
    """What the tab must let go when Qt deletes it (a plain object: the widget may already be gone). Its
    jobs stop with their JobSlots, which are the tab's children."""

    def __init__(self, workspace: Workspace) -> None:
        # The run's checkpoints, each opened once (through the window's workspace) for the reading and
        # the plots; let go when the tab goes.
        self.holdings = Holdings(workspace, opener=partial(open_for_run, remote=workspace.remote))

    def release(self, *_args: Any) -> None:
        self.holdings.release()


class SeriesTab(QWidget):
    """One training run: reading progress, module tree, findings and the plots."""

    planned = Signal(object)  # SeriesResult, figures pending
    checkpoint_done = Signal(int)  # index of the checkpoint whose figures are now shown
    finished = Signal(object)  # the complete SeriesResult
    failed = Signal(str)
    histograms_ready = Signal(object)  # (tensor name, [Histogram | None per checkpoint])
    spectra_ready = Signal(object)  # [tensor names drawn in the Spectra view]

    def __init__(self, paths: list[str], stall_threshold: float = 0.0, explode_factor: float = 10.0,
                 parent: QWidget | None = None, workspace: Workspace | None = None,
                 graph_cache: GraphCache | None = None) -> None:
        super().__init__(parent)
        self.graph_cache = graph_cache  # where the Graph view's traced graphs are kept: the window's
        self.paths = [p if locate(p).is_remote else os.path.abspath(os.path.expanduser(p)) for p in paths]
        self.stall_threshold, self.explode_factor = stall_threshold, explode_factor
        self.result: SeriesResult | None = None
        # Its phase (loading, ready, error, cancelled), the curves its Scalars view draws, the step chosen:
        # plain data (core/series/view_state.py), tested without Qt.
        self.view = SeriesViewState()
        # The window's workspace (a checkpoint open in a tab is not opened again); a tab outside one has its own.
        self._res = _Resources(workspace if workspace is not None else Workspace())
        self.destroyed.connect(self._res.release)
        self.reading = JobSlot(self)  # finding, ordering and reading the checkpoints
        self.reading.yielded.connect(self._on_yielded)
        self.reading.returned.connect(self._on_returned)
        self.reading.errored.connect(self._on_errored)
        self.reading.aborted.connect(self._on_aborted)
        self._worker: GeneratorWorker | None = None  # the reading's job
        self.histogram_job = JobSlot(self)  # one tensor's histograms over the run
        # Bound methods, not lambdas: Qt drops these connections when the tab is deleted.
        self.histogram_job.returned.connect(self._on_histograms)
        self.histogram_job.errored.connect(self._on_histograms_error)
        self._hist_request: tuple[str, tuple[float, float], str] | None = None  # what the current histograms show
        self.spectra_job = JobSlot(self)  # the weights' spectra the Spectra view lacks
        self.spectra_job.returned.connect(self._on_spectra)
        self.spectra_job.errored.connect(self._on_spectra_error)
        self._spectra: dict[tuple[str, str], tuple[float | None, float | None]] = {}  # (path, name) -> figures
        self._items: dict[str, QTreeWidgetItem] = {}
        self._module_items: dict[str, QTreeWidgetItem] = {}
        self._tree_names: list[str] = []
        self._shown_findings: list[Any] = []
        self._marking = False  # a finding is selecting its tensor: keep its mark
        self._from_graph = False  # the graph is selecting tensors: do not send them back to it
        self._build()
        self._refresh_timer = QTimer(self, singleShot=True, interval=150)
        self._refresh_timer.timeout.connect(self.refresh)

    # --- building --------------------------------------------------------------------------------
    def _build(self) -> None:
        self.summary_label = QLabel("finding checkpoints…")
        self.summary_label.setObjectName("seriesSummary")
        self.summary_label.setTextFormat(Qt.TextFormat.PlainText)
        self.summary_label.setWordWrap(True)
        top, self.progress, self.cancel_button = job_header(self.summary_label, self.cancel)
        self.follow_box = QCheckBox("Follow")
        self.follow_box.setObjectName("seriesFollow")
        self.follow_box.setToolTip("Keep reading the run as checkpoints are written, changed or deleted")
        top.addWidget(self.follow_box)
        self.spectral_box = QCheckBox("Spectral")
        self.spectral_box.setObjectName("seriesSpectral")
        self.spectral_box.setToolTip("Fit the spectrum of each selected weight in every checkpoint: its power-law "
                                     "alpha and stable rank over the steps")
        self.spectral_box.toggled.connect(self._on_spectral_toggled)
        top.addWidget(self.spectral_box)
        self.follow = Follow(self)

        self.tree = QTreeWidget()
        self.tree.setObjectName("seriesTree")
        self.tree.setHeaderLabels(["Name", "Shape", "Norm (last)", "Update ratio (last)", "NaN/Inf (last)"])
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.setUniformRowHeights(True)
        self.tree.itemSelectionChanged.connect(self._on_selection_changed)
        self.findings_list = QListWidget()
        self.findings_list.setObjectName("seriesFindings")
        self.findings_list.itemClicked.connect(self._on_finding_clicked)
        self.findings_list.itemActivated.connect(self._on_finding_clicked)
        on_palette_change(self.findings_list, self._color_findings)
        self.findings_label = QLabel("Findings")
        findings_box = QWidget()
        box = QVBoxLayout(findings_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.findings_label)
        box.addWidget(self.findings_list, 1)
        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.tree)
        left.addWidget(findings_box)
        left.setSizes([500, 250])

        self.lines = LinePlots()
        self.scalars = ScalarPlots(self.view)  # what the run logged: loss, learning rate, metrics
        self.scalars.marked.connect(self.lines.mark)
        self.heatmap = UpdateHeatMap()
        self.heatmap.row_clicked.connect(self._on_heat_row)
        self.histograms = HistogramsOverSteps()
        self.views = OverflowTabWidget()
        self.views.addTab(self.scalars, "Scalars")
        self.views.addTab(self.lines, "Lines")
        self.views.addTab(self.heatmap, "Update heat-map")
        self.views.addTab(self.histograms, "Histograms")
        self.graph = RunGraph(self._res.holdings, lambda: self.result,  # read when first shown
                              graph_cache=self.graph_cache)
        self.graph.keys_selected.connect(self.select_tensors)
        self.views.addTab(self.graph, "Graph")
        self.spectra = SpectralLines()  # a tab while Spectral is checked

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(self.views)
        self.splitter.setSizes([420, 760])
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.splitter, 1)

    def _color_findings(self, current: Theme) -> None:
        for i in range(self.findings_list.count()):
            _color_finding(self.findings_list.item(i), current)

    # --- the reading -----------------------------------------------------------------------------
    @property
    def workspace(self) -> Workspace:
        """The workspace its checkpoints are opened in (the window's), with the remote options its URLs
        are read with."""
        return self._res.holdings.workspace

    def start(self) -> None:
        """Find, order and read the run's checkpoints in a worker."""
        app = QCoreApplication.instance()
        if app is not None:  # quitting the app lets the run's files go too, not only closing the tab
            app.aboutToQuit.connect(self._res.release)
        self._worker = self.reading.start(series_job, self.paths, self.stall_threshold, self.explode_factor,
                                          self._res.holdings)

    def release(self) -> None:
        """Stop every job and let go of the run's checkpoints (the window is closing the tab: `Tab`)."""
        for job in (self.reading, self.histogram_job, self.spectra_job, self.follow.slot):
            job.cancel()
        self.graph.stop()  # its reading (a trace's worker), layout and colours
        self._res.release()

    def trees(self) -> list[Any]:
        """Nothing kept out of the collector (`Tab`): the run's checkpoints are its holdings', let go above."""
        return []

    def cancel(self) -> None:
        """Stop reading (what is done stays shown)."""
        self.reading.stop()

    @property
    def state(self) -> Phase:
        """Where the reading stands (`Phase`: equal to "loading", "ready", "error" or "cancelled")."""
        return self.view.phase

    def busy(self) -> bool:
        """True while the files are being read."""
        return self._worker is not None and not self._worker.is_done

    def _on_yielded(self, item: Any) -> None:
        if isinstance(item, tuple) and item and item[0] == "plan":
            self.result = item[1]
            self.view.planned(item[1])
            if not self.view.drawn():  # nothing logged to draw: the weight figures first
                self.views.setCurrentWidget(self.lines)
            self._build_tree()
            self.select_default()
            self._update_summary("reading…")
            self.planned.emit(self.result)
            return
        if isinstance(item, SeriesProgress):
            self.progress.setValue(int(item.fraction * 1000))
            if item.checkpoint >= 0 and self.result is not None:
                self._update_summary(f"read {item.checkpoint + 1} of {len(self.result.checkpoints)}")
                self._refresh_timer.start()
                self.checkpoint_done.emit(item.checkpoint)
            elif item.message:
                self.progress.setToolTip(printable(item.message))

    def _on_returned(self, result: SeriesResult) -> None:
        self.result = result
        self.view.finished(result)
        self._refresh_timer.stop()
        self.refresh()
        self._done()
        self._update_summary()
        self.finished.emit(result)

    def _on_errored(self, exc: BaseException) -> None:
        message = printable(str(exc) or type(exc).__name__)
        self.view.failed(message)
        self._done()
        self.summary_label.setText(breakable(f"error: {message}", LINE_CHARS))
        self.failed.emit(message)

    def _on_aborted(self) -> None:
        self.view.cancelled()
        self._done()
        self.refresh()
        self._update_summary("cancelled")

    def _done(self) -> None:
        self.progress.hide()
        self.cancel_button.hide()

    def _update_summary(self, suffix: str = "") -> None:
        r = self.result
        if r is None:
            return
        if len(r.checkpoints) == 1 and not suffix:  # nothing changes across one checkpoint
            self.summary_label.setText(breakable(printable(
                f"{r.checkpoints[0].path} is one checkpoint: a series needs at least two to show how the weights "
                "change (File > Open shows this one; the series follows more as they are written)"), LINE_CHARS))
            return
        by = {"step": "step", "epoch": "epoch", "name": "numbers in their names"}[r.order_by]
        sources = ", ".join(r.order_sources)
        text = f"{plural(len(r.checkpoints), 'checkpoint')}, {plural(len(r.tensors), 'tensor')}, ordered by {by}"
        if sources and r.order_by != "name":
            text += f" (found in: {sources})"
        text += f"; {plural(len(self.current_findings()), 'finding')}"
        unsafe = sum(1 for ref in r.checkpoints if ref.unsafe_globals)
        if unsafe:
            text += f"; {unsafe} checkpoint{'' if unsafe == 1 else 's'} reference unsafe globals (not run)"
        self.summary_label.setText(breakable(printable(text + (f" — {suffix}" if suffix else "")), LINE_CHARS))

    # --- showing ---------------------------------------------------------------------------------
    def _build_tree(self) -> None:
        assert self.result is not None
        self.tree.clear()
        self._items = {}
        modules: dict[str, QTreeWidgetItem] = {}
        self._module_items = modules
        names = list(self.result.tensors)
        for name in names:
            parent: QTreeWidgetItem | None = None
            above = ""
            for prefix in module_prefixes(name):  # bounded depth: a 100,000-dot name is not as deep
                item = modules.get(prefix)
                if item is None:
                    item = QTreeWidgetItem([printable(prefix[len(above) + 1 if above else 0:])])
                    item.setData(0, KIND_ROLE, "module")
                    item.setData(0, NAME_ROLE, prefix)
                    (parent.addChild(item) if parent is not None else self.tree.addTopLevelItem(item))
                    modules[prefix] = item
                parent, above = item, prefix
            leaf = QTreeWidgetItem([printable(name[len(above) + 1 if above else 0:])])
            leaf.setData(0, KIND_ROLE, "tensor")
            leaf.setData(0, NAME_ROLE, name)
            leaf.setToolTip(0, printable(name))
            (parent.addChild(leaf) if parent is not None else self.tree.addTopLevelItem(leaf))
            self._items[name] = leaf
        self._tree_names = names
        self.tree.expandToDepth(1)
        self.tree.resizeColumnToContents(0)

    def done_count(self) -> int:
        """Checkpoints whose figures are complete."""
        return self.result.done if self.result is not None else 0

    def current_findings(self) -> list[Any]:
        """The findings over the checkpoints read so far."""
        if self.result is None:
            return []
        if self.view.phase == Phase.READY:
            return self.result.findings
        return find_findings(self.result)

    def refresh(self) -> None:
        """Show the figures of every checkpoint read so far."""
        r = self.result
        if r is None:
            return
        if list(r.tensors) != self._tree_names:
            self._build_tree()
            self.select_default()
        done = self.done_count()
        for name, item in self._items.items():
            s = r.tensors[name]
            last = next((t for t in range(done - 1, -1, -1) if s.stats[t] is not None), None)
            item.setText(1, "[" + ", ".join(map(str, s.shape or ())) + "]")
            item.setText(2, _norm(s.stats[last]) if last is not None else MISSING)
            ratio = next((s.update_ratio[t] for t in range(done - 1, 0, -1) if s.update_ratio[t] is not None), None)
            item.setText(3, figure(ratio))
            item.setText(4, _nonfinite(s.stats[last]) if last is not None else MISSING)
        for column in range(1, self.tree.columnCount()):  # captions and figures whole (the tree scrolls)
            self.tree.resizeColumnToContents(column)
        self._fill_findings()
        axis = {"step": "step", "epoch": "epoch", "name": "checkpoint"}[r.order_by]
        self.heatmap.set_cells(cell_kinds(r, done, HEAT_FLOOR), [printable(n) for n in r.tensors],
                               [printable(self.view.column_label(t)) for t in range(len(r.checkpoints))], axis)
        self._update_lines()
        self.scalars.refresh()
        self._start_spectra(restart=False)
        self.graph.refresh()

    def select_default(self) -> None:
        """With nothing selected, select the largest modules (by their floating-point values), so the plots
        show something: the model's own modules, not optimizer state."""
        r = self.result
        if r is None or self.tree.selectedItems():
            return
        sizes: dict[str, int] = {}
        order: list[str] = []
        for name, s in r.tensors.items():
            if s.param is not None or _OPTIMIZER_STATE.search(name) or s.dtype is None or s.shape is None:
                continue
            if math.prod(s.shape) <= 1:  # a saved score or counter (Lightning's best_model_score): no weight
                continue
            if not (dtypes.is_floating(s.dtype) or dtypes.is_complex(s.dtype)):
                continue
            module = name.rsplit(".", 1)[0] if "." in name else name
            if module not in sizes:
                order.append(module)
            sizes[module] = sizes.get(module, 0) + math.prod(s.shape)
        largest = set(sorted(order, key=lambda m: -sizes[m])[:DEFAULT_MODULES])
        chosen = [m for m in order if m in largest]
        self.tree.blockSignals(True)
        try:
            for module in chosen:
                item = self._module_items.get(module) or self._items.get(module)
                if item is not None:
                    item.setSelected(True)
        finally:
            self.tree.blockSignals(False)
        self._on_selection_changed()

    def _upto(self, values: list[Any]) -> list[Any]:
        done = self.done_count()
        return [v if t < done else None for t, v in enumerate(values)]

    def _fill_findings(self) -> None:
        assert self.result is not None
        findings = self.current_findings()
        self.findings_list.clear()
        self._shown_findings = list(findings)
        for i, f in enumerate(findings):
            where = self.result.label(f.index)
            tensor = f.tensor if f.tensor is not None else os.path.basename(os.path.normpath(f.checkpoint))
            item = QListWidgetItem(printable(f"{where}  {f.kind}  {tensor}: {f.detail}"))
            item.setData(NAME_ROLE, f.tensor)
            item.setData(KIND_ROLE, f.kind)
            item.setData(FINDING_ROLE, i)
            item.setToolTip(printable(f.checkpoint))
            _color_finding(item, theme())
            self.findings_list.addItem(item)
        self.findings_label.setText(f"Findings ({len(findings)})")

    def selected(self) -> list[tuple[str, str]]:
        """(kind, name) of the selected tree rows: 'tensor' or 'module'."""
        return [(i.data(0, KIND_ROLE), i.data(0, NAME_ROLE)) for i in self.tree.selectedItems()]

    def select_tensor(self, name: str) -> bool:
        """Select the tree row of tensor ``name`` (and show it); False when there is none."""
        item = self._items.get(name)
        if item is None:
            return False
        self.tree.clearSelection()
        self.tree.setCurrentItem(item)
        item.setSelected(True)
        self.tree.scrollToItem(item)
        return True

    def select_tensors(self, names: list[str]) -> int:
        """Select the tree rows of the tensors `names` (the boxes selected in the graph); returns how many."""
        items = [self._items[n] for n in names if n in self._items]
        if not items:
            return 0
        self._from_graph = True
        self.tree.blockSignals(True)  # one selection change for the plots, not one per row
        try:
            self.tree.clearSelection()
            self.tree.setCurrentItem(items[0])
            for item in items:
                item.setSelected(True)
            self.tree.scrollToItem(items[0])
        finally:
            self.tree.blockSignals(False)
        try:
            self._on_selection_changed()
        finally:
            self._from_graph = False
        return len(items)

    def _on_finding_clicked(self, item: QListWidgetItem) -> None:
        index = item.data(FINDING_ROLE)
        if self.result is None or index is None or not 0 <= index < len(self._shown_findings):
            return
        finding = self._shown_findings[index]
        self._marking = True
        try:
            if finding.tensor:
                self.select_tensor(finding.tensor)
            elif finding.module and finding.module in self._module_items:  # a loss spike's module
                self.tree.clearSelection()
                self._module_items[finding.module].setSelected(True)
                self.tree.scrollToItem(self._module_items[finding.module])
        finally:
            self._marking = False
        self.mark_finding(finding)

    def mark_finding(self, finding: Any) -> None:
        """Mark a finding's checkpoint in the lines and its cell in the heat-map."""
        r = self.result
        if r is None or not 0 <= finding.index < len(r.checkpoints):
            return
        x = r.x_values()[finding.index]
        self.lines.mark(x, printable(f"{r.label(finding.index)}: {finding.kind}"))
        self.scalars.mark(x, printable(f"{r.label(finding.index)}: {finding.kind}"))
        names = list(r.tensors)
        row = names.index(finding.tensor) if finding.tensor in r.tensors else None
        self.heatmap.mark(row, finding.index)

    def _on_heat_row(self, row: int) -> None:
        if self.result is not None and row < len(self.result.tensors):
            self.select_tensor(list(self.result.tensors)[row])

    def _on_selection_changed(self) -> None:
        if not self._marking:  # a selection of the user's own: the last finding's mark goes
            self.lines.mark(None)
            self.scalars.mark(None)
            self.heatmap.mark(None)
        self._update_lines()
        self._start_histograms()
        self._start_spectra(restart=True)
        if not self._from_graph:
            self.graph.show_keys([n for k, n in self.selected() if k == "tensor"])

    def _update_lines(self) -> None:
        r = self.result
        if r is None:
            return
        chosen = self.selected()[:MAX_LINES]
        lines: dict[str, tuple[list[Any], ...]] = {}
        modules = {m.name: m for m in module_series(r, [n for k, n in chosen if k == "module"])}
        for kind, name in chosen:
            if kind == "module" and name in modules:
                m = modules[name]
                bad = [None if a is None else a + (b or 0) for a, b in zip(m.nan, m.inf, strict=True)]
                lines[f"{name} (module)"] = (self._upto(m.norm), self._upto(m.update_ratio), self._upto(bad))
            elif kind == "tensor" and name in r.tensors:
                s = r.tensors[name]
                bad = [None if st is None else st.nan + st.posinf + st.neginf for st in s.stats]
                lines[name] = (self._upto(s.figure("norm")), self._upto(s.update_ratio), self._upto(bad))
        axis = {"step": "step", "epoch": "epoch", "name": "checkpoint"}[r.order_by]
        self.lines.set_lines(r.x_values(), {printable(k): v for k, v in lines.items()}, axis)

    # --- histograms over the run -------------------------------------------------------------------
    def _start_histograms(self) -> None:
        self.histogram_job.cancel()
        tensors = [n for k, n in self.selected() if k == "tensor"]
        r = self.result
        label = ""
        if not tensors and r is not None:  # a module (the default selection): its largest tensor
            tensors, label = self._largest_of_modules()
        if not tensors or r is None or self.done_count() == 0:
            self.histograms.clear("Select a tensor to see its values over the run.")
            return
        name = tensors[0]
        s = r.tensors[name]
        done = self.done_count()
        lows = [st.min for st in s.stats[:done] if st is not None and st.min is not None]
        highs = [st.max for st in s.stats[:done] if st is not None and st.max is not None]
        if not lows:
            self.histograms.clear(f"{printable(name)}: no finite value to draw")
            return
        value_range = (float(min(lows)), float(max(highs)))
        paths = [ref.path for ref in r.checkpoints[:done]]
        self.histograms.clear(f"{printable(name)}: reading…")
        self._hist_request = (name, value_range, label)
        self.histogram_job.start(histograms_job, paths, name, value_range, HIST_BINS, self._res.holdings)

    def _largest_of_modules(self) -> tuple[list[str], str]:
        """The largest floating-point tensor of the first selected module that has one, and words saying so."""
        r = self.result
        assert r is not None
        members = module_names(r.tensors)
        for kind, module in self.selected():
            if kind != "module":
                continue
            floating = [n for n in members.get(module, []) if (s := r.tensors[n]).shape is not None
                        and s.dtype is not None and dtypes.is_floating(s.dtype)]
            if floating:
                name = max(floating, key=lambda n: math.prod(r.tensors[n].shape or ()))
                return [name], f" (the largest tensor of the selected module {printable(module)})"
        return [], ""

    def _on_histograms(self, hists: list[Any]) -> None:
        if self._hist_request is None:
            return
        name, value_range, label = self._hist_request  # the slot forwards the current job's result only
        self.histograms.set_histograms(printable(name) + label, hists, value_range)
        self.histograms_ready.emit((name, hists))

    def _on_histograms_error(self, exc: BaseException) -> None:
        self.histograms.clear(f"error: {printable(exc)}")


    # --- weight spectra over the run ----------------------------------------------------------------
    def _on_spectral_toggled(self, on: bool) -> None:
        if on:
            self.views.addTab(self.spectra, "Spectra")
            self.views.setCurrentWidget(self.spectra)
            self._start_spectra(restart=True)
        else:
            self._stop_spectra()
            index = self.views.indexOf(self.spectra)
            if index >= 0:
                self.views.removeTab(index)

    def spectral_names(self) -> list[str]:
        """The weights the Spectra view draws: the selected tensors and the tensors of the selected modules
        that are analysed (2-D floating weights, conv kernels), at most MAX_LINES."""
        r = self.result
        if r is None:
            return []
        chosen: list[str] = []
        members = module_names(r.tensors)
        for kind, name in self.selected():
            for tensor in (members.get(name, []) if kind == "module" else [name]):
                s = r.tensors.get(tensor)
                if s is not None and tensor not in chosen and is_matrix(s.shape, s.dtype):
                    chosen.append(tensor)
        return chosen[:MAX_LINES]

    def forget_spectra(self, paths: list[str]) -> None:
        """Drop the fitted figures of checkpoints that changed (Follow): they are fitted again as they are now."""
        gone = set(paths)
        stale = [key for key in self._spectra if key[0] in gone]
        for key in stale:
            del self._spectra[key]
        if gone and self.spectra_job.running:
            self._stop_spectra()  # it may be reading the old contents; refresh() starts it again

    def _stop_spectra(self) -> None:
        self.spectra_job.cancel()

    def _start_spectra(self, restart: bool) -> None:
        """Fit what the Spectra view lacks in a worker (restart: drop a fit of another selection)."""
        r = self.result
        if not self.spectral_box.isChecked() or r is None:
            return
        if self.spectra_job.running and not restart:
            return  # it picks up what is new when it ends
        self._stop_spectra()
        names = self.spectral_names()
        done = self.done_count()
        wanted = [(r.checkpoints[t].path, name) for t in range(done) if r.checkpoints[t].error is None
                  for name in names if r.tensors[name].present(t)
                  and (r.checkpoints[t].path, name) not in self._spectra]
        if not wanted:
            self._draw_spectra(names)
            return
        self.spectra.set_message(f"fitting {len(wanted)} spectr{'um' if len(wanted) == 1 else 'a'}…")
        self.spectra_job.start(iter_spectra, wanted, self._res.holdings, remote=self.workspace.remote)

    def _on_spectra(self, found: dict[tuple[str, str], tuple[float | None, float | None]]) -> None:
        self._spectra.update(found)
        self._start_spectra(restart=True)  # what was read (or selected) meanwhile: its job has ended

    def _on_spectra_error(self, exc: BaseException) -> None:
        self.spectra_job.cancel()
        self.spectra.set_message(f"error: {printable(exc)}")

    def _draw_spectra(self, names: list[str]) -> None:
        r = self.result
        assert r is not None
        done = self.done_count()
        lines: dict[str, tuple[list[float | None], list[float | None]]] = {}
        for name in names:
            figures = [self._spectra.get((ref.path, name), (None, None)) if t < done else (None, None)
                       for t, ref in enumerate(r.checkpoints)]
            lines[printable(name)] = ([a for a, _ in figures], [sr for _, sr in figures])
        axis = {"step": "step", "epoch": "epoch", "name": "checkpoint"}[r.order_by]
        self.spectra.set_lines(r.x_values(), lines, axis)
        self.spectra_ready.emit(names)


def _norm(stats: Any) -> str:
    """The L2 norm of the finite values, or "no finite" when the tensor holds none (not 0: it is not zeroed)."""
    if stats.numel and stats.nan + stats.posinf + stats.neginf == stats.numel:
        return "no finite"
    return figure(stats.l2)


def _nonfinite(stats: Any) -> str:
    """NaN/Inf value counts ("12/0"), `MISSING` when there are none."""
    inf = stats.posinf + stats.neginf
    return f"{stats.nan}/{inf}" if stats.nan or inf else MISSING


_OPTIMIZER_STATE = re.compile(r"(^|\.)state\.\d+(\.|$)")  # an optimizer's state by id (mapping not known)


# --- ways in ---------------------------------------------------------------------------------------
def open_series_tab(window: Any, paths: list[str]) -> SeriesTab:
    """Open a series tab in ``window`` and start reading (File > Open Series…, ``--series``)."""
    tab = SeriesTab(paths, workspace=window.workspace, graph_cache=window.graph_cache)
    first = tab.paths[0] if tab.paths else ""
    title = f"Series: {os.path.basename(first.rstrip(os.sep))}" if len(tab.paths) == 1 else f"Series: {len(tab.paths)} paths"
    window.add_tab(tab, title, list(tab.paths))
    tab.start()
    return tab


def choose_series_folder(window: Any) -> str | None:
    """File > Open Series…: pick the folder that holds a run's checkpoints."""
    folder = QFileDialog.getExistingDirectory(window, "Open a training run (folder of checkpoints)")
    return folder or None

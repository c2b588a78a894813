"""The Graph view of a checkpoint: the model's blocks as a diagram, every op one click away, searched, coloured.

What is shown and why lives in a Qt-free `ViewState` (`core/graph/view_state.py`): the status, the mode (the
architecture view, or every op), the modules open and pinned, the selection (kept when it is asked for before
the graph is read), the search. This widget renders it: the graph is read, nested and folded
(`core.graph.adapter.hierarchy_job`) and laid out in workers, one job at a time per kind (a new layout cancels
the one running; Cancel stops it); layouts are kept per view. Selecting a box selects the tensors it reads in
the tree (`keys_selected`); a tensor selected in the tree shows the node that reads it (`show_keys`), opening
its module. Nothing here reads tensor bytes on the GUI thread: overlay figures come from the checkpoint's
`Analysis` in a worker, for the boxes shown only; Model Explorer's node data is read and written in a worker.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QEvent, QRectF, Qt, Signal
from PySide6.QtGui import QKeySequence, QPalette, QShortcut
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.figures.analysis import Analysis
from ckptview.core.graph import GraphCache
from ckptview.core.graph.adapter import (
    Coloured,
    GraphJob,
    Laid,
    code_graph_job,
    colour_job,
    describe_source,
    hierarchy_job,
    layout_job,
    read_node_data_job,
    save_node_data_job,
)
from ckptview.core.graph.collapse import ALL_OPS, ARCHITECTURE, GROUP, Hierarchy, View
from ckptview.core.graph.compare import GraphComparison
from ckptview.core.graph.dot import INFERRED
from ckptview.core.graph.layout import INSTALL_HINT, LayoutCache, NoLayoutEngine, engines
from ckptview.core.graph.model_explorer import NodeData, box_values
from ckptview.core.graph.overlay import NONFINITE, Figure, KeyFigures, scale_of
from ckptview.core.graph.view_state import Reveal, Status, ViewState, around, describe_box, step
from ckptview.core.jobs import Progress
from ckptview.core.text import printable
from ckptview.core.units import plural
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.graph.canvas import GraphCanvas
from ckptview.gui.graph.code_dialog import choose_model_code
from ckptview.gui.graph.export import save_png, save_svg
from ckptview.gui.graph.legend import Legend
from ckptview.gui.graph.minimap import Minimap
from ckptview.gui.graph.scene import GraphScene
from ckptview.gui.graph.toolbar import GraphToolbar

IMPORTED = "imported"  # the figure name of values read from Model Explorer node data


def _capitalised(step_: Progress) -> str:
    return printable(step_.message[:1].upper() + step_.message[1:]) + "…" if step_.message else ""


class GraphPage(QWidget):
    """The Graph view of one checkpoint; `keys_selected(list[str])` when boxes are selected.

    `checkpoint` and `analysis` give the figures of its weights (None: a host gives every figure, as a run
    does for a step, with `set_given_figures`); `job` replaces the core's `graph_job` (a host that opens
    the checkpoint in the worker first, a comparison that merges two graphs); `name` is what an export is
    called after."""

    keys_selected = Signal(list)
    graph_ready = Signal()
    layout_ready = Signal()
    overlay_ready = Signal()
    legend: Legend
    canvas: GraphCanvas

    def __init__(self, checkpoint: Checkpoint | None, analysis: Analysis | None, job: GraphJob | None = None,
                 parent: QWidget | None = None, name: str = "", graph_cache: GraphCache | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("graphPage")
        self.checkpoint, self.analysis = checkpoint, analysis
        self._job = job  # None: the core's graph_job
        self._graph_cache = graph_cache  # where the core keeps traced graphs: the window's (None: the user's file)
        self.name = name or (os.path.basename(checkpoint.path.rstrip("/" + os.sep)) if checkpoint is not None
                             else "graph")
        self.state = ViewState()
        self.view: View | None = None
        self.cache = LayoutCache()
        self.figure: Figure | None = None
        self.coloured: Coloured | None = None
        self.comparison: GraphComparison | None = None
        self._known: dict[str, KeyFigures] = {}  # figures of this checkpoint's tensors, by key
        self._given: dict[str, dict[str, KeyFigures]] = {}  # figures a host gave, by figure then key
        self._imported: NodeData | None = None  # values read from Model Explorer node data
        self._focus: str | None = None  # item key to centre after the next layout
        self._laid: Laid | None = None  # the drawing shown
        self._from_tree = False
        self.graph_slot, self.layout_slot, self.overlay_slot = JobSlot(self), JobSlot(self), JobSlot(self)
        self.file_slot = JobSlot(self)  # Model Explorer node data, read or written
        self.graph_slot.yielded.connect(self._on_progress)
        self.graph_slot.returned.connect(self._on_graph)
        self.graph_slot.errored.connect(self._on_graph_error)
        self.graph_slot.aborted.connect(lambda: self.state.cancelled())  # the state is replaced by a trace
        self.layout_slot.yielded.connect(self._on_progress)
        self.layout_slot.returned.connect(self._on_laid)
        self.layout_slot.errored.connect(lambda exc: self._say(
            str(exc) if isinstance(exc, NoLayoutEngine) else f"layout failed: {printable(exc)}"))
        def read_so_far(p: Progress) -> None:
            if p.total:
                self.legend.setToolTip(f"{p.done:,} of {plural(p.total, 'tensor')} read")

        self.overlay_slot.yielded.connect(read_so_far)
        self.overlay_slot.returned.connect(self._on_coloured)
        self.overlay_slot.errored.connect(lambda exc: self._say(f"overlay failed: {printable(exc)}"))
        self.file_slot.returned.connect(self._on_node_data)
        self.file_slot.errored.connect(lambda exc: self._say(f"Model Explorer data: {printable(exc)}"))
        self._build()

    @property
    def hierarchy(self) -> Hierarchy | None:
        """The graph nested by module, once read."""
        return self.state.hierarchy

    # -- widgets ---------------------------------------------------------------------------------------
    def _build(self) -> None:
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(3)
        bar = self.toolbar = GraphToolbar(self.checkpoint is not None and self.analysis is not None)
        self.search, self.match_label, self.overlay_box = bar.search, bar.match_label, bar.overlay_box
        self.top_button, self.fit_button, self.export_button = bar.top_button, bar.fit_button, bar.export_button
        self.ops_button, self.pin_button = bar.ops_button, bar.pin_button
        bar.search.textChanged.connect(self._on_search_text)
        bar.next_requested.connect(self.next_match)
        bar.overlay_box.currentIndexChanged.connect(lambda _i: self.set_figure(self.overlay_box.currentData()))
        bar.ops_button.toggled.connect(lambda on: self.set_mode(ALL_OPS if on else ARCHITECTURE))
        bar.pin_button.clicked.connect(self.toggle_pin)
        bar.top_button.clicked.connect(self.collapse_all)
        bar.fit_button.clicked.connect(lambda: self.canvas.fit())
        bar.export_chosen.connect(self._export_dialog)
        box.addWidget(bar)
        self.source_label = QLabel("Reading the graph…")
        self.source_label.setObjectName("graphSource")
        self.source_label.setWordWrap(True)
        self.retry_button = QPushButton("Read the graph")
        self.retry_button.setObjectName("graphRetry")
        self.retry_button.hide()
        self.retry_button.clicked.connect(self.start)
        self.code_button = QPushButton("Trace your model code…")
        self.code_button.setObjectName("graphCode")
        self.code_button.setToolTip("No library names this architecture: trace your own model class (a .py file) "
                                    "in the worker, as a forward pass with model code runs it")
        self.code_button.hide()
        def trace_chosen() -> None:
            spec = choose_model_code(self, os.getcwd())
            if spec:
                self.trace_code(spec)

        self.code_button.clicked.connect(trace_chosen)
        source_row = QHBoxLayout()
        source_row.addWidget(self.source_label, 1)
        source_row.addWidget(self.retry_button, 0, Qt.AlignmentFlag.AlignTop)
        source_row.addWidget(self.code_button, 0, Qt.AlignmentFlag.AlignTop)
        box.addLayout(source_row)
        unread_row = QHBoxLayout()
        self.unread_button = QToolButton()
        self.unread_button.setCheckable(True)
        self.unread_button.hide()
        self.unread_list = QListWidget()
        self.unread_list.setObjectName("graphUnread")
        self.unread_list.setMaximumHeight(90)
        self.unread_list.hide()
        self.unread_button.toggled.connect(self.unread_list.setVisible)
        self.unread_list.itemActivated.connect(lambda item: self.keys_selected.emit([item.text()]))
        unread_row.addWidget(self.unread_button)
        unread_row.addStretch(1)
        box.addLayout(unread_row)
        box.addWidget(self.unread_list)
        self.scene = GraphScene(self.palette())
        self.canvas = GraphCanvas(self.scene)
        self.canvas.clicked.connect(self._on_clicked)
        self.canvas.frame_clicked.connect(self.collapse)
        self.canvas.navigated.connect(self._on_navigated)
        self.canvas.tooltip_text = self.tooltip
        self.minimap = Minimap(self.canvas)
        box.addWidget(self.canvas, 1)
        bottom = QHBoxLayout()
        self.legend = Legend()
        self.legend.hide()
        self.status = QLabel("")
        self.status.setObjectName("graphStatus")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.hide()
        self.cancel_button.clicked.connect(self.cancel)
        bottom.addWidget(self.legend, 1)
        bottom.addWidget(self.status)
        bottom.addWidget(self.cancel_button)
        box.addLayout(bottom)
        shortcut = QShortcut(QKeySequence(Qt.Key.Key_F3), self)  # F3 anywhere in the view, too
        shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(self.next_match)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        """A new palette (View > Palette, the desktop's light/dark switch) redraws the graph in its colours."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.restyle()

    def restyle(self) -> None:
        """Draw the graph shown again in the widget's palette, where it was, with its marks and colours."""
        self.scene.palette_ = QPalette(self.palette())
        laid = self._laid
        if laid is None or laid.view is not self.view or self.hierarchy is None:
            return
        centre, scale = self.canvas.mapToScene(self.canvas.viewport().rect().center()), self.canvas.scale_factor
        self.scene.draw(laid.view, laid.placed, self.hierarchy.graph, self.hierarchy.graph.source == INFERRED)
        self.canvas.set_zoom(scale)
        self.canvas.centerOn(centre)
        self.canvas.refresh_detail()
        self.minimap.redraw()
        self._apply_marks()
        coloured = self.coloured
        if coloured is not None and coloured.view is self.view:
            self.scene.colour(coloured.boxes, coloured.scale, coloured.figure is NONFINITE)

    def _say(self, text: str, busy: bool = False) -> None:
        self.status.setText(text)
        self.cancel_button.setVisible(busy)

    def _on_progress(self, step_: Progress) -> None:
        if step_.message:
            self._say(_capitalised(step_), busy=True)

    # -- reading and laying out ------------------------------------------------------------------------
    def start(self) -> None:
        """Read the graph in a worker (once; again after it was cancelled)."""
        if self.state.may_read():
            if not engines():
                self.state.failed(f"Drawing a graph needs a layout library: {INSTALL_HINT}")
                self.source_label.setText(self.state.message)
                return
            self.state.loading()
            self.retry_button.hide()
            self.source_label.setText("Reading the graph…")
            self._say("Reading the graph…", busy=True)
            self.graph_slot.start(hierarchy_job, self.checkpoint, self._job, cache=self._graph_cache)

    def trace_code(self, spec: str) -> None:
        """Draw the graph of your model code `spec` (`path/file.py:Class`), traced in the worker as a run with
        model code loads it; the checkpoint's keys are placed on it."""
        if self.checkpoint is None or self.state.status is Status.LOADING:
            return
        self._job = code_graph_job(spec)
        self.state = ViewState(pending=list(self.state.pending))
        self.cache = LayoutCache()
        self.unread_list.clear()
        self.unread_button.hide()
        self.code_button.hide()
        self.start()

    def cancel(self) -> None:
        """Cancel: the graph's reading (a library's tracing worker is killed), else the layout running."""
        if self.graph_slot.running:
            self.graph_slot.cancel()
            self.state.cancelled()
            self.source_label.setText("Reading the graph was cancelled.")
            self.retry_button.show()
            self._say("Cancelled.")
        elif self.layout_slot.running:
            self.layout_slot.cancel()
            self._say("Layout cancelled.")

    def _on_graph_error(self, exc: object) -> None:
        self.state.failed(printable(exc))
        self.source_label.setText(f"No graph: {self.state.message}")
        self._say("")

    def _on_graph(self, hierarchy: Hierarchy) -> None:
        reveal = self.state.ready(hierarchy)
        graph = hierarchy.graph
        notes = graph.notes[1:] if graph.source == "module-tree" else list(graph.notes)  # the first: in the source
        if graph.source == INFERRED:
            notes = notes[:-1]  # the guess: in the source line
        text = f"Graph: {printable(describe_source(graph))} · {plural(len(graph.nodes), 'node')}"
        if notes:
            text += " · " + " · ".join(printable(n) for n in notes)
        self.source_label.setText(text)
        self.source_label.setToolTip(text)
        self.code_button.setVisible(self.checkpoint is not None and graph.source in (INFERRED, "module-tree"))
        self.ops_button.setEnabled(hierarchy.folding is not None)
        self.ops_button.setChecked(self.state.mode == ALL_OPS)
        if graph.unread:
            self.unread_button.setText(f"{plural(len(graph.unread), 'key')} no node reads")
            self.unread_button.show()
            self.unread_list.addItems([printable(k) for k in graph.unread])
        self.graph_ready.emit()
        if reveal is not None:  # a tensor selected while the graph was read: shown now, never dropped
            self._bring(reveal)
        else:
            self.relayout(self.state.expanded)

    def relayout(self, expanded: frozenset[str], focus: str | None = None) -> None:
        """Lay out the view of `expanded` in a worker (cancelling a layout still running)."""
        if self.hierarchy is None:
            return
        self._focus = focus
        self.state.expanded = frozenset(expanded) | {""}
        self.layout_slot.start(layout_job, self.hierarchy, self.state.expanded, self.cache, mode=self.state.mode)

    def _on_laid(self, laid: Laid) -> None:
        assert self.hierarchy is not None
        first = self.view is None
        self._laid = laid
        self.view = laid.view
        graph = self.hierarchy.graph
        self.scene.draw(laid.view, laid.placed, graph, graph.source == INFERRED)
        self.canvas.refresh_detail()
        self.minimap.redraw()
        self.set_comparison(self.comparison)
        self._apply_marks()
        self._say(f"{len(laid.view.items):,} boxes, {len(laid.view.edges):,} edges ({laid.placed.engine})")
        if self._focus is not None and self._focus in (index := laid.view.index()):
            self.canvas.centre_on(self.scene.boxes[index[self._focus]].rect())
        elif first or self._focus is None:
            self.canvas.start_view()
        self._focus = None
        if self.figure is not None:
            self.set_figure(self.figure)
        self.layout_ready.emit()

    # -- opening and closing ---------------------------------------------------------------------------
    def expand(self, path: str) -> None:
        """Open module `path` (and those above it); the others close unless pinned."""
        if self.hierarchy is not None:
            self.relayout(self.state.opened(path), focus="g:" + path if path else None)

    def collapse(self, path: str) -> None:
        """Close module `path` (and those inside it); it becomes one box again."""
        if self.hierarchy is not None:
            self.relayout(self.state.closed(path), focus="g:" + path)

    def collapse_all(self) -> None:
        """Back to the first view (the architecture's diagram, or every op's top level)."""
        if self.hierarchy is not None:
            self.state.pinned = frozenset()
            self.pin_button.setChecked(False)
            self.relayout(self.state.first())

    def set_mode(self, mode: str) -> None:
        """The architecture view (ARCHITECTURE) or every op as traced (ALL_OPS)."""
        if self.ops_button.isChecked() != (mode == ALL_OPS):
            self.ops_button.setChecked(mode == ALL_OPS)  # comes back here through `toggled`
            return
        if self.hierarchy is not None and mode != self.state.mode:
            self.relayout(self.state.set_mode(mode))

    def toggle_pin(self) -> None:
        """Pin (or unpin) the open module around the selected box, so that opening another keeps it open."""
        index = self.view.index() if self.view is not None else {}
        chosen = next((index[k] for k in self.state.selected if k in index), None)
        path = around(self.view, chosen) if self.view is not None and chosen is not None else None
        if path is None:
            self.pin_button.setChecked(False)
            self._say("Select a box inside an open module to pin that module.")
            return
        pinned = self.state.toggle_pin(path)
        self.pin_button.setChecked(pinned)
        self._say(f"{printable(path)} {'pinned open' if pinned else 'unpinned'}")

    # -- selection, both ways ------------------------------------------------------------------------
    def _on_clicked(self, index: int, expand: bool) -> None:
        assert self.view is not None
        item = self.view.items[index]
        if expand and item.kind == GROUP:
            self.state.selected = [item.key]
            self.expand(item.path)
            return
        self.select_items([item.key])

    def _on_navigated(self, direction: str) -> None:
        """The keyboard: arrows move the selection between boxes, Enter opens a module, Backspace closes one."""
        view, laid = self.view, self._laid
        if view is None or laid is None or not view.items:
            return
        index = view.index()
        current = next((index[k] for k in self.state.selected if k in index), -1)
        if direction == "open":
            if current >= 0 and view.items[current].kind == GROUP:
                self.expand(view.items[current].path)
        elif direction == "close":
            path = around(view, current) if current >= 0 else None
            if path is not None:
                self.collapse(path)
        else:
            target = step(view, laid.placed.boxes, current, direction) if current >= 0 else 0
            self.select_items([view.items[target].key])
            self.canvas.centre_on(self.scene.boxes[target].rect())

    def select_items(self, keys: list[str]) -> None:
        """Select the boxes of `keys` and the tensors they read in the tree."""
        self.state.selected = keys
        self._apply_marks()
        if self._from_tree or self.hierarchy is None:
            return
        self.keys_selected.emit(self.state.keys_of(self.view, keys))

    def show_keys(self, keys: list[str]) -> bool:
        """Show and select the node that reads the first of `keys` a node reads (opening its module); asked
        while the graph is still being read, it is shown once the graph is there."""
        reveal = self.state.reveal_keys(keys)
        if reveal is None:
            return self.hierarchy is None and bool(keys)
        self._from_tree = True
        try:
            self.select_items([reveal.focus])
        finally:
            self._from_tree = False
        self._bring(reveal)
        return True

    def _bring(self, reveal: Reveal) -> None:
        """Centre the box of `reveal.focus`, laying out what shows it first when it is not shown."""
        self.ops_button.blockSignals(True)
        self.ops_button.setChecked(self.state.mode == ALL_OPS)
        self.ops_button.blockSignals(False)
        index = self.view.index() if self.view is not None else {}
        if reveal.focus in index and self.view is not None and self.view.key == (reveal.expanded, self.state.mode):
            self._apply_marks()
            self.canvas.centre_on(self.scene.boxes[index[reveal.focus]].rect())
        else:
            self.relayout(reveal.expanded, focus=reveal.focus)

    def _apply_marks(self) -> None:
        if self.view is None:
            return
        index = self.view.index()
        marks: dict[int, str] = {}
        match = self.state.match_key()
        if match is not None and match in index:
            marks[index[match]] = "match"
        for key in self.state.selected:
            if key in index:
                marks[index[key]] = "selected"
        self.scene.mark(marks)

    # -- search ----------------------------------------------------------------------------------------
    def _on_search_text(self, text: str) -> None:
        found = self.state.search(text)
        self.match_label.setText(f"{found:,} found" if text.strip() else "")
        self._apply_marks()

    def next_match(self) -> None:
        """Go to the next match (Enter, F3): its module is opened, the node centred and highlighted."""
        reveal = self.state.next_match()
        if reveal is None:
            return
        self.match_label.setText(f"{self.state.match_at + 1:,} of {len(self.state.matches):,}")
        self._apply_marks()
        self._bring(reveal)

    # -- overlays --------------------------------------------------------------------------------------
    def set_figure(self, figure: Figure | None) -> None:
        """Colour boxes by `figure` (None: plain); figures are computed in a worker for the boxes shown."""
        self.figure = figure
        if figure is None or self.view is None or self.hierarchy is None:
            self.overlay_slot.cancel()
            self.coloured = None
            self.scene.colour(None, None, False)
            self.legend.show_scale(None, None)
            return
        self.legend.show_scale(figure, None)
        if figure.name == IMPORTED and self._imported is not None:  # per node, from Model Explorer's data
            boxes = box_values(self.hierarchy, self.view, self._imported.values)
            self._on_coloured(Coloured(figure, self.view, boxes, scale_of(figure, [b.value for b in boxes])))
            return
        given = self._given.get(figure.name)
        if given is not None:  # nothing to read: the host's figures
            self.overlay_slot.start(colour_job, figure, self.hierarchy, self.view, None, None, given)
        else:
            self.overlay_slot.start(colour_job, figure, self.hierarchy, self.view, self.checkpoint, self.analysis,
                                    self._known)

    def set_given_figures(self, figure: Figure, known: dict[str, KeyFigures], show: bool = True) -> None:
        """Offer `figure` from figures a host computed (a comparison's relative change, a run's update ratio
        or norm at a step: `core.graph.overlay.pair_figures`, `step_figures`); `show`: colour by it now,
        else only when it is the figure shown."""
        self._given[figure.name] = dict(known)
        if self.figure_index(figure) < 0:
            self.overlay_box.addItem(figure.title, figure)
        if show and self.overlay_box.currentData() is not figure:
            self.overlay_box.setCurrentIndex(self.figure_index(figure))  # comes to set_figure
        elif show or self.figure is figure:
            self.set_figure(figure)

    def figure_index(self, figure: Figure) -> int:
        """Where `figure` is in the colour list (-1: not offered)."""
        return next((i for i in range(self.overlay_box.count()) if self.overlay_box.itemData(i) is figure), -1)

    def _on_coloured(self, coloured: Coloured) -> None:
        if coloured.view is not self.view:
            return
        self.coloured = coloured
        self.scene.colour(coloured.boxes, coloured.scale, coloured.figure is NONFINITE)
        self.legend.show_scale(coloured.figure, coloured.scale, done=True)
        self.legend.setToolTip("")
        self.overlay_ready.emit()

    def set_comparison(self, comparison: GraphComparison | None) -> None:
        """A comparison's merged graph is shown: outline the boxes of nodes added, removed, changed in shape."""
        self.comparison = comparison
        if comparison is None or self.view is None or self.hierarchy is None:
            return
        status: dict[int, str] = {}
        for i, item in enumerate(self.view.items):
            ids = ([self.hierarchy.node(item.node).id] if item.kind != GROUP else
                   [self.hierarchy.node(n).id for p in (item.instances or (item.path,)) for n in self.hierarchy.below(p)])
            found = {comparison.status.get(node_id, "same") for node_id in ids}
            kind = next((k for k in ("shape", "added", "removed") if k in found), None)
            if kind is not None:
                status[i] = kind
        self.scene.set_status(status)

    def tooltip(self, index: int) -> str:
        """The hover text of box `index`: name, op or count, module, tensors read, the overlay's figure."""
        if self.view is None or self.hierarchy is None or index >= len(self.view.items):
            return ""
        coloured = self.coloured if self.coloured is not None and self.coloured.view is self.view else None
        compared = None
        if self.comparison is not None and self.view.items[index].kind != GROUP:
            compared = self.comparison.status.get(self.hierarchy.node(self.view.items[index].node).id, "same")
        lines = describe_box(self.hierarchy, self.view, index, coloured.figure if coloured else None,
                             coloured.boxes[index] if coloured else None, compared)
        return "\n".join(printable(line) for line in lines)

    # -- export and Model Explorer -------------------------------------------------------------------
    def export_svg(self, path: str) -> None:
        """Save the whole drawing as SVG."""
        self.scene.set_detail(3)
        self.scene.ensure_all_labels()
        try:
            save_svg(self.scene, path, f"ckptview: {self.name}")
        finally:
            self.canvas.refresh_detail()

    def export_png(self, path: str) -> bool:
        """Save the whole drawing as PNG (scaled down past 8,000 px a side)."""
        self.scene.set_detail(3)
        self.scene.ensure_all_labels()
        try:
            return save_png(self.scene, path, self.palette().color(QPalette.ColorRole.Base))
        finally:
            self.canvas.refresh_detail()

    def export_node_data(self, path: str, read: bool = False) -> bool:
        """Save every node's figure shown as Model Explorer node data (`read`: colour by such a file instead),
        in a worker; False when there is nothing to save or no graph yet."""
        if self.hierarchy is None:
            return False
        if read:
            self.file_slot.start(read_node_data_job, path, self.hierarchy)
            return True
        figure = self.figure
        if figure is None or figure.name == IMPORTED:
            self._say("Choose a colour to save first.")
            return False
        given = self._given.get(figure.name)
        self.file_slot.start(save_node_data_job, path, figure, self.hierarchy,
                             None if given is not None else self.checkpoint, None if given is not None else self.analysis,
                             given if given is not None else self._known)
        return True

    def _on_node_data(self, result: object) -> None:
        """A node-data file was written (a count), or read (its values: offered and shown as a colour)."""
        if not isinstance(result, NodeData):
            count = result if isinstance(result, int) else 0
            self._say(f"Saved Model Explorer data for {plural(count, 'node')}")
            return
        self._imported = result
        figure = Figure(IMPORTED, "Model Explorer data", False, "given")
        if self.figure_index(figure) < 0:
            previous = next((i for i in range(self.overlay_box.count())
                             if isinstance(self.overlay_box.itemData(i), Figure)
                             and self.overlay_box.itemData(i).name == IMPORTED), -1)
            if previous >= 0:
                self.overlay_box.removeItem(previous)
            self.overlay_box.addItem(figure.title, figure)
        self._say(f"Model Explorer data: {plural(len(result.values), 'node')}"
                  + (f", {plural(result.unknown, 'key')} of no node here" if result.unknown else ""))
        self.overlay_box.setCurrentIndex(self.figure_index(figure))

    def _export_dialog(self, kind: str) -> None:
        base = os.path.splitext(self.name)[0] or "graph"
        if kind == "open-node-data":
            path, _ = QFileDialog.getOpenFileName(self, "Colour by Model Explorer node data", "", "JSON (*.json)")
            if path:
                self.export_node_data(path, read=True)
            return
        suffix = "json" if kind == "node-data" else kind
        path, _ = QFileDialog.getSaveFileName(self, f"Save the graph as {suffix.upper()}", f"{base}-graph.{suffix}",
                                              f"{suffix.upper()} (*.{suffix})")
        if not path:
            return
        if kind == "node-data":
            self.export_node_data(path)
            return
        try:
            if kind == "svg":
                self.export_svg(path)
                ok = True
            else:
                ok = self.export_png(path)
        except OSError:
            ok = False
        self._say(f"Saved {printable(path)}" if ok else f"Could not save {printable(path)}")

    # -- lifetime ------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop every job (the tab is closing or reloading)."""
        for slot in (self.graph_slot, self.layout_slot, self.overlay_slot, self.file_slot):
            slot.cancel()
        if self.state.status is Status.LOADING:
            self.state.cancelled()  # read again when asked

    def item_rect(self, key: str) -> QRectF | None:
        """The scene rectangle of the box of `key` (tests, screenshots)."""
        index = self.view.index() if self.view is not None else {}
        return self.scene.boxes[index[key]].rect() if key in index else None

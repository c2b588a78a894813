"""The Graph view of a checkpoint: the model's graph nested by module, searched, coloured by its weights.

The graph is read (the core's `graph_job`, with its progress; Cancel stops it and the tracing worker with
it), nested (`Hierarchy`) and laid out (`core.graph.layout`) in workers (`core.graph.adapter`'s jobs), one
job at a time per kind (a new layout cancels the one running; Cancel stops it); layouts are kept per
expanded set. Selecting a box selects the tensors it reads in the tree (`keys_selected`); a tensor
selected in the tree shows the node that reads it (`show_keys`), expanding its module. Nothing here reads
tensor bytes on the GUI thread: overlay figures come from the checkpoint's `Analysis` in a worker, for the
boxes shown only.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QEvent, QObject, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QKeySequence, QPainter, QPaintEvent, QPalette, QShortcut
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QMenu,
    QPushButton,
    QSizePolicy,
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
    colour_job,
    describe_source,
    hierarchy_job,
    layout_job,
)
from ckptview.core.graph.collapse import GROUP, Hierarchy, View, short_op
from ckptview.core.graph.layout import INSTALL_HINT, LayoutCache, NoLayoutEngine, engines
from ckptview.core.graph.overlay import CHECKPOINT_FIGURES, NONFINITE, Figure, KeyFigures, Scale, describe
from ckptview.core.jobs import Progress
from ckptview.core.text import printable
from ckptview.core.units import plural
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.graph.canvas import GraphCanvas
from ckptview.gui.graph.export import save_png, save_svg
from ckptview.gui.graph.scene import NAN_COLOR, GraphScene, colour_at


class Legend(QWidget):
    """The colour bar: the figure's name, its range, and the NaN/Inf swatch."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("graphLegend")
        self.figure: Figure | None = None
        self.scale: Scale | None = None
        self.done = False  # the figures arrived (a scale of None then: no box has the figure)
        self.setMinimumHeight(self.fontMetrics().height() + 8)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def show_scale(self, figure: Figure | None, scale: Scale | None, done: bool = False) -> None:
        """Show `figure` over `scale` (figure None: hidden; `done`: the figures arrived)."""
        self.figure, self.scale, self.done = figure, scale, done
        self.setVisible(figure is not None)
        self.update()

    def text(self) -> str:
        """What the legend says, as text (tests, screen readers)."""
        if self.figure is None:
            return ""
        if self.scale is None:
            return f"{self.figure.title}: {'no box has one here' if self.done else 'no values yet'}"
        low, high = self.scale.ticks()
        return f"{self.figure.title}{' (log)' if self.scale.log else ''}: {low} – {high}; NaN/Inf"

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        """Name, low end, the bar, high end, then the NaN/Inf swatch."""
        if self.figure is None:
            return
        painter = QPainter(self)
        metrics = self.fontMetrics()
        height = self.height()
        text_colour = self.palette().color(QPalette.ColorRole.WindowText)
        painter.setPen(text_colour)
        x = 4
        if self.scale is None:
            painter.drawText(x, 0, self.width(), height, Qt.AlignmentFlag.AlignVCenter, self.text())
            return
        low, high = self.scale.ticks()
        name = self.figure.title + (" (log)" if self.scale.log else "")
        for part in (name, low):
            painter.drawText(x, 0, metrics.horizontalAdvance(part) + 2, height, Qt.AlignmentFlag.AlignVCenter, part)
            x += metrics.horizontalAdvance(part) + 8
        bar = max(60, min(240, self.width() - x - metrics.horizontalAdvance(high + " NaN/Inf") - 40))
        for k in range(bar):
            painter.setPen(colour_at(k / max(1, bar - 1)))
            painter.drawLine(x + k, 5, x + k, height - 5)
        x += bar + 6
        painter.setPen(text_colour)
        painter.drawText(x, 0, metrics.horizontalAdvance(high) + 2, height, Qt.AlignmentFlag.AlignVCenter, high)
        x += metrics.horizontalAdvance(high) + 14
        painter.fillRect(x, 5, 14, height - 10, QColor(NAN_COLOR))
        painter.drawText(x + 18, 0, 80, height, Qt.AlignmentFlag.AlignVCenter, "NaN/Inf")


def _button(text: str) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    return button


class GraphPage(QWidget):
    """The Graph view of one checkpoint; `keys_selected(list[str])` when boxes are selected.

    `checkpoint` and `analysis` give the figures of its weights (None: a host gives every figure, as a run
    does for a step, with `set_given_figures`); `job` replaces the core's `graph_job` (a host that opens
    the checkpoint in the worker first); `name` is what an export is called after."""

    keys_selected = Signal(list)
    graph_ready = Signal()
    layout_ready = Signal()
    overlay_ready = Signal()

    def __init__(self, checkpoint: Checkpoint | None, analysis: Analysis | None, job: GraphJob | None = None,
                 parent: QWidget | None = None, name: str = "", graph_cache: GraphCache | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("graphPage")
        self.checkpoint, self.analysis = checkpoint, analysis
        self._job = job  # None: the core's graph_job
        self._graph_cache = graph_cache  # where the core keeps traced graphs: the window's (None: the user's file)
        self.name = name or (os.path.basename(checkpoint.path.rstrip("/" + os.sep)) if checkpoint is not None
                             else "graph")
        self.hierarchy: Hierarchy | None = None
        self.view: View | None = None
        self.expanded: frozenset[str] = frozenset({""})
        self.cache = LayoutCache()
        self.selected: list[str] = []  # item keys ("n:<id>", "g:<path>") of the selected boxes
        self.matches: list[int] = []  # graph node indices matching the search, in graph order
        self.match_at = -1
        self.figure: Figure | None = None
        self.coloured: Coloured | None = None
        self._known: dict[str, KeyFigures] = {}  # figures of this checkpoint's tensors, by key
        self._given: dict[str, dict[str, KeyFigures]] = {}  # figures a host gave, by figure then key
        self._focus: str | None = None  # item key to centre after the next layout
        self._laid: Laid | None = None  # the drawing shown
        self._from_tree = False
        self.graph_slot, self.layout_slot, self.overlay_slot = JobSlot(self), JobSlot(self), JobSlot(self)
        self.graph_slot.yielded.connect(self._on_graph_progress)
        self.graph_slot.returned.connect(self._on_graph)
        self.graph_slot.errored.connect(self._on_graph_error)
        self.layout_slot.yielded.connect(lambda p: self._say(p.message.capitalize() + "…", busy=True))
        self.layout_slot.returned.connect(self._on_laid)
        self.layout_slot.errored.connect(self._on_layout_error)
        self.overlay_slot.yielded.connect(self._on_overlay_progress)
        self.overlay_slot.returned.connect(self._on_coloured)
        self.overlay_slot.errored.connect(lambda exc: self._say(f"overlay failed: {printable(exc)}"))
        self._build()

    # -- widgets ---------------------------------------------------------------------------------------
    def _build(self) -> None:
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(3)
        top = QHBoxLayout()
        self.search = QLineEdit()
        self.search.setObjectName("graphSearch")
        self.search.setPlaceholderText("Find a node by name or op (Enter: next)")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._on_search_text)
        self.search.returnPressed.connect(self.next_match)
        self.match_label = QLabel("")
        self.overlay_box = QComboBox()
        self.overlay_box.setObjectName("graphOverlay")
        self.overlay_box.addItem("No colours", None)
        if self.checkpoint is not None and self.analysis is not None:
            for figure in CHECKPOINT_FIGURES:
                self.overlay_box.addItem(figure.title, figure)
        self.overlay_box.setToolTip("Colour each box by a figure of the tensors it reads")
        self.overlay_box.currentIndexChanged.connect(lambda _i: self.set_figure(self.overlay_box.currentData()))
        self.top_button = _button("Top level")
        self.top_button.setToolTip("Collapse every module")
        self.top_button.clicked.connect(self.collapse_all)
        self.fit_button = _button("Fit")
        self.fit_button.setToolTip("Show the whole drawing (0)")
        self.fit_button.clicked.connect(self._fit)
        self.export_button = _button("Export")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        menu.addAction("Save as SVG…", lambda: self._export_dialog("svg"))
        menu.addAction("Save as PNG…", lambda: self._export_dialog("png"))
        self.export_button.setMenu(menu)
        top.addWidget(self.search, 1)
        top.addWidget(self.match_label)
        top.addWidget(self.overlay_box)
        for button in (self.top_button, self.fit_button, self.export_button):
            top.addWidget(button)
        box.addLayout(top)
        self.source_label = QLabel("Reading the graph…")
        self.source_label.setObjectName("graphSource")
        self.source_label.setWordWrap(True)
        self.retry_button = QPushButton("Read the graph")
        self.retry_button.setObjectName("graphRetry")
        self.retry_button.hide()
        self.retry_button.clicked.connect(self.start)
        source_row = QHBoxLayout()
        source_row.addWidget(self.source_label, 1)
        source_row.addWidget(self.retry_button, 0, Qt.AlignmentFlag.AlignTop)
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
        self.canvas.tooltip_text = self.tooltip
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
        self.search.installEventFilter(self)
        shortcut = QShortcut(QKeySequence(Qt.Key.Key_F3), self)  # F3 anywhere in the view, too
        shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(self.next_match)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """In the search field: Escape clears it, F3 goes to the next match."""
        if watched is self.search and event.type() == QEvent.Type.KeyPress:
            key = event.key()  # type: ignore[attr-defined]
            if key == Qt.Key.Key_Escape:
                self.clear_search()
                return True
            if key == Qt.Key.Key_F3:
                self.next_match()
                return True
        return super().eventFilter(watched, event)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        """A new palette (View > Palette, the desktop's light/dark switch) redraws the graph in its colours."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.restyle()

    def restyle(self) -> None:
        """Draw the graph shown again in the widget's palette, where it was, with its marks and colours."""
        self.scene.palette_ = QPalette(self.palette())
        laid = self._laid
        if laid is None or laid.view is not self.view:
            return
        centre, scale = self.canvas.mapToScene(self.canvas.viewport().rect().center()), self.canvas.scale_factor
        self.scene.draw(laid.view, laid.placed)
        self.canvas.set_zoom(scale)
        self.canvas.centerOn(centre)
        self.canvas.refresh_detail()
        self._apply_marks()
        coloured = self.coloured
        if coloured is not None and coloured.view is self.view:
            self.scene.colour(coloured.boxes, coloured.scale, coloured.figure is NONFINITE)

    def _fit(self) -> None:
        self.canvas.fit()

    def _say(self, text: str, busy: bool = False) -> None:
        self.status.setText(text)
        self.cancel_button.setVisible(busy)

    # -- reading and laying out ------------------------------------------------------------------------
    def start(self) -> None:
        """Read the graph in a worker (once; again after it was cancelled)."""
        if self.hierarchy is None and not self.graph_slot.running:
            if not engines():
                self.source_label.setText(f"Drawing a graph needs a layout library: {INSTALL_HINT}")
                return
            self.retry_button.hide()
            self.source_label.setText("Reading the graph…")
            self._say("Reading the graph…", busy=True)
            self.graph_slot.start(hierarchy_job, self.checkpoint, self._job, cache=self._graph_cache)

    def cancel(self) -> None:
        """Cancel: the graph's reading (a library's tracing worker is killed), else the layout running."""
        if self.graph_slot.running:
            self.graph_slot.cancel()
            self.source_label.setText("Reading the graph was cancelled.")
            self.retry_button.show()
            self._say("Cancelled.")
        else:
            self.cancel_layout()

    def _on_graph_progress(self, step: Progress) -> None:
        if step.message:
            self._say(printable(step.message[:1].upper() + step.message[1:]) + "…", busy=True)

    def _on_graph_error(self, exc: object) -> None:
        self.source_label.setText(f"No graph: {printable(exc)}")
        self._say("")

    def _on_graph(self, hierarchy: Hierarchy) -> None:
        self.hierarchy = hierarchy
        graph = hierarchy.graph
        notes = graph.notes[1:] if graph.source == "module-tree" else list(graph.notes)  # the first: in the source
        text = f"Graph: {printable(describe_source(graph))} · {plural(len(graph.nodes), 'node')}"
        if notes:
            text += " · " + " · ".join(printable(n) for n in notes)
        self.source_label.setText(text)
        self.source_label.setToolTip(text)
        if graph.unread:
            self.unread_button.setText(f"{plural(len(graph.unread), 'key')} no node reads")
            self.unread_button.show()
            self.unread_list.addItems([printable(k) for k in graph.unread])
        self.graph_ready.emit()
        self.relayout(hierarchy.top())

    def relayout(self, expanded: frozenset[str], focus: str | None = None) -> None:
        """Lay out the view of `expanded` in a worker (cancelling a layout still running)."""
        if self.hierarchy is None:
            return
        self._focus = focus
        self._pending = frozenset(expanded) | {""}
        self.layout_slot.start(layout_job, self.hierarchy, self._pending, self.cache)

    def cancel_layout(self) -> None:
        """Stop the layout running; the drawing shown stays."""
        if self.layout_slot.running:
            self.layout_slot.cancel()
            self._say("Layout cancelled.")

    def _on_layout_error(self, exc: object) -> None:
        if isinstance(exc, NoLayoutEngine):
            self._say(str(exc))
        else:
            self._say(f"layout failed: {printable(exc)}")

    def _on_laid(self, laid: Laid) -> None:
        first = self.view is None
        self._laid = laid
        self.view, self.expanded = laid.view, laid.view.expanded
        self.scene.draw(laid.view, laid.placed)
        self.canvas.refresh_detail()
        self._apply_marks()
        self._say(f"{len(laid.view.items):,} boxes, {len(laid.view.edges):,} edges ({laid.placed.engine})")
        if self._focus is not None and self._focus in (index := laid.view.index()):
            self.canvas.centre_on(self.scene.boxes[index[self._focus]].rect())
        elif first:
            self.canvas.start_view()
        self._focus = None
        if self.figure is not None:
            self.set_figure(self.figure)
        self.layout_ready.emit()

    # -- expanding and collapsing ----------------------------------------------------------------------
    def expand(self, path: str) -> None:
        """Open module `path` (and those above it)."""
        if self.hierarchy is not None:
            self.relayout(self.hierarchy.expand_to(self.expanded, path), focus=None)

    def collapse(self, path: str) -> None:
        """Close module `path` (and those inside it); it becomes one box again."""
        if self.hierarchy is not None:
            self.relayout(self.hierarchy.collapse(self.expanded, path), focus="g:" + path)

    def collapse_all(self) -> None:
        """Back to the top level."""
        if self.hierarchy is not None:
            self.relayout(self.hierarchy.top())

    # -- selection, both ways ------------------------------------------------------------------------
    def _on_clicked(self, index: int, expand: bool) -> None:
        assert self.view is not None
        item = self.view.items[index]
        if expand and item.kind == GROUP:
            self.selected = [item.key]
            self.expand(item.path)
            return
        self.select_items([item.key])

    def select_items(self, keys: list[str]) -> None:
        """Select the boxes of `keys` and the tensors they read in the tree."""
        self.selected = keys
        self._apply_marks()
        if self._from_tree or self.hierarchy is None:
            return
        self.keys_selected.emit(self.keys_of(keys))

    def keys_of(self, item_keys: list[str]) -> list[str]:
        """The checkpoint keys the boxes of `item_keys` read."""
        assert self.hierarchy is not None
        found: dict[str, None] = {}
        for key in item_keys:
            kind, _, name = key.partition(":")
            params = (self.hierarchy.params_below(name) if kind == "g" else
                      self.hierarchy.node(self.hierarchy.by_id[name]).params if name in self.hierarchy.by_id else ())
            for p in params:
                found.setdefault(p)
        return list(found)

    def show_keys(self, keys: list[str]) -> bool:
        """Show and select the node that reads the first of `keys` that a node reads (expanding its module)."""
        if self.hierarchy is None:
            return False
        for key in keys:
            readers = self.hierarchy.readers.get(key)
            if readers:
                break
        else:
            return False
        node = self.hierarchy.node(readers[0])
        self._from_tree = True
        try:
            self.select_items(["n:" + node.id])
        finally:
            self._from_tree = False
        self._bring("n:" + node.id, node.module)
        return True

    def _bring(self, item_key: str, module: str) -> None:
        """Centre the box of `item_key`, expanding `module` first when the box is not shown."""
        assert self.hierarchy is not None
        index = self.view.index() if self.view is not None else {}
        if item_key in index:
            self.canvas.centre_on(self.scene.boxes[index[item_key]].rect())
        else:
            self.relayout(self.hierarchy.expand_to(self.expanded, module), focus=item_key)

    def _apply_marks(self) -> None:
        if self.view is None:
            return
        index = self.view.index()
        marks: dict[int, str] = {}
        if 0 <= self.match_at < len(self.matches) and self.hierarchy is not None:
            key = "n:" + self.hierarchy.node(self.matches[self.match_at]).id
            if key in index:
                marks[index[key]] = "match"
        for key in self.selected:
            if key in index:
                marks[index[key]] = "selected"
        self.scene.mark(marks)

    # -- search ----------------------------------------------------------------------------------------
    def _on_search_text(self, text: str) -> None:
        self.matches, self.match_at = [], -1
        needle = text.strip().lower()
        if needle and self.hierarchy is not None:
            self.matches = [i for i, n in enumerate(self.hierarchy.graph.nodes)
                            if needle in n.id.lower() or needle in n.op.lower()]
        self.match_label.setText(f"{len(self.matches):,} found" if needle else "")
        self._apply_marks()

    def next_match(self) -> None:
        """Go to the next match (Enter, F3): its module is expanded, the node centred and highlighted."""
        if not self.matches or self.hierarchy is None:
            return
        self.match_at = (self.match_at + 1) % len(self.matches)
        node = self.hierarchy.node(self.matches[self.match_at])
        self.match_label.setText(f"{self.match_at + 1:,} of {len(self.matches):,}")
        self._apply_marks()
        self._bring("n:" + node.id, node.module)

    def clear_search(self) -> None:
        """Escape: clear the search field."""
        self.search.clear()

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

    def _on_overlay_progress(self, step: Progress) -> None:
        if step.total:
            self.legend.setToolTip(f"{step.done:,} of {plural(step.total, 'tensor')} read")

    def _on_coloured(self, coloured: Coloured) -> None:
        if coloured.view is not self.view:
            return
        self.coloured = coloured
        self.scene.colour(coloured.boxes, coloured.scale, coloured.figure is NONFINITE)
        self.legend.show_scale(coloured.figure, coloured.scale, done=True)
        self.legend.setToolTip("")
        self.overlay_ready.emit()

    def tooltip(self, index: int) -> str:
        """The hover text of box `index`: name, op or count, module, tensors read, the overlay's figure."""
        if self.view is None or self.hierarchy is None or index >= len(self.view.items):
            return ""
        item = self.view.items[index]
        if item.kind == GROUP:
            lines = [item.path, item.detail + " (click + or double-click to expand)"]
        else:
            node = self.hierarchy.node(item.node)
            lines = [node.id, node.op, f"module: {node.module or '(top)'}"]
            if node.shape is not None:
                lines.append(f"output: {' x '.join(str(s) for s in node.shape)} {node.dtype or ''}".rstrip())
            if node.params:
                lines.append("reads: " + ", ".join(node.params[:4]) + (" …" if len(node.params) > 4 else ""))
        if self.coloured is not None and self.coloured.view is self.view:
            lines.append(describe(self.coloured.figure, self.coloured.boxes[index]))
        return "\n".join(printable(line) for line in lines)

    # -- export --------------------------------------------------------------------------------------
    def export_svg(self, path: str) -> None:
        """Save the whole drawing as SVG."""
        self.scene.set_detail(2)
        self.scene.ensure_all_labels()
        try:
            save_svg(self.scene, path, f"ckptview: {self.name}")
        finally:
            self.canvas.refresh_detail()

    def export_png(self, path: str) -> bool:
        """Save the whole drawing as PNG (scaled down past 8,000 px a side)."""
        self.scene.set_detail(2)
        self.scene.ensure_all_labels()
        try:
            return save_png(self.scene, path, self.palette().color(QPalette.ColorRole.Base))
        finally:
            self.canvas.refresh_detail()

    def _export_dialog(self, kind: str) -> None:
        base = os.path.splitext(self.name)[0] or "graph"
        path, _ = QFileDialog.getSaveFileName(self, f"Save the graph as {kind.upper()}", f"{base}-graph.{kind}",
                                              f"{kind.upper()} (*.{kind})")
        if not path:
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
        for slot in (self.graph_slot, self.layout_slot, self.overlay_slot):
            slot.cancel()

    def item_rect(self, key: str) -> QRectF | None:
        """The scene rectangle of the box of `key` (tests, screenshots)."""
        index = self.view.index() if self.view is not None else {}
        return self.scene.boxes[index[key]].rect() if key in index else None

    def op_of(self, key: str) -> str:
        """The short op of node box `key` (tests)."""
        assert self.hierarchy is not None
        return short_op(self.hierarchy.node(self.hierarchy.by_id[key.partition(":")[2]]).op)

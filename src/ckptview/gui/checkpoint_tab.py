"""One tab per checkpoint: opens the file in a worker, then shows banner, summary, filter, tree and panels."""

from __future__ import annotations

import html
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QEvent, QItemSelection, QModelIndex, QObject, QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QStyle,
    QTabWidget,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.errors import CheckpointError
from ckptview.core.grouping import ModuleGroup, Row, find_row, group_tree
from ckptview.core.model import Checkpoint, Node
from ckptview.core.summary import SizeFacts, size_facts
from ckptview.core.text import printable
from ckptview.gui import panels
from ckptview.gui.detail import DetailPanel
from ckptview.gui.formatting import shape_text
from ckptview.gui.gc_guard import keep_out_of_collections
from ckptview.gui.query import QueryError, parse_query
from ckptview.gui.summary import SummaryHeader
from ckptview.gui.tree_model import DEVICE, DTYPE, NAME, PARAMS, SHAPE, SHARD, SIZE, CheckpointTreeModel
from ckptview.gui.workers import GeneratorWorker

log = logging.getLogger(__name__)
EXPAND_ALL_LIMIT = 5000  # visible rows up to which a filter result is expanded completely
COLUMN_WIDTHS = (300, 110, 80, 80, 95, 64, 220)
# Typical content per column: what a column keeps room for before it elides (see _fit_columns).
COLUMN_SAMPLES = {SHAPE: "1024 × 1024", DTYPE: "bfloat16", SIZE: "99.9 MiB", PARAMS: "1,048,576",
                  DEVICE: "cuda:0"}
SUMMARY_COLLAPSED = "tab/summary_collapsed"


@dataclass
class Opened:
    """What the worker hands the tab: the checkpoint and everything derived from it that costs time."""

    checkpoint: Checkpoint
    top: Row
    sharing: dict[str, list[str]]
    leaf_count: int
    facts: SizeFacts


def prepare(checkpoint: Checkpoint) -> Opened:
    """Group rows, sharing and counts for `checkpoint` (O(tensors): kept off the GUI thread)."""
    top = group_tree(checkpoint.root)
    from ckptview.core.optimizer import label_state_rows

    label_state_rows(top, checkpoint)  # optimizer state named by parameter: "exp_avg of encoder.0.weight"
    leaves = sum(1 for r in top.walk() if not r.children and r is not top)
    return Opened(checkpoint, top, checkpoint.sharing(), leaves, size_facts(checkpoint))


def open_and_prepare(path: str) -> Opened:
    """Worker side of opening: read the metadata and build the display rows (never on the GUI thread)."""
    from ckptview.core import open_checkpoint

    return prepare(open_checkpoint(path))


class CheckpointTab(QWidget):
    """A checkpoint's page; states: "loading", "ready", "error"."""

    loaded = Signal()
    failed = Signal(str)
    selection_changed = Signal(list)  # list[Node]
    status_message = Signal(str)

    def __init__(self, path: str, window: Any = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.path = path if "://" in path else os.path.abspath(path)
        self.window_ = window
        self.state = "loading"
        self.error_text = ""
        self.checkpoint: Checkpoint | None = None
        self.top: Row | None = None
        self.model: CheckpointTreeModel | None = None
        self.context: panels.CheckpointContext | None = None
        self.panel_widgets: list[QWidget] = []
        self._worker: GeneratorWorker | None = None
        self._started = 0.0
        self.stack = QStackedWidget(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack)
        self.stack.addWidget(self._loading_page())

    # --- loading ---------------------------------------------------------------------------------
    def _loading_page(self) -> QWidget:
        page = QWidget()
        box = QVBoxLayout(page)
        box.addStretch(1)
        self.loading_label = QLabel(f"Opening {html.escape(os.path.basename(self.path))}…")
        self.loading_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        bar = QProgressBar()
        bar.setRange(0, 0)
        bar.setMaximumWidth(320)
        cancel = QPushButton("Cancel")
        cancel.clicked.connect(self.cancel)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(bar)
        row.addWidget(cancel)
        row.addStretch(1)
        box.addWidget(self.loading_label)
        box.addLayout(row)
        box.addStretch(2)
        return page

    def start(self) -> None:
        """Open the file in a worker thread."""
        self._started = time.perf_counter()
        worker = GeneratorWorker(open_and_prepare, self.path)
        worker.signals.returned.connect(self._on_opened)
        worker.signals.errored.connect(self._on_error)
        self._worker = worker
        worker.start()

    def cancel(self) -> None:
        """Stop waiting for the file (the reader finishes in the background and is discarded)."""
        if self.state == "loading":
            self._abandon()
            self._show_error("Opening was cancelled.")

    def _abandon(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None and not worker.is_done:
            worker.quit()
            worker.signals.returned.disconnect(self._on_opened)
            worker.signals.errored.disconnect(self._on_error)
            # The reader cannot be interrupted mid-parse; release its file maps when it is done.
            worker.signals.returned.connect(lambda opened: opened.checkpoint.close())

    def _on_opened(self, opened: Opened) -> None:
        self._worker = None
        self.checkpoint, self.top, self._leaf_count = opened.checkpoint, opened.top, opened.leaf_count
        self._sharing = opened.sharing
        self._facts = opened.facts
        try:
            self._build_ready_page()
        except Exception as exc:  # a bug in a view must not take the other tabs down
            log.exception("building the view of %s failed", self.path)
            self._show_error(f"internal error while showing the file: {type(exc).__name__}: {exc}")
            return
        self.state = "ready"
        keep_out_of_collections()
        elapsed = time.perf_counter() - self._started
        transfer = self.checkpoint.metadata.get("_transfer") if self.checkpoint is not None else None
        moved = f", {transfer.bytes:,} bytes in {transfer.requests} requests" if transfer is not None else ""
        self.status_message.emit(f"Opened {os.path.basename(self.path.split('?')[0])}: {self.top.tensors:,} tensors "
                                 f"in {elapsed:.2f} s{moved}")
        self.loaded.emit()

    def _on_error(self, exc: BaseException) -> None:
        self._worker = None
        if isinstance(exc, CheckpointError):
            text = str(exc)
        elif isinstance(exc, OSError):
            text = f"cannot read the file: {exc.strerror or exc}"
        else:  # a reader bug: still one line for a person, and the traceback in the log
            log.error("opening %s failed", self.path, exc_info=exc)
            text = f"internal error: {type(exc).__name__}: {exc}"
        self._show_error(text)

    def _show_error(self, text: str) -> None:
        self.state, self.error_text = "error", text
        page = QWidget()
        box = QVBoxLayout(page)
        box.addStretch(1)
        icon = QLabel()
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxCritical).pixmap(48, 48))
        icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
        title = QLabel(f"<b>Could not open {html.escape(os.path.basename(self.path))}</b>")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.error_label = QLabel(text)
        self.error_label.setObjectName("errorLabel")
        self.error_label.setWordWrap(True)
        self.error_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        where = QLabel(html.escape(self.path))
        where.setStyleSheet("color: palette(mid);")
        where.setAlignment(Qt.AlignmentFlag.AlignCenter)
        for widget in (icon, title, self.error_label, where):
            box.addWidget(widget)
        box.addStretch(2)
        self.stack.addWidget(page)
        self.stack.setCurrentWidget(page)
        self.status_message.emit(f"Could not open {os.path.basename(self.path)}: {text}")
        self.failed.emit(text)

    # --- the ready page --------------------------------------------------------------------------
    def _build_ready_page(self) -> None:
        assert self.checkpoint is not None and self.top is not None
        page = QWidget()
        box = QVBoxLayout(page)
        box.setContentsMargins(4, 4, 4, 0)
        box.setSpacing(4)
        self.banner = _safety_banner(self.checkpoint)
        if self.banner is not None:
            box.addWidget(self.banner)
        settings = getattr(self.window_, "settings", None)
        self.summary = SummaryHeader(self.checkpoint, self.top, self._facts,
                                     collapsed=settings.flag(SUMMARY_COLLAPSED) if settings else False)
        if settings is not None:  # the choice holds for every tab, now and next time
            self.summary.collapsedChanged.connect(lambda c: settings.set_flag(SUMMARY_COLLAPSED, c))
        box.addWidget(self.summary)

        self.filter_edit = QLineEdit()
        self.filter_edit.setObjectName("filterEdit")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.setPlaceholderText(
            "Filter: name, *glob*, /regex/, 768x3072, *x768, float16, >10MB, device:cuda   (Ctrl+F)")
        self.match_label = QLabel()
        self.match_label.setObjectName("matchLabel")
        self.match_label.setMinimumWidth(170)
        self.match_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        filter_row = QHBoxLayout()
        filter_row.addWidget(self.summary.toggle)
        filter_row.addWidget(self.filter_edit, 1)
        filter_row.addWidget(self.match_label)
        box.addLayout(filter_row)
        # Typing fires a timer, not a filter: a burst of keystrokes on 100,000 rows filters once.
        self._filter_timer = QTimer(self, singleShot=True, interval=150 if self.top.tensors > 20_000 else 40)
        self._filter_timer.timeout.connect(self.apply_filter)
        self.filter_edit.textChanged.connect(lambda _text: self._filter_timer.start())
        self.filter_edit.returnPressed.connect(self.apply_filter)

        self.model = CheckpointTreeModel(self.top, self)
        self.tree = QTreeView()
        self.tree.setObjectName("checkpointTree")
        self.tree.setModel(self.model)
        self.tree.setUniformRowHeights(True)  # lets the view skip measuring 100,000 rows
        self.tree.setAlternatingRowColors(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        header = self.tree.header()
        header.setSortIndicator(-1, Qt.SortOrder.AscendingOrder)  # file order until a header is clicked
        header.setSortIndicatorClearable(True)  # a third click returns to file order
        self.tree.setSortingEnabled(True)
        header.setStretchLastSection(False)
        header.setMinimumSectionSize(40)
        # Names matter most: long ones are cut in the middle (both the module and the leaf stay), and the
        # Name column keeps at least half the width; the other columns give way first (_fit_columns).
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.tree.viewport().installEventFilter(self)
        # The shard column only means something for sharded folders and DCP checkpoints.
        sharded = any("shards" in e.info.extra for e in self.checkpoint.tensors())
        self.tree.setColumnHidden(SHARD, not sharded)
        # Where tensors were saved says something only when it is not the CPU for all of them.
        devices = {e.info.device for e in self.checkpoint.tensors()}
        self.tree.setColumnHidden(DEVICE, devices <= {"cpu"})
        self.tree.selectionModel().selectionChanged.connect(self._on_selection)
        self.tree.expandToDepth(0 if len(self.model.kids(self.top)) > 1 else 1)

        self.detail = DetailPanel(self.checkpoint, self._sharing)
        self.detail.tensor_link_activated.connect(self.select_name)
        self.side_tabs = QTabWidget()
        self.side_tabs.setObjectName("sideTabs")
        self.side_tabs.setDocumentMode(True)
        self.side_tabs.addTab(self.detail, "Details")
        self.context = panels.CheckpointContext(
            checkpoint=self.checkpoint, path=self.path, window=self.window_,
            select_name=self.select_name, show_status=self.status_message.emit)
        for spec in panels.panels():
            self.side_tabs.addTab(_scrollable(self._make_panel(spec)), spec.title)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("treeSplitter")
        self.splitter.addWidget(self.tree)
        self.splitter.addWidget(self.side_tabs)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setSizes([620, 520])  # the side panels (histograms, tables) need room too
        box.addWidget(self.splitter, 1)
        self._update_match_label()
        self.stack.addWidget(page)
        self.stack.setCurrentWidget(page)

    def panel(self, title: str) -> QWidget | None:
        """The side panel titled `title` (the widget itself, not the scroll area around it)."""
        for i in range(self.side_tabs.count()):
            if self.side_tabs.tabText(i) == title:
                page = self.side_tabs.widget(i)
                return page.widget() if isinstance(page, QScrollArea) else page
        return None

    def show_panel(self, title: str) -> QWidget | None:
        """Bring the side panel titled `title` to the front; returns it."""
        for i in range(self.side_tabs.count()):
            if self.side_tabs.tabText(i) == title:
                self.side_tabs.setCurrentIndex(i)
                return self.panel(title)
        return None

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """Refit the tree's columns when its viewport is resized."""
        tree = getattr(self, "tree", None)
        if event.type() == QEvent.Type.Resize and tree is not None and watched is tree.viewport():
            self._fit_columns()
        return super().eventFilter(watched, event)

    def _fit_columns(self) -> None:
        """Name keeps at least 40% of the width; the other columns give way first: down to the width of
        typical content, then (on a very narrow tree) down to their captions, which are never clipped."""
        header = self.tree.header()
        metrics = header.fontMetrics()
        width = self.tree.viewport().width()
        shown = [c for c in range(len(COLUMN_WIDTHS)) if c != NAME and not self.tree.isColumnHidden(c)]
        caption = {c: metrics.horizontalAdvance(str(self.model.headerData(c, Qt.Orientation.Horizontal))) + 16
                   for c in shown}
        content = {c: max(caption[c], metrics.horizontalAdvance(COLUMN_SAMPLES.get(c, "")) + 16) for c in shown}
        wanted = {c: max(COLUMN_WIDTHS[c], content[c]) for c in shown}
        room = width - max(int(width * 0.4), min(COLUMN_WIDTHS[NAME], width - sum(wanted.values())))
        sizes = caption
        for low, high in ((content, wanted), (caption, content)):  # the first level that fits wins
            spare = sum(high[c] - low[c] for c in shown)
            if room >= sum(low.values()):
                squeeze = min(1.0, (room - sum(low.values())) / spare) if spare else 1.0
                sizes = {c: low[c] + int((high[c] - low[c]) * squeeze) for c in shown}
                break
        for c in shown:
            header.resizeSection(c, sizes[c])
        header.resizeSection(NAME, max(header.minimumSectionSize(), width - sum(sizes.values())))

    def _make_panel(self, spec: panels.PanelSpec) -> QWidget:
        try:
            widget = spec.factory(self.context)  # type: ignore[arg-type]
        except Exception as exc:  # one broken panel must not break the tab
            log.exception("panel %r failed to build", spec.title)
            widget = QLabel(f"This panel failed to start: {type(exc).__name__}: {exc}")
            widget.setWordWrap(True)
        self.panel_widgets.append(widget)
        return widget

    # --- filter ----------------------------------------------------------------------------------
    def apply_filter(self) -> None:
        """Filter the tree by the text in the filter box now."""
        if self.model is None:
            return
        self._filter_timer.stop()
        try:
            query = parse_query(self.filter_edit.text())
        except QueryError as exc:
            self.match_label.setText(str(exc))
            self.match_label.setStyleSheet("color: #c0392b;")
            return
        self.match_label.setStyleSheet("")
        self.model.set_query(query)
        if self.model.filtered:
            if self.model.match_count <= EXPAND_ALL_LIMIT:
                self.tree.expandAll()
            else:
                self.tree.expandToDepth(1)
        else:
            self.tree.expandToDepth(0 if len(self.model.kids(self.top)) > 1 else 1)  # type: ignore[arg-type]
        self._update_match_label()

    def _update_match_label(self) -> None:
        assert self.model is not None and self.top is not None
        leaves = self._leaf_count
        if self.model.filtered:
            self.match_label.setText(f"{self.model.match_count:,} of {leaves:,} match")
        else:
            self.match_label.setText(f"{leaves:,} entries")

    def focus_filter(self) -> None:
        """Put the cursor in the filter box (Ctrl+F)."""
        if self.state == "ready":
            self.filter_edit.setFocus()
            self.filter_edit.selectAll()

    # --- selection -------------------------------------------------------------------------------
    def selected_rows(self) -> list[Row]:
        """The selected rows, in selection order."""
        if self.model is None:
            return []
        return [self.model.row_of(i) for i in self.tree.selectionModel().selectedRows(0)]

    def selected_nodes(self) -> list[Node]:
        """The core nodes of the selected rows (module groups have none and are left out)."""
        return [r.node for r in self.selected_rows() if r.node is not None]

    def _on_selection(self, _selected: QItemSelection, _deselected: QItemSelection) -> None:
        assert self.model is not None
        current = self.tree.currentIndex()
        rows = self.selected_rows()
        row = self.model.row_of(current) if current.isValid() and current.internalPointer() in rows else (
            rows[-1] if rows else None)
        self.detail.show_row(row)
        nodes = [r.node for r in rows if r.node is not None]
        # Module-group rows reach the panels too, as the tensors below them (statistics of a module).
        entries = [r.node if r.node is not None else ModuleGroup.of_row(r) for r in rows]
        for widget in self.panel_widgets:
            setter = getattr(widget, "set_selection", None)
            if setter is not None:
                try:
                    setter(entries)
                except Exception:
                    log.exception("panel %r failed in set_selection", type(widget).__name__)
        self.selection_changed.emit(nodes)

    def select_name(self, name: str) -> bool:
        """Select and show the row called `name` (clearing a filter that hides it)."""
        if self.model is None or self.top is None:
            return False
        row = find_row(self.top, name)
        if row is None:
            self.status_message.emit(f"no entry named {name}")
            return False
        index = self.model.index_of(row)
        if not index.isValid():  # hidden by the filter
            self.filter_edit.clear()
            self.apply_filter()
            index = self.model.index_of(row)
        self.tree.setCurrentIndex(index)
        self.tree.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
        return True

    # --- context menu and commands ---------------------------------------------------------------
    def _context_menu(self, pos: QPoint) -> None:
        index = self.tree.indexAt(pos)
        menu = self.build_context_menu(index)
        menu.exec(self.tree.viewport().mapToGlobal(pos))

    def build_context_menu(self, index: QModelIndex) -> QMenu:
        """The tree's context menu for `index` (tests trigger its actions directly)."""
        assert self.model is not None
        menu = QMenu(self)
        row = self.model.row_of(index) if index.isValid() else None
        copy_name = menu.addAction("Copy name", lambda: self.copy_text(row.name if row else ""))
        copy_name.setEnabled(row is not None)
        info = row.node.tensor if row is not None and row.node is not None else None
        copy_shape = menu.addAction("Copy shape", lambda: self.copy_text(str(list(info.shape)) if info else ""))
        copy_shape.setEnabled(info is not None)
        if info is not None:
            copy_shape.setToolTip(shape_text(info.shape))
        menu.addSeparator()
        menu.addAction("Expand all", self.tree.expandAll)
        menu.addAction("Collapse all", self.tree.collapseAll)
        return menu

    def copy_text(self, text: str) -> None:
        """Put `text` on the clipboard."""
        QGuiApplication.clipboard().setText(text)
        self.status_message.emit(f"Copied {text}")

    def expand_all(self) -> None:
        """Expand every row (fine on big trees: rows come in chunks)."""
        if self.state == "ready":
            self.tree.expandAll()

    def collapse_all(self) -> None:
        """Collapse every row."""
        if self.state == "ready":
            self.tree.collapseAll()

    def close_checkpoint(self) -> None:
        """Release the file and stop pending work (the tab is closing)."""
        self._abandon()
        for widget in self.panel_widgets:
            widget.close()
        if self.checkpoint is not None:
            self.checkpoint.close()


class PanelScrollArea(QScrollArea):
    """A side panel's frame: the panel fills the height it is given and scrolls only below its minimum.

    QScrollArea's own resizing follows heightForWidth, which word-wrapped labels make as tall as the
    panel's *preferred* size: plots then scrolled at any window height. Here the panel gets the viewport's
    height, or its minimum when that is more (a short screen), and never more than that.
    """

    def __init__(self, panel: QWidget) -> None:
        super().__init__()
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidgetResizable(False)
        self.setWidget(panel)
        panel.installEventFilter(self)

    def _fit(self) -> None:
        panel = self.widget()
        if panel is not None:
            viewport = self.viewport().size()
            panel.resize(viewport.width(), max(viewport.height(), panel.minimumSizeHint().height()))

    def resizeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        """Fit the panel to the new size."""
        super().resizeEvent(event)  # type: ignore[arg-type]
        self._fit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """Refit when the panel's layout changes what it needs."""
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self._fit()
        return super().eventFilter(watched, event)


def _scrollable(panel: QWidget) -> QScrollArea:
    """A side panel in a frameless scroll area: on a short screen it scrolls instead of making the whole
    window taller than the screen (the Run panel's form alone needs ~370 px)."""
    return PanelScrollArea(panel)


def _safety_banner(checkpoint: Checkpoint) -> QFrame | None:
    unsafe, warnings = checkpoint.unsafe_globals, checkpoint.warnings
    if not unsafe and not warnings:
        return None
    frame = QFrame()
    frame.setObjectName("safetyBanner")
    color = "#fff4ce" if unsafe else "#eef3fb"
    border = "#e0b400" if unsafe else "#9bb5dd"
    frame.setStyleSheet(f"#safetyBanner {{ background: {color}; border: 1px solid {border}; border-radius: 4px; }}"
                        " #safetyBanner QLabel { color: #333; }")
    row = QHBoxLayout(frame)
    row.setContentsMargins(8, 6, 8, 6)
    icon = QLabel()
    pixmap = QStyle.StandardPixmap.SP_MessageBoxWarning if unsafe else QStyle.StandardPixmap.SP_MessageBoxInformation
    icon.setPixmap(frame.style().standardIcon(pixmap).pixmap(24, 24))
    row.addWidget(icon, 0, Qt.AlignmentFlag.AlignTop)
    parts = []
    if unsafe:
        names = ", ".join(f"<code>{html.escape(printable(g))}</code>" for g in unsafe[:12])
        more = f" and {len(unsafe) - 12} more" if len(unsafe) > 12 else ""
        parts.append(f"<b>This file references code outside the safe set:</b> {names}{more}. ckptview did not "
                     "import or run any of it; <code>torch.load(weights_only=False)</code> would.")
    # The reader also reports unsafe globals as a warning; the sentence above already names them.
    warnings = [w for w in warnings if not (unsafe and all(g in w for g in unsafe))]
    for warning in warnings[:5]:
        parts.append(html.escape(printable(warning)))
    if len(warnings) > 5:
        parts.append(f"… and {len(warnings) - 5} more warnings")
    text = QLabel("<br>".join(parts))
    text.setTextFormat(Qt.TextFormat.RichText)  # always: the parts are escaped here, never guessed at by Qt
    text.setObjectName("bannerText")
    text.setWordWrap(True)
    text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    row.addWidget(text, 1)
    return frame

"""One tab per checkpoint: opens the file in a worker, then shows banner, summary, filter, tree and panels."""

from __future__ import annotations

import html
import inspect
import logging
import os
import time
from collections.abc import Callable
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
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QStyle,
    QTabWidget,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.analyze.grouping import ModuleGroup, Row, find_row
from ckptview.core.analyze.opening import LargeHeader, Opened, open_and_prepare, prepare
from ckptview.core.analyze.query import Query, QueryError, parse_query, visible_rows
from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.model import Checkpoint, Node
from ckptview.core.perf import keep_out_of_collections, paused_gc
from ckptview.core.read.file_checks import Signature, describe_change, signature, special_file_reason
from ckptview.core.read.files import is_url
from ckptview.core.text import printable, shown
from ckptview.core.units import human_bytes, shape_text
from ckptview.gui import panels
from ckptview.gui.detail import DetailPanel
from ckptview.gui.elide import ElidingDelegate, elide_label, elide_to_number
from ckptview.gui.gc_guard import collect_when_deleted
from ckptview.gui.summary import SummaryHeader
from ckptview.gui.tree_model import DEVICE, DTYPE, NAME, PARAMS, SHAPE, SHARD, SIZE, CheckpointTreeModel
from ckptview.gui.tree_place import restore_place, save_place
from ckptview.gui.workers import GeneratorWorker

__all__ = ["CheckpointTab", "Opened", "open_and_prepare", "prepare"]  # the last three live in opening.py
log = logging.getLogger(__name__)
EXPAND_ALL_LIMIT = 5000  # visible rows up to which a filter result is expanded completely
LAZY_PANELS_ABOVE = 20_000  # tensors above which a side panel is built only when its tab is first shown
HEADER_BYTES_PER_TENSOR = 110  # a safetensors header entry, roughly: for "about N tensors" when asking
COLUMN_WIDTHS = (300, 110, 80, 80, 95, 64, 220)
# Typical content per column: what a column keeps room for before it elides (see _fit_columns).
COLUMN_SAMPLES = {SHAPE: "1024 × 1024", DTYPE: "bfloat16", SIZE: "99.9 MiB", PARAMS: "1,048,576",
                  DEVICE: "cuda:0", SHARD: "…00001-of-00002.safet"}
SUMMARY_COLLAPSED = "tab/summary_collapsed"


class CheckpointTab(QWidget):
    """A checkpoint's page; states: "loading", "ready", "error", "asking" (a huge header: open it?)."""

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
        self._opened: Opened | None = None  # opened, waiting for its turn to build its page
        self._signature: Signature | None = None
        self._place: dict[str, Any] | None = None  # what to restore after a reload
        self.changed_text = ""  # why the file on disk no longer matches the tab ('' when it does)
        self.changed_bar: QFrame | None = None
        self._closed = False
        self._pending_panels: dict[int, panels.PanelSpec] = {}  # side-tab index -> panel not built yet
        self._filter_worker: GeneratorWorker | None = None  # the typed filter's job, on large trees
        self.stack = QStackedWidget(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack)
        self.stack.addWidget(self._loading_page())

    @property
    def _name(self) -> str:
        """The file's name as the tab shows it: escaped by printable() (no bidi override, newline, ESC)."""
        return printable(os.path.basename(self.path.rstrip("/" + os.sep)) or self.path)

    # --- loading ---------------------------------------------------------------------------------
    def _loading_page(self) -> QWidget:
        page = QWidget()
        box = QVBoxLayout(page)
        box.addStretch(1)
        self.loading_label = QLabel(f"Opening {html.escape(self._name)}…")
        self.loading_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        _never_wider(self.loading_label)
        bar = self.loading_bar = QProgressBar()
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

    def start(self, ask_above: int | None = -1) -> None:
        """Open the file in a worker thread (a FIFO, socket, device or /proc file is refused at once).

        `ask_above`: header bytes above which to ask first (-1: the window's setting, None: never ask).
        """
        self._started = time.perf_counter()
        reason = special_file_reason(self.path)
        if reason is not None:  # opening would block a worker (FIFO) or read a made-up size (/proc)
            self._show_error(reason)
            return
        if ask_above == -1:
            settings = getattr(self.window_, "settings", None)
            ask_above = settings.header_ask_bytes() if settings is not None else None
        worker = GeneratorWorker(_open_without_collections, self.path, ask_above)
        worker.kwargs["progress"] = worker.signals.yielded.emit  # a huge header reports each piece read
        worker.signals.yielded.connect(self._on_open_progress)
        worker.signals.returned.connect(self._on_opened)
        worker.signals.errored.connect(self._on_error)
        self._worker = worker
        worker.start()

    def _on_open_progress(self, step: Progress) -> None:
        if self._stale() or self.state != "loading":
            return
        name = html.escape(self._name)
        if step.total > 0:
            self.loading_bar.setRange(0, 1000)
            self.loading_bar.setValue(int(step.fraction * 1000))
            self.loading_label.setText(f"Opening {name}: {html.escape(printable(step.message))} ({step.fraction:.0%})")
        else:
            self.loading_bar.setRange(0, 0)
            self.loading_label.setText(f"Opening {name}: {html.escape(printable(step.message))}…")

    def cancel(self) -> None:
        """Stop waiting for the file (the open stops at its next header piece or step; a result is discarded)."""
        if self.state == "loading":
            self._abandon()
            self._show_error("Opening was cancelled.")

    def _abandon(self) -> None:
        opened, self._opened = self._opened, None
        if opened is not None:  # opened but never shown
            opened.checkpoint.close()
        worker, self._worker = self._worker, None
        if worker is not None and not worker.is_done:
            worker.quit()
            worker.signals.returned.disconnect(self._on_opened)
            worker.signals.errored.disconnect(self._on_error)
            # The reader cannot be interrupted mid-parse; release its file maps when it is done.
            worker.signals.returned.connect(lambda opened: opened.checkpoint.close())

    def _stale(self) -> bool:
        """True when the signal being handled comes from a worker this tab no longer waits for."""
        sender = self.sender()
        return self._closed or (sender is not None and (self._worker is None or sender is not self._worker.signals))

    def _on_opened(self, opened: Opened) -> None:
        if self._stale():  # closed, cancelled or reloaded while its result was queued: release the file
            opened.checkpoint.close()
            return
        self._worker = None
        self._opened = opened
        queue = getattr(self.window_, "queue_build", None)
        if queue is None or self.isVisible():
            self.finish_open()
        else:  # a tab in the background waits its turn: 150 files do not build 150 pages in one go
            queue(self)

    @property
    def build_pending(self) -> bool:
        """True while the file is open and the page waits for its turn to be built."""
        return self._opened is not None

    def finish_open(self) -> None:
        """Build the page of an opened file (the only part of opening that runs on the GUI thread)."""
        opened, self._opened = self._opened, None
        if opened is None:
            return
        self.checkpoint, self.top, self._leaf_count = opened.checkpoint, opened.top, opened.leaf_count
        self._sharing = opened.sharing
        self._facts = opened.facts
        self._signature = opened.signature
        try:
            self._build_ready_page(opened)
        except Exception as exc:  # a bug in a view must not take the other tabs down
            log.exception("building the view of %s failed", self.path)
            self._show_error(f"internal error while showing the file: {type(exc).__name__}: {exc}")
            return
        self.state = "ready"
        self._restore_place()
        keep_out_of_collections()
        elapsed = time.perf_counter() - self._started
        transfer = self.checkpoint.metadata.get("_transfer") if self.checkpoint is not None else None
        moved = f", {transfer.bytes:,} bytes in {transfer.requests} requests" if transfer is not None else ""
        self.status_message.emit(f"Opened {printable(os.path.basename(self.path.split('?')[0]))}: {self.top.tensors:,} tensors "
                                 f"in {elapsed:.2f} s{moved}")
        self.loaded.emit()

    def _on_error(self, exc: BaseException) -> None:
        if self._stale():
            return
        self._worker = None
        if isinstance(exc, LargeHeader):
            self._ask_large_header(exc.size)
            return
        if isinstance(exc, CheckpointError):
            text = str(exc)
        elif isinstance(exc, OSError):
            text = f"cannot read the file: {exc.strerror or exc}"
        else:  # a reader bug: still one line for a person, and the traceback in the log
            log.error("opening %s failed", self.path, exc_info=exc)
            text = f"internal error: {type(exc).__name__}: {exc}"
        self._show_error(text)

    def _show_error(self, text: str) -> None:
        if is_url(self.path):  # a library's message may quote the URL with its token (internal errors too)
            from ckptview.core.redaction import redact

            text = redact(text)
        self.state, self.error_text = "error", text
        page = QWidget()
        box = QVBoxLayout(page)
        box.addStretch(1)
        icon = QLabel()
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxCritical).pixmap(48, 48))
        icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
        title = QLabel(f"<b>Could not open {html.escape(self._name)}</b>")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        _never_wider(title)
        self.error_label = QLabel(printable(text))
        self.error_label.setObjectName("errorLabel")
        self.error_label.setWordWrap(True)
        self.error_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        where = QLabel(html.escape(printable(self.path)))
        where.setStyleSheet("color: palette(mid);")
        _never_wider(where)
        where.setAlignment(Qt.AlignmentFlag.AlignCenter)
        for widget in (icon, title, self.error_label, where):
            box.addWidget(widget)
        retry = QPushButton("Reload")
        retry.setObjectName("reloadButton")
        retry.setToolTip("Open the file again (Ctrl+R)")
        retry.clicked.connect(self.reload)
        box.addLayout(_centered(retry))
        box.addStretch(2)
        self._show_page(page)
        self.status_message.emit(f"Could not open {self._name}: {printable(text)}")
        self.failed.emit(text)

    def _ask_large_header(self, size: int) -> None:
        """A header this large takes seconds and gigabytes to read: open it only when asked to."""
        self.state = "asking"
        page = QWidget()
        box = QVBoxLayout(page)
        box.addStretch(1)
        self.ask_label = QLabel(
            f"<b>{html.escape(self._name)}</b> has a {human_bytes(size)} header: metadata "
            f"for about {max(1, size // HEADER_BYTES_PER_TENSOR):,} tensors. Reading it takes a while and "
            "a lot of memory (several times the header size); the window stays usable meanwhile. "
            "Open it anyway?")
        self.ask_label.setObjectName("askLabel")
        self.ask_label.setWordWrap(True)
        self.ask_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        box.addWidget(self.ask_label)
        self.open_anyway_button = QPushButton("Open anyway")
        self.open_anyway_button.setObjectName("openAnywayButton")
        self.open_anyway_button.clicked.connect(self.open_anyway)
        close = QPushButton("Close tab")
        close.clicked.connect(self._close_me)
        box.addLayout(_centered(self.open_anyway_button, close))
        box.addStretch(2)
        self._show_page(page)
        self.status_message.emit(f"{self._name}: a {human_bytes(size)} header; open it?")
        self.failed.emit(f"not opened yet: a {human_bytes(size)} header asks first")  # settled, not loading

    def open_anyway(self) -> None:
        """The user accepted a huge header: open the file without asking again."""
        if self.state == "asking":
            self._reset_to_loading()
            self.start(ask_above=None)

    def _close_me(self) -> None:
        closer = getattr(self.window_, "close_tab", None)
        tabs = getattr(self.window_, "tabs", None)
        if closer is not None and tabs is not None and tabs.indexOf(self) >= 0:
            closer(tabs.indexOf(self))

    def _show_page(self, page: QWidget) -> None:
        """Make `page` the only page (earlier ones are deleted: a reload must not pile pages up)."""
        while self.stack.count():
            old = self.stack.widget(0)
            assert old is not None  # count() > 0
            self.stack.removeWidget(old)
            old.deleteLater()
        self.stack.addWidget(page)
        self.stack.setCurrentWidget(page)

    def _reset_to_loading(self) -> None:
        self.state, self.error_text, self.changed_text = "loading", "", ""
        self.changed_bar = None
        self._show_page(self._loading_page())

    # --- the file on disk --------------------------------------------------------------------------
    def check_file(self) -> bool:
        """Compare the file on disk with the one opened; show the reload bar when it changed."""
        if self.state != "ready" or self.changed_text:
            return bool(self.changed_text)
        what = describe_change(self._signature, signature(self.path))
        if what:
            self.mark_changed(what)
        return bool(what)

    def mark_changed(self, what: str = "") -> None:
        """Show the bar "the file changed on disk: Reload" (a read failed on it, or the poll saw it)."""
        if self.state != "ready":
            return
        first = not self.changed_text
        self.changed_text = what or "it no longer matches what was opened"
        if self.changed_bar is not None:
            self.changed_label.setText(self._changed_message())
            self.changed_bar.show()
        if first:  # panels still showing a tensor would read it again on a repaint or scroll: let them go
            self._tell_panels([])
        self.status_message.emit(f"{self._name}: {self._changed_message()}")

    @staticmethod
    def _entries(rows: list[Row]) -> list[Node | ModuleGroup]:
        """What panels get for selected rows: nodes, and module-group rows as the tensors below them."""
        return [r.node if r.node is not None else ModuleGroup.of_row(r) for r in rows]

    def _tell_panels(self, nodes: list[Node | ModuleGroup]) -> None:
        for widget in self.panel_widgets:
            setter = getattr(widget, "set_selection", None)
            if setter is not None:
                try:
                    setter(nodes)
                except Exception:
                    log.exception("panel %r failed in set_selection", type(widget).__name__)

    def _changed_message(self) -> str:
        return f"The file changed on disk since it was opened ({self.changed_text}). Reload to see it as it is now."

    def _changed_bar(self) -> QFrame:
        frame = QFrame()
        frame.setObjectName("changedBar")
        frame.setStyleSheet("#changedBar { background: #fde8e4; border: 1px solid #d9826f; border-radius: 4px; }"
                            " #changedBar QLabel { color: #333; }")
        row = QHBoxLayout(frame)
        row.setContentsMargins(8, 4, 8, 4)
        icon = QLabel()
        icon.setPixmap(frame.style().standardIcon(QStyle.StandardPixmap.SP_BrowserReload).pixmap(20, 20))
        row.addWidget(icon)
        self.changed_label = QLabel(self._changed_message())
        self.changed_label.setObjectName("changedLabel")
        self.changed_label.setWordWrap(True)
        row.addWidget(self.changed_label, 1)
        button = QPushButton("Reload")
        button.setObjectName("reloadButton")
        button.setToolTip("Open the file again, keeping the selection (Ctrl+R)")
        button.clicked.connect(self.reload)
        row.addWidget(button)
        frame.setVisible(bool(self.changed_text))
        return frame

    def reload(self) -> None:
        """Open the file again (File > Reload, Ctrl+R), keeping the selection, expansion and filter."""
        if self.state == "loading" and self._opened is None and self._worker is None:
            return
        self._place = self._save_place() if self.state == "ready" else self._place
        self._release()
        trees = self.trees()
        self.checkpoint = self.top = self.model = self.context = None
        self.panel_widgets, self._pending_panels, self._filter_worker = [], {}, None
        old_page = self.stack.currentWidget()
        if old_page is not None:  # the old tree was frozen out of the collector: free it with its page
            collect_when_deleted(old_page, trees)
        self._reset_to_loading()
        self.start()

    def _save_place(self) -> dict[str, Any]:
        assert self.model is not None and self.top is not None
        return save_place(self.tree, self.model, self.top, self.filter_edit.text(), self.side_tabs.currentIndex())

    def _restore_place(self) -> None:
        place, self._place = self._place, None
        if not place or self.model is None or self.top is None:
            return
        if place["filter"]:
            self.filter_edit.setText(place["filter"])
            self.apply_filter()
        restore_place(self.tree, self.model, self.top, place)
        if 0 <= place["side_tab"] < self.side_tabs.count():
            self.side_tabs.setCurrentIndex(place["side_tab"])

    # --- the ready page --------------------------------------------------------------------------
    def _build_ready_page(self, opened: Opened) -> None:
        assert self.checkpoint is not None and self.top is not None
        page = QWidget()
        box = QVBoxLayout(page)
        box.setContentsMargins(4, 4, 4, 0)
        box.setSpacing(4)
        self.changed_bar = self._changed_bar()
        box.addWidget(self.changed_bar)
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
        self._filter_timer.timeout.connect(self._filter_typed)
        self.filter_edit.textChanged.connect(lambda _text: self._filter_timer.start())
        self.filter_edit.returnPressed.connect(self._filter_typed)

        self.model = CheckpointTreeModel(self.top, self, flat=opened.flat)
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
        # Optimizer rows keep "exp_avg of" and cut the parameter's name in the middle; shard names keep
        # their number. Every cell's whole text is in its tooltip.
        self.tree.setItemDelegateForColumn(NAME, ElidingDelegate(elide_label, self.tree))
        self.tree.setItemDelegateForColumn(SHARD, ElidingDelegate(elide_to_number, self.tree))
        self.tree.viewport().installEventFilter(self)
        # The shard column only means something for sharded folders and DCP checkpoints.
        self.tree.setColumnHidden(SHARD, not opened.sharded)
        # Where tensors were saved says something only when it is not the CPU for all of them.
        self.tree.setColumnHidden(DEVICE, opened.devices <= {"cpu"})
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
        # Panels cost tens of milliseconds each (plots), some O(tensors): a tab in the background builds
        # them when it is first shown, a huge checkpoint builds each one when its side tab is first shown.
        self._pending_panels = {}
        eager = self.top.tensors <= LAZY_PANELS_ABOVE and self._in_view()
        for spec in panels.panels():
            if eager:
                self.side_tabs.addTab(_scrollable(self._make_panel(spec)), spec.title)
            else:
                placeholder = QLabel(f"Preparing {spec.title}…")
                placeholder.setObjectName("panelPlaceholder")
                placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
                self._pending_panels[self.side_tabs.addTab(placeholder, spec.title)] = spec
        self.side_tabs.currentChanged.connect(self._build_panel)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("treeSplitter")
        self.splitter.addWidget(self.tree)
        self.splitter.addWidget(self.side_tabs)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        # The side panels (histograms, the optimizer's table) need room: at 1024 px they get ~560 of it.
        self.splitter.setSizes([480, 560])
        box.addWidget(self.splitter, 1)
        self._update_match_label()
        self._show_page(page)

    def _in_view(self) -> bool:
        """True when the user can see this tab (or it lives outside a window, as in tests and tools)."""
        current = getattr(self.window_, "current_tab", None)
        return self.window_ is None or self.isVisible() or (current is not None and current() is self)

    def showEvent(self, event: Any) -> None:
        super().showEvent(event)
        if self.build_pending:  # the user switched to it before its turn in the build queue
            self.finish_open()
        if self.top is not None and self.top.tensors <= LAZY_PANELS_ABOVE:
            for index in sorted(self._pending_panels):
                self._build_panel(index)
        elif self._pending_panels:
            self._build_panel(self.side_tabs.currentIndex())

    def _build_panel(self, index: int) -> None:
        """Replace the placeholder at side-tab `index` with its panel, given the current selection."""
        spec = self._pending_panels.pop(index, None)
        if spec is None:
            return
        widget = self._make_panel(spec)
        page = _scrollable(widget)
        current = self.side_tabs.currentIndex()
        self.side_tabs.blockSignals(True)  # swapping a page must not build the neighbours' panels too
        try:
            old = self.side_tabs.widget(index)
            self.side_tabs.removeTab(index)
            self.side_tabs.insertTab(index, page, spec.title)
            self.side_tabs.setCurrentIndex(current)
        finally:
            self.side_tabs.blockSignals(False)
        if old is not None:
            old.deleteLater()
        setter = getattr(widget, "set_selection", None)
        entries = self._entries(self.selected_rows())
        if setter is not None and entries:
            try:
                setter(entries)
            except Exception:
                log.exception("panel %r failed in set_selection", spec.title)

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
        assert self.model is not None  # the tree exists only with its model
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
        """Filter the tree by the text in the filter box now (on this thread; typing filters big trees in
        a worker)."""
        query = self._parsed_filter()
        if query is None or self.model is None:
            return
        self.model.set_query(query)
        self._after_filter()

    def _parsed_filter(self) -> Query | None:
        if self.model is None:
            return None
        self._filter_timer.stop()
        self._filter_worker = None  # a result still on its way is now stale
        try:
            query = parse_query(self.filter_edit.text())
        except QueryError as exc:
            self.match_label.setText(str(exc))
            self.match_label.setStyleSheet("color: #c0392b;")
            return None
        self.match_label.setStyleSheet("")
        return query

    def _filter_typed(self) -> None:
        """The user typed or pressed Enter: on a big tree the matching runs in a worker."""
        if self.top is None or self.top.tensors <= LAZY_PANELS_ABOVE:
            self.apply_filter()
            return
        query = self._parsed_filter()
        if query is None or self.model is None:
            return
        if query.empty:
            self.model.show_rows(None, self.top.tensors)
            self._after_filter()
            return
        self.match_label.setText("filtering…")
        worker = GeneratorWorker(visible_rows, self.top, query, self.model.flat_rows())
        worker.signals.returned.connect(self._on_filtered)
        worker.signals.errored.connect(self._on_filter_error)
        self._filter_worker = worker
        worker.start()

    def _on_filtered(self, result: tuple[set[int], int]) -> None:
        worker = self._filter_worker
        if self.model is None or worker is None or self.sender() is not worker.signals:
            return  # typed again, reloaded or closed meanwhile
        self._filter_worker = None
        self.model.show_rows(*result)
        self._after_filter()

    def _on_filter_error(self, exc: BaseException) -> None:
        worker = self._filter_worker
        if worker is None or self.sender() is not worker.signals:
            return
        self._filter_worker = None
        log.error("filtering %s failed", self.path, exc_info=exc)
        self.match_label.setText(f"filter failed: {type(exc).__name__}: {exc}")
        self.match_label.setStyleSheet("color: #c0392b;")

    def _after_filter(self) -> None:
        assert self.model is not None
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
        nodes = self.selected_nodes()
        if self.check_file():
            # The panels would read values of a file that has since shrunk or been rewritten; the bar
            # offers the reload instead.
            self.selection_changed.emit(nodes)
            return
        self._tell_panels(self._entries(rows))
        self.selection_changed.emit(nodes)

    def select_name(self, name: str) -> bool:
        """Select and show the row called `name` (clearing a filter that hides it)."""
        if self.model is None or self.top is None:
            return False
        row = find_row(self.top, name)
        if row is None:
            self.status_message.emit(f"no entry named {shown(name)}")
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
        self.status_message.emit(f"Copied {shown(text)}")  # the whole text on the clipboard, a bounded line shown

    def expand_all(self) -> None:
        """Expand every row (fine on big trees: rows come in chunks)."""
        if self.state == "ready":
            self.tree.expandAll()

    def collapse_all(self) -> None:
        """Collapse every row."""
        if self.state == "ready":
            self.tree.collapseAll()

    def trees(self) -> list[Any]:
        """What holds this tab's trees (the checkpoint, the display rows, the filter's list of them), to
        release when the tab goes (`gc_guard.collect_when_deleted`)."""
        flat = self.model.flat_rows_if_built() if self.model is not None else None
        return [t for t in (self.checkpoint, self.top, flat) if t is not None]

    def close_checkpoint(self) -> None:
        """Release the file and stop pending work (the tab is closing)."""
        self._closed = True
        self._release()

    def _release(self) -> None:
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


def _never_wider(label: QLabel) -> None:
    """A label naming the file wraps, and a name without spaces is cut rather than widening the window
    (a 170-character name made the window 1,200 px wide); the whole text is in its tooltip."""
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    label.setMinimumWidth(1)
    label.setToolTip(label.text() if "<" not in label.text() else "")


def _scrollable(panel: QWidget) -> QScrollArea:
    """A side panel in a frameless scroll area: on a short screen it scrolls instead of making the whole
    window taller than the screen (the Run panel's form alone needs ~370 px)."""
    return PanelScrollArea(panel)


def _open_without_collections(path: str, ask_above: int | None, token: CancelToken | None = None,
                              progress: Callable[[Progress], None] | None = None) -> Opened:
    """`open_and_prepare` with the GUI thread's collector held off until the new tree is frozen.

    Every object the worker builds is young until `open_and_prepare` freezes it at the end: a collection
    meanwhile (the GUI thread's timer) walks them all, holding the GIL 0.3-0.6 s at 100,000 tensors, and
    finds nothing, since a fresh tree holds no garbage. `token` (Cancel) and `progress` (a huge header's
    pieces) are passed on where the function takes them (tests stand in simpler ones).
    """
    accepted = inspect.signature(open_and_prepare).parameters
    extra: dict[str, Any] = {name: value for name, value in (("token", token), ("progress", progress))
                             if name in accepted and value is not None}
    with paused_gc():
        return open_and_prepare(path, ask_above, **extra)


def _centered(*widgets: QWidget) -> QHBoxLayout:
    row = QHBoxLayout()
    row.addStretch(1)
    for widget in widgets:
        row.addWidget(widget)
    row.addStretch(1)
    return row


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
        names = ", ".join(f"<code>{html.escape(shown(g))}</code>" for g in unsafe[:12])
        more = f" and {len(unsafe) - 12} more" if len(unsafe) > 12 else ""
        parts.append(f"<b>This file references code outside the safe set:</b> {names}{more}. ckptview did not "
                     "import or run any of it; <code>torch.load(weights_only=False)</code> would.")
    # The reader also reports unsafe globals as a warning; the sentence above already names them.
    warnings = [w for w in warnings if not (unsafe and all(g in w for g in unsafe))]
    for warning in warnings[:5]:
        parts.append(html.escape(shown(warning)))
    if len(warnings) > 5:
        parts.append(f"… and {len(warnings) - 5} more warnings")
    text = QLabel("<br>".join(parts))
    text.setTextFormat(Qt.TextFormat.RichText)  # always: the parts are escaped here, never guessed at by Qt
    text.setObjectName("bannerText")
    text.setWordWrap(True)
    text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    row.addWidget(text, 1)
    return frame

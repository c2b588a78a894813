"""One tab per checkpoint: opens the file in a worker, then shows banner, summary, filter, tree and panels.

The tab composes parts that each hold one job: `TabOpener` (the worker that opens the file), the pages
shown before the tree (`tab_pages`), `FileChangeBar`, `TreeFilter`, `CheckpointTreeView` and `SidePanels`
(the side tabs and their lazy building). It sees its window only through `TabHost`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QItemSelection, QItemSelectionModel, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.checkpoint import Checkpoint, Node
from ckptview.core.gc_policy import keep_out_of_collections
from ckptview.core.inspect.grouping import Row, find_row
from ckptview.core.jobs import Progress
from ckptview.core.message import message_of, rephrased
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.redaction import redact
from ckptview.core.session.offers import COMPARE, DOWNLOAD, EACH, OPEN, SERIES, WAIT, Offer, offers_for
from ckptview.core.session.opening import Opened
from ckptview.core.text import printable, shown
from ckptview.core.units import plural
from ckptview.gui.base.gc_guard import collect_when_deleted
from ckptview.gui.base.wording import window_text
from ckptview.gui.checkpoint.change_bar import FileChangeBar
from ckptview.gui.checkpoint.detail import DetailPanel
from ckptview.gui.checkpoint.filter import TreeFilter
from ckptview.gui.checkpoint.host import CheckpointContext, FollowsParameterOrder, NullHost, TabHost
from ckptview.gui.checkpoint.marks import NonFiniteMarks
from ckptview.gui.checkpoint.opener import TabOpener
from ckptview.gui.checkpoint.orders import OrderLearner
from ckptview.gui.checkpoint.pages import (
    OPEN_LINK,
    SERIES_LINK,
    AskPage,
    ErrorPage,
    LoadingPage,
    PageStack,
    safety_banner,
)
from ckptview.gui.checkpoint.side_panels import SidePanels, entries_of
from ckptview.gui.checkpoint.summary import SummaryHeader
from ckptview.gui.checkpoint.tree_model import DEVICE, DTYPE, PARAMS, SHARD, SIZE, CheckpointTreeModel
from ckptview.gui.checkpoint.tree_place import restore_place, save_place
from ckptview.gui.checkpoint.tree_view import NAME_WANTS, CheckpointTreeView
from ckptview.gui.graph import GraphPage

log = logging.getLogger(__name__)
SUMMARY_COLLAPSED = "tab/summary_collapsed"


class CheckpointTab(QWidget):
    """A checkpoint's page; states: "loading", "ready", "error", "asking" (a huge header: open it?)."""

    loaded = Signal()
    failed = Signal(str)
    selection_changed = Signal(list)  # list[Node]
    status_message = Signal(str)

    # The ready page's parts (set when the file is open and its page built).
    tree: CheckpointTreeView
    filter: TreeFilter
    side_panels: SidePanels
    changed_bar: FileChangeBar | None
    graph: GraphPage | None  # the Graph view, once shown

    def __init__(self, path: str, window: TabHost | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # Where it is: a URL's token stays in this Location, held as long as the tab (reloads reach it);
        # `path` is what the tab shows and logs.
        self.location = locate(path)
        self.path = self.location.shown if self.location.is_remote or "://" in path else os.path.abspath(path)
        self._window = window  # what panels see (None outside a window); the tab itself asks `host`
        self.host: TabHost = window if window is not None else NullHost()
        self.state = "loading"
        self.error_text = ""
        self.checkpoint: Checkpoint | None = None
        self.top: Row | None = None
        self.model: CheckpointTreeModel | None = None
        self.context: CheckpointContext | None = None
        self.changed_bar = None
        self._stops: list[Callable[[], None]] = []  # what stops the ready page's jobs (filter, panels)
        self._place: dict[str, Any] | None = None  # what to restore after a reload
        self._rows_by_name: dict[str, Row] | None = None  # tree rows by contract name, built when first asked
        self._selecting_names = False  # the graph selected these rows: do not send them back to it
        self._columns_hidden: dict[int, bool] | None = None  # the tree's columns before the graph hid them
        self.graph = None
        self._offers: dict[str, Offer] = {}  # what the error page offers, by key
        self.error_actions: dict[str, QPushButton] = {}
        self.opener = TabOpener(self.path, self, self.host.workspace)
        self.order_learner = OrderLearner(self)  # a Trainer folder's parameter order, after the tree is shown
        self.order_learner.arrived.connect(self._on_order_arrived)
        self._remote: RemoteOptions | None = None  # this tab's remote options, when not the window's (WAIT)
        self.opener.progress.connect(self._on_open_progress)
        self.opener.opened.connect(self._on_opened)
        self.opener.failed.connect(self._show_error)
        self.opener.asks.connect(self._ask)
        self.stack = PageStack(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack)
        self._show_loading()

    @property
    def _name(self) -> str:
        """The file's name as the tab shows it: escaped by printable() (no bidi override, newline, ESC)."""
        return printable(os.path.basename(self.path.rstrip("/" + os.sep)) or self.path)

    # --- opening ---------------------------------------------------------------------------------
    def start(self, ask_above: int | None = -1) -> None:
        """Open the file in a worker thread (a FIFO, socket, device or /proc file is refused at once).

        `ask_above`: header bytes above which to ask first (-1: the window's setting, None: never ask).
        """
        self.opener.start(self.host.settings.header_ask_bytes() if ask_above == -1 else ask_above, self._remote)

    def _on_open_progress(self, step: Progress) -> None:
        if self.state == "loading":
            self._loading.show_progress(step)

    def cancel(self) -> None:
        """Stop waiting for the file (the open stops at its next header piece or step; a result is discarded)."""
        if self.state == "loading":
            self.opener.abandon()
            self._show_error("Opening was cancelled.")

    def _on_opened(self) -> None:
        if self.isVisible():
            self.finish_open()
        else:  # a tab in the background waits its turn: 150 files do not build 150 pages in one go
            self.host.queue_build(self)

    @property
    def build_pending(self) -> bool:
        """True while the file is open and the page waits for its turn to be built."""
        return self.opener.pending is not None

    def finish_open(self) -> None:
        """Build the page of an opened file (the only part of opening that runs on the GUI thread)."""
        opened = self.opener.take()
        if opened is None:
            return
        self.checkpoint, self.top = opened.checkpoint, opened.top
        self._release_checkpoint = opened.held.release  # the window's workspace may share it: released, not closed
        try:
            self._build_ready_page(opened)
        except Exception as exc:  # a bug in a view must not take the other tabs down
            log.exception("building the view of %s failed", self.path)
            self._show_error(f"internal error while showing the file: {type(exc).__name__}: {exc}")
            return
        self.state = "ready"
        place, self._place = self._place, None
        if place:
            if place["filter"]:
                self.filter.set_text(place["filter"])
            restore_place(self.tree, self.tree.tree_model, opened.top, place)
            if place["side_tab"]:
                self.side_panels.show_panel(place["side_tab"])
        keep_out_of_collections()
        transfer = opened.checkpoint.metadata.get("_transfer")
        moved = f", {transfer.bytes:,} bytes in {plural(transfer.requests, 'request')}" if transfer is not None else ""
        self.status_message.emit(f"Opened {printable(os.path.basename(self.path.split('?')[0]))}: "
                                 f"{plural(opened.top.tensors, 'tensor')} in {self.opener.elapsed():.2f} s{moved}")
        asked = self.order_learner.start(opened, self.host.workspace.orders)
        if asked is not None:  # the tree is shown; its optimizer names are marked guessed until this arrives
            self.status_message.emit(f"Naming the optimizer state: {printable(asked)} builds its model in a worker…")
        self.loaded.emit()

    def _on_order_arrived(self, learned: int) -> None:
        """The library's parameter order arrived: the tree's labels and the panels name the state again."""
        if self.state != "ready":
            return
        self.tree.viewport().update()  # the rows' labels were named again in the worker
        for widget in self.side_panels.widgets:
            if isinstance(widget, FollowsParameterOrder):
                widget.parameter_order_arrived()
        self.status_message.emit("Optimizer state named by the model's own parameter order" if learned else
                                 "The library could not tell the model's parameter order: names stay guessed")

    def _show_error(self, text: str) -> None:
        error = self.opener.error
        said = message_of(error) if error is not None and str(error) == text else text  # with what fixes it
        if self.location.is_remote:  # a library's message may quote the URL with its token (internal errors too)
            text, said = redact(text), rephrased(said, redact)
        self.state, self.error_text = "error", text
        shown_text, offers = offers_for(error, window_text(said))  # in the window's words, with buttons
        self._offers = {offer.key: offer for offer in offers}
        page = ErrorPage(self._name, self.path, shown_text, [(o.key, o.text, o.tip) for o in offers],
                         {o.key: o.names for o in offers if o.names})
        page.reload_clicked.connect(self.reload)
        page.action_clicked.connect(self.take_offer)
        self.error_label, self.error_actions = page.label, page.offer_buttons
        self.stack.show_only(page)
        self.status_message.emit(f"Could not open {self._name}: {printable(shown_text)}")
        self.failed.emit(text)

    def take_offer(self, key: str) -> None:
        """Do what the error page offers: open the folder as a run, open one checkpoint it holds (`each#N`: the
        Nth of them), compare its first and last, download a file whose server ignores ranges, or wait longer
        for a slow server."""
        key, _, entry = key.partition("#")
        offer = self._offers.get(key)
        if offer is None or self.state != "error":
            return
        if offer.key == EACH and entry.isdigit() and int(entry) < len(offer.choices):
            self.host.open_paths([offer.choices[int(entry)]])  # one of several: this page stays for the others
        elif offer.key == COMPARE and len(offer.choices) == 2:
            self.host.open_diff(*offer.choices)
            self.host.close_page(self)
        elif offer.key == SERIES:
            self.host.open_series([str(offer.value)])
            self.host.close_page(self)  # the run's tab takes the place of this error
        elif offer.key == OPEN:
            self.host.open_paths([str(offer.value)])
            self.host.close_page(self)
        elif offer.key == DOWNLOAD:
            self.download_and_open(int(offer.value or 0))
        elif offer.key == WAIT:
            # What --deadline sets, for this tab's opens from now on.
            self._remote = replace(self._remote or self.host.workspace.remote, deadline=float(offer.value or 0))
            self.reload()

    def _on_banner_link(self, link: str) -> None:
        """The banner's links: another checkpoint of the folder, or the folder as a run."""
        others = list(self.checkpoint.metadata.get("_other_checkpoints") or ()) if self.checkpoint else []
        if link == SERIES_LINK:
            self.host.open_series([self.path])
        elif link.startswith(OPEN_LINK) and link[len(OPEN_LINK):].isdigit():
            index = int(link[len(OPEN_LINK):])
            if index < len(others):
                self.host.open_paths([os.path.join(self.path, others[index])])

    def download_and_open(self, limit: int) -> None:
        """Open the file again, downloading it whole (at most `limit` bytes when no size is announced), its
        progress on the loading page, Cancel stopping it."""
        self._show_loading()
        base = self._remote or self.host.workspace.remote  # the yes is for this open only
        self.opener.start(None, replace(base, download=True, max_download=limit or None))

    def _ask(self, size: int) -> None:
        """A header this large takes seconds and gigabytes to read: open it only when asked to."""
        self.state = "asking"
        page = AskPage(self._name, size)
        page.open_clicked.connect(self.open_anyway)
        page.close_clicked.connect(lambda: self.host.close_page(self))
        self.ask_label, self.open_anyway_button = page.label, page.open_button
        self.stack.show_only(page)
        self.status_message.emit(f"{self._name}: a {page.size_text} header; open it?")
        self.failed.emit(f"not opened yet: a {page.size_text} header asks first")  # settled, not loading

    def open_anyway(self) -> None:
        """The user accepted a huge header: open the file without asking again."""
        if self.state == "asking":
            self._show_loading()
            self.start(ask_above=None)

    def reload(self) -> None:
        """Open the file again (File > Reload, Ctrl+R), keeping the selection, expansion and filter."""
        if self.state == "loading" and not self.opener.busy:
            return
        if self.state == "ready" and self.model is not None and self.top is not None:
            self._place = save_place(self.tree, self.model, self.top, self.filter_edit.text(),
                                     self.side_tabs.tabText(self.side_tabs.currentIndex()))
        self._release()
        trees = self.trees()
        self.checkpoint = self.top = self.model = self.context = None
        self.graph, self._rows_by_name, self._columns_hidden = None, None, None
        old_page = self.stack.currentWidget()
        if old_page is not None:  # the old tree was frozen out of the collector: free it with its page
            collect_when_deleted(old_page, trees, self.host.workspace.in_use)
        self._show_loading()
        self.start()

    def _show_loading(self) -> None:
        self.state, self.error_text, self.changed_bar = "loading", "", None
        self._loading = LoadingPage(self._name)
        self._loading.cancel_clicked.connect(self.cancel)
        self.loading_label, self.loading_bar = self._loading.label, self._loading.bar
        self.stack.show_only(self._loading)

    # --- the file on disk --------------------------------------------------------------------------
    def check_file(self) -> bool:
        """Compare the file on disk with the one opened; show the reload bar when it changed."""
        return self.state == "ready" and self.changed_bar is not None and self.changed_bar.check()

    def mark_changed(self, what: str = "") -> None:
        """Show the bar "the file changed on disk: Reload" (a read failed on it, or the poll saw it)."""
        if self.state == "ready" and self.changed_bar is not None:
            self.changed_bar.mark(what)

    def _on_file_changed(self, message: str, first: bool) -> None:
        if first:  # panels still showing a tensor would read it again on a repaint or scroll: let them go
            self.side_panels.tell([])
        self.status_message.emit(f"{self._name}: {message}")

    # --- the ready page --------------------------------------------------------------------------
    def _build_ready_page(self, opened: Opened) -> None:
        checkpoint, top = opened.checkpoint, opened.top
        page = QWidget()
        box = QVBoxLayout(page)
        box.setContentsMargins(4, 4, 4, 0)
        box.setSpacing(4)
        self.changed_bar = FileChangeBar(self.path, opened.signature)
        self.changed_bar.reload_clicked.connect(self.reload)
        self.changed_bar.changed.connect(self._on_file_changed)
        box.addWidget(self.changed_bar)
        self.banner = safety_banner(checkpoint)
        if self.banner is not None:
            box.addWidget(self.banner)
            text = self.banner.findChild(QLabel, "bannerText")
            if text is not None:
                text.linkActivated.connect(self._on_banner_link)
        settings = self.host.settings  # the summary's choice holds for every tab, now and next time
        self.summary = SummaryHeader(checkpoint, top, opened.facts, collapsed=settings.flag(SUMMARY_COLLAPSED))
        self.summary.collapsedChanged.connect(lambda collapsed: settings.set_flag(SUMMARY_COLLAPSED, collapsed))
        box.addWidget(self.summary)

        self.model = CheckpointTreeModel(top, self, flat=opened.flat)
        self.tree = CheckpointTreeView(self.model, opened.sharded, opened.devices, settings)
        self.tree.status_message.connect(self.status_message)
        self.filter = TreeFilter(self.model, self.tree, top, opened.leaf_count, self, opened.analysis)
        self.filter_edit, self.match_label = self.filter.edit, self.filter.match_label
        self._stops.append(self.filter.stop)
        filter_row = QHBoxLayout()
        filter_row.addWidget(self.summary.toggle)
        filter_row.addWidget(self.filter_edit, 1)
        filter_row.addWidget(self.match_label)
        filter_row.addWidget(self.filter.cancel_button)  # while a filter's figures are computed
        self.graph_button = QToolButton()
        self.graph_button.setText("Graph")
        self.graph_button.setObjectName("graphButton")
        self.graph_button.setCheckable(True)
        self.graph_button.setToolTip("Show the model's graph beside the tree instead of the panels (Ctrl+G)")
        self.graph_button.toggled.connect(self.show_graph)
        filter_row.addWidget(self.graph_button)
        box.addLayout(filter_row)
        self.tree.selectionModel().selectionChanged.connect(self._on_selection)
        self.marks = NonFiniteMarks(self.model, self.tree, opened.analysis, self)  # NaN/Inf found: marked
        self._stops.append(self.marks.stop)
        self.tree.expandToDepth(0 if len(self.model.kids(top)) > 1 else 1)

        self.detail = DetailPanel(checkpoint, opened.sharing)
        self.detail.tensor_link_activated.connect(self.select_name)
        self.context = CheckpointContext(
            checkpoint=checkpoint, path=self.path, window=self._window,
            select_name=self.select_name, show_status=self.status_message.emit, analysis=opened.analysis,
            param_orders=self.host.workspace.orders)
        # Each panel is built when its side tab is first shown (see SidePanels); a panel whose view does not
        # apply (Optimizer without optimizer state) has no tab.
        panels = [spec for spec in self.host.panels if spec.needs is None or spec.needs in opened.features]
        self.side_panels = SidePanels(self.detail, self.context, lambda: entries_of(self.selected_rows()),
                                      panels, self)
        self.side_tabs = self.side_panels.tabs
        self._stops.append(self.side_panels.close)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("treeSplitter")
        self.splitter.addWidget(self.tree)
        # The right-hand side holds the panels, or the Graph view (it needs the room: built when first shown).
        self.right = QStackedWidget()
        self.right.setObjectName("rightSide")
        self.right.addWidget(self.side_tabs)
        self.graph = None
        self.splitter.addWidget(self.right)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        # The tree gets what its columns need beside its widest name (at least 240 px), the side panels
        # (histograms, the optimizer's table) ~560: at 1024 px they share the width in that proportion (Qt
        # scales them); where that is too narrow for both, columns give way to the names (fit_columns).
        tree_wants = min(max(self.tree.columns_width() + max(NAME_WANTS, self.tree.names_width()) + 20, 400), 640)
        self.splitter.setSizes([tree_wants, 560])
        box.addWidget(self.splitter, 1)
        self.stack.show_only(page)

    def showEvent(self, event: Any) -> None:
        """Build what waited for the tab to be seen: its page, then its panels."""
        super().showEvent(event)
        if self.build_pending:  # the user switched to it before its turn in the build queue
            self.finish_open()
        if self.top is not None and self.state == "ready":
            self.side_panels.build_current()

    def show_graph(self, on: bool = True) -> GraphPage | None:
        """Show the Graph view beside the tree (on) or the side panels again (off); returns the view."""
        if self.state != "ready" or self.checkpoint is None or self.context is None:
            return None
        if self.graph_button.isChecked() != on:
            self.graph_button.setChecked(on)  # comes back here through `toggled`
            return self.graph
        if on and self.graph is None:
            self.graph = GraphPage(self.checkpoint, self.context.analysis, graph_cache=self.host.graph_cache)
            self.graph.keys_selected.connect(self.select_names)
            self._stops.append(self.graph.stop)
            self.right.addWidget(self.graph)
            self.graph.start()
        width = sum(self.splitter.sizes()) or self.width()
        if on and self._columns_hidden is None:  # beside the graph the tree keeps room for its names
            # (a column that gave way to the names counts as shown: the tree decides again after)
            self._columns_hidden = {c: self.tree.isColumnHidden(c) and c not in self.tree.yielded
                                    for c in (DTYPE, SIZE, PARAMS, DEVICE, SHARD)}
            for column in self._columns_hidden:
                self.tree.setColumnHidden(column, True)
        elif not on and self._columns_hidden is not None:
            for column, hidden in self._columns_hidden.items():
                self.tree.setColumnHidden(column, hidden)
            self._columns_hidden = None
        if on and self.graph is not None:
            self.right.setCurrentWidget(self.graph)
            self.splitter.setSizes([width * 36 // 100, width - width * 36 // 100])
            names = [r.name for r in self.selected_rows()]
            if names:
                self.graph.show_keys(names)
        else:
            self.right.setCurrentWidget(self.side_tabs)
            self.splitter.setSizes([width * 48 // 104, width - width * 48 // 104])
        self.tree.fit_columns()
        return self.graph

    def toggle_graph(self) -> None:
        """View > Graph (Ctrl+G): the Graph view, or the panels again."""
        if self.state == "ready":
            self.show_graph(not self.graph_button.isChecked())

    def panel(self, title: str) -> QWidget | None:
        """The side panel titled `title` (the widget itself, not the scroll area around it)."""
        return self.side_panels.panel(title) if self.state == "ready" else None

    def show_panel(self, title: str) -> QWidget | None:
        """Bring the side panel titled `title` to the front; returns it."""
        return self.side_panels.show_panel(title) if self.state == "ready" else None

    # --- filter and selection ----------------------------------------------------------------------
    def apply_filter(self) -> None:
        """Filter the tree by the text in the filter box now (typing filters big trees in a worker)."""
        if self.model is not None:
            self.filter.apply()

    def focus_filter(self) -> None:
        """Put the cursor in the filter box (Ctrl+F)."""
        if self.state == "ready":
            self.filter.focus()

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
        # After a change on disk the panels would read values of a file that has since shrunk or been
        # rewritten; the bar offers the reload instead.
        if not self.check_file():
            self.side_panels.tell(entries_of(rows))
        if self.graph is not None and self.right.currentWidget() is self.graph and not self._selecting_names:
            self.graph.show_keys([r.name for r in rows])
        self.selection_changed.emit(self.selected_nodes())

    def select_names(self, names: list[str]) -> int:
        """Select the rows called `names` (the tensors a graph node reads), the first made current; returns
        how many were found (a filter hiding one is cleared)."""
        if self.model is None or self.top is None or not names:
            return 0
        if self._rows_by_name is None:
            self._rows_by_name = {}
            for row in self.top.walk():
                self._rows_by_name.setdefault(row.name, row)
        rows = [r for r in (self._rows_by_name.get(n) for n in names) if r is not None]
        if not rows:
            return 0
        indexes = [self.model.index_of(r) for r in rows]
        if not all(i.isValid() for i in indexes):  # hidden by the filter
            self.filter.set_text("")
            indexes = [self.model.index_of(r) for r in rows]
        selection = QItemSelection()
        for index in indexes:
            if index.isValid():
                selection.select(index, index)
        flags = (QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
        self._selecting_names = True
        try:
            model = self.tree.selectionModel()
            model.setCurrentIndex(indexes[0], QItemSelectionModel.SelectionFlag.NoUpdate)
            model.select(selection, flags)
        finally:
            self._selecting_names = False
        self.tree.scrollTo(indexes[0], QAbstractItemView.ScrollHint.PositionAtCenter)
        return len(rows)

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
            self.filter.set_text("")
            index = self.model.index_of(row)
        # Select exactly this row, whatever modifier keys the user holds (setCurrentIndex
        # on the view would add to the selection under Ctrl or Shift).
        flags = QItemSelectionModel.SelectionFlag
        self.tree.selectionModel().setCurrentIndex(index, flags.ClearAndSelect | flags.Rows)
        self.tree.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
        return True

    def expand_all(self) -> None:
        """Expand every row (fine on big trees: rows come in chunks)."""
        if self.state == "ready":
            self.tree.expandAll()

    def collapse_all(self) -> None:
        """Collapse every row."""
        if self.state == "ready":
            self.tree.collapseAll()

    # --- closing ---------------------------------------------------------------------------------
    def trees(self) -> list[Any]:
        """What holds this tab's trees (the checkpoint, the display rows, the filter's list of them), to
        release when the tab goes (`gc_guard.collect_when_deleted`)."""
        flat = self.model.flat_rows_if_built() if self.model is not None else None
        return [t for t in (self.checkpoint, self.top, flat) if t is not None]

    def release(self) -> None:
        """Release the file and stop pending work (the tab is closing: `Tab`)."""
        self.opener.close()
        self._release()

    def _release(self) -> None:
        self.opener.abandon()
        self.order_learner.stop()  # a parameter order still on its way is dropped (the cache keeps it)
        stops, self._stops = self._stops, []
        for stop in stops:  # the filter's job and the panels' jobs
            stop()
        if self.checkpoint is not None:
            self._release_checkpoint()

"""The main window: menus, toolbar, one tab per checkpoint, drag and drop, recent files, status bar."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import (
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QIcon,
)
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QMainWindow,
    QProgressBar,
    QStackedWidget,
    QStyle,
    QTabWidget,
    QWidget,
)

from ckptview.core.checkpoint import Node
from ckptview.core.graph import GraphCache
from ckptview.core.inspect.order_cache import ParamOrderCache
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.session.opening import OPTIMIZER, TRAINING
from ckptview.core.session.titles import distinct_titles
from ckptview.core.session.workspace import Workspace
from ckptview.core.sweep.runner import Placement
from ckptview.core.text import printable
from ckptview.core.units import plural
from ckptview.gui.app.compute_on import choose_compute
from ckptview.gui.app.menus import ActionSpec, WindowHost, WindowMenus
from ckptview.gui.app.start_page import StartPage
from ckptview.gui.base.gc_guard import collect_when_deleted, install_gc_guard
from ckptview.gui.base.palette import apply_palette
from ckptview.gui.base.settings import Settings
from ckptview.gui.base.tab import Tab, tabs_in
from ckptview.gui.base.workers import file_events
from ckptview.gui.checkpoint.host import Buildable, CheckpointContext, PanelSpec, TabHost
from ckptview.gui.checkpoint.tab import CheckpointTab
from ckptview.gui.compare.tab import compare_open_tabs, compare_with, open_diff
from ckptview.gui.export.dialog import SHORTCUT as EXPORT_SHORTCUT
from ckptview.gui.export.dialog import export_nodes
from ckptview.gui.panels.heatmap import HeatmapPanel
from ckptview.gui.panels.optimizer import OptimizerPanel
from ckptview.gui.panels.run import RunPanel
from ckptview.gui.panels.spectrum import SpectrumPanel
from ckptview.gui.panels.statistics import StatsPanel
from ckptview.gui.panels.training import TrainingPanel
from ckptview.gui.panels.values import ValuesPanel
from ckptview.gui.series.tab import choose_series_folder, open_series_tab
from ckptview.resources import resource_path

TITLE_BAR = 32  # pixels a window manager's title bar takes above the window (the frame is not ours)
FILE_POLL_MS = 1000  # how often open files are compared with the disk (size, mtime, inode)
FILES_PER_POLL = 8  # background tabs checked per poll, in turn (the current tab is checked every time)
FILE_FILTER = ("Checkpoints (*.pth *.pt *.ckpt *.bin *.safetensors *.gguf *.pt2 *.tar *.pkl *.distcp *.json);;"
               "All files (*)")


# What the window adds to every checkpoint tab and to its menus, listed: one table each, no registration.
# PANELS are the side panels beside "Details", by their order (napari's `layer_to_controls` style: the table
# is the extension point, and mypy checks every entry); a new panel is a class taking a CheckpointContext
# (gui/checkpoint/host.py) and a line here. ACTIONS are menu items whose callback gets the window.
# MainWindow(panels=..., actions=...) takes others (tests add their own).


PANELS = [
    PanelSpec("Statistics", StatsPanel, 10),
    PanelSpec("Heat-map", HeatmapPanel, 20),
    PanelSpec("Spectrum", SpectrumPanel, 25),
    PanelSpec("Values", ValuesPanel, 30),
    PanelSpec("Optimizer", OptimizerPanel, 40, needs=OPTIMIZER),  # only where the file holds optimizer state
    PanelSpec("Training", TrainingPanel, 50, needs=TRAINING),  # only where it holds epoch, loss, schedulers, ...
    PanelSpec("Run", RunPanel, 60),
]

ACTIONS = [
    ActionSpec("File", "Export…", export_nodes, EXPORT_SHORTCUT),
    ActionSpec("Tools", "Compare With…", compare_with),
    ActionSpec("Tools", "Compare Two Open Tabs…", compare_open_tabs),
    ActionSpec("Tools", "Compute On…", choose_compute),
]


def example_path() -> str:
    """The bundled example checkpoint, opened when the app starts without a file."""
    return resource_path("example.pth")


class MainWindow(QMainWindow):
    """Every way of opening a file ends in `open_paths`."""

    tab_opened = Signal(object)  # the new CheckpointTab

    def __init__(self, settings: Settings | None = None, parent: QWidget | None = None,
                 panels: Sequence[PanelSpec] = PANELS, actions: Sequence[ActionSpec] = ACTIONS,
                 remote: RemoteOptions | None = None) -> None:
        super().__init__(parent)
        install_gc_guard()  # garbage (closed tabs, plots) is collected on this thread, never a worker's
        self.settings = settings or Settings()
        self._panels = sorted(panels, key=lambda p: p.order)  # every tab's side panels (`TabHost.panels`)
        # This window's open checkpoints, shared by its tabs (`TabHost`), and how its URLs are read (the
        # command line's --download, --deadline, ...).
        # The parameter orders libraries told (a Trainer folder's optimizer named by them), kept between runs.
        self._workspace = Workspace(remote=remote, orders=ParamOrderCache())
        apply_palette(self.settings.palette())  # before any widget: each is built in the chosen colours
        # Where its Graph views keep the architectures they traced (`TabHost.graph_cache`; opened on first use).
        self.graph_cache = GraphCache()
        self.setWindowTitle("ckptview")
        icon_file = resource_path("ckptview.svg")
        if os.path.exists(icon_file):
            self.setWindowIcon(QIcon(icon_file))
        self.setAcceptDrops(True)
        self._tab_status: weakref.WeakKeyDictionary[QWidget, str] = weakref.WeakKeyDictionary()
        self.tabs = QTabWidget()
        self.tabs.setObjectName("checkpointTabs")
        self.tabs.setDocumentMode(True)
        self.tabs.setTabsClosable(True)
        self.tabs.setMovable(True)
        self.tabs.setElideMode(Qt.TextElideMode.ElideMiddle)  # a long file name never widens the window
        self.tabs.tabBar().setUsesScrollButtons(True)
        self.tabs.tabCloseRequested.connect(self.close_tab)
        self.tabs.currentChanged.connect(self._on_current_changed)
        # No tab open: a start page (drop hint, recent files, the example, Open…), never a blank window.
        self.start_page = StartPage()
        self.start_page.open_clicked.connect(self.open_dialog)
        self.start_page.series_clicked.connect(self.open_series_dialog)
        self.start_page.url_clicked.connect(self.open_url_dialog)
        self.start_page.example_clicked.connect(self.open_example)
        self.start_page.recent_clicked.connect(lambda path: self.open_paths([path]))
        self.pages = QStackedWidget()
        self.pages.addWidget(self.start_page)
        self.pages.addWidget(self.tabs)
        self.setCentralWidget(self.pages)
        self._build_status_bar()
        host: WindowHost = self  # mypy checks here that the window gives its menus what their actions call
        self.menus = WindowMenus(self, host, actions)  # the menus, their actions, the toolbar (gui/app/menus.py)
        self._update_start_page()  # none open yet: the start page, the actions on a tab waiting for one
        # Opened files whose tab is in the background wait here and are built one per event-loop turn.
        self._build_queue: list[CheckpointTab] = []
        self._build_timer = QTimer(self, singleShot=True, interval=0)
        self._build_timer.timeout.connect(self._build_next)
        self._poll_turn = 0
        self._poll_timer = QTimer(self, interval=FILE_POLL_MS)
        self._poll_timer.timeout.connect(self.poll_files)
        self._poll_timer.start()
        file_events().file_changed.connect(self._on_file_changed)
        self.resize(1280, 820)
        geometry = self.settings.bytes_value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        self.fit_to_screen()
        state = self.settings.bytes_value("window/state")
        if state is not None:
            self.restoreState(state)

    def fit_to_screen(self) -> None:
        """Never larger than the screen the window opens on (1280 x 820 is taller than a 1280 x 800 laptop;
        a saved size may come from a larger monitor); room is left for the title bar."""
        screen = self.screen()
        if screen is None:
            return
        room = screen.availableGeometry()
        width, height = min(self.width(), room.width()), min(self.height(), room.height() - TITLE_BAR)
        if (width, height) != (self.width(), self.height()):
            self.resize(max(width, 640), max(height, 400))

    # --- building --------------------------------------------------------------------------------
    def _icon(self, pixmap: QStyle.StandardPixmap) -> QIcon:
        return self.style().standardIcon(pixmap)

    def _build_status_bar(self) -> None:
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(160)
        self.progress.setMaximumHeight(14)
        self.progress.hide()
        self.status_label = QLabel()
        self.statusBar().addPermanentWidget(self.status_label)
        self.statusBar().addPermanentWidget(self.progress)
        # A URL's tab: bytes and requests so far, refreshed while values are read (cheap: two counters).
        self.transfer_label = QLabel()
        self.statusBar().addPermanentWidget(self.transfer_label)
        from PySide6.QtCore import QTimer

        self._transfer_timer = QTimer(self, interval=500)
        self._transfer_timer.timeout.connect(self._show_transfer)
        self._transfer_timer.start()

    def _show_transfer(self) -> None:
        tab = self.current_tab()
        ckpt = tab.checkpoint if tab is not None else None
        transfer = ckpt.metadata.get("_transfer") if ckpt is not None else None
        text = (f"transferred {transfer.bytes:,} bytes in {plural(transfer.requests, 'request')}"
                if transfer is not None else "")
        if self.transfer_label.text() != text:
            self.transfer_label.setText(text)

    def set_palette(self, choice: str) -> None:
        """Use the palette `choice` ("system", "light" or "dark") now and in later runs."""
        self.settings.set_palette(choice)
        self.settings.sync()
        apply_palette(self.settings.palette())
        self.menus.check_palette(self.settings.palette())

    # --- opening ---------------------------------------------------------------------------------
    def open_paths(self, paths: Iterable[str]) -> list[CheckpointTab]:
        """Open each path in its own tab (or switch to its tab when already open); the one way in."""
        opened = []
        for raw in paths:
            held = locate(str(raw).strip())  # a URL's token: held here until its tab holds it
            path = held.shown if held.is_remote else _normalized(str(raw))
            existing = self.tab_for(path)
            if existing is not None:
                self.tabs.setCurrentWidget(existing)
                opened.append(existing)
                continue
            host: TabHost = self  # mypy checks here that the window gives a tab what it needs
            tab = CheckpointTab(path, window=host)
            tab.status_message.connect(lambda text, tab=tab: self._on_tab_status(tab, text))
            tab.loaded.connect(lambda tab=tab: self._on_tab_loaded(tab))
            tab.failed.connect(lambda _text, tab=tab: self._on_tab_failed(tab))
            shown = _shown(path)
            # A file's name is text from outside: escaped (no bidi override, newline or ESC), as everywhere.
            index = self.tabs.addTab(tab, printable(os.path.basename(shown.rstrip("/" + os.sep)) or shown))
            self.tabs.setTabToolTip(index, printable(shown))
            self._retitle()
            self.tabs.setTabIcon(index, self._icon(QStyle.StandardPixmap.SP_FileIcon))
            self.tabs.setCurrentIndex(index)
            tab.start()
            opened.append(tab)
            self.tab_opened.emit(tab)
        self._update_busy()
        return opened

    def _retitle(self) -> None:
        """Checkpoint tabs named by their file, with the shortest parent path that tells files of one name
        apart (`run_a/model.pth`, `run_b/model.pth`); the window's title follows the current tab."""
        tabs = self.checkpoint_tabs()
        for tab, title in zip(tabs, distinct_titles([_shown(t.path) for t in tabs]), strict=True):
            index = self.tabs.indexOf(tab)
            if self.tabs.tabText(index) != printable(title):
                self.tabs.setTabText(index, printable(title))
        self._update_start_page()
        title = self.tabs.tabText(self.tabs.currentIndex()) if self.tabs.count() else ""
        self.setWindowTitle(f"{title} — ckptview" if title else "ckptview")

    def _update_start_page(self) -> None:
        """The start page while no tab is open (its recent files as they are now), else the tabs."""
        if self.tabs.count():
            self.pages.setCurrentWidget(self.tabs)
        else:
            self.pages.setCurrentWidget(self.start_page)
            self.start_page.set_recent(self.settings.recent_files())
        self._update_tab_actions()

    def _update_tab_actions(self) -> None:
        """Actions on the current tab are enabled only when there is one they act on (not on the start page)."""
        self.menus.enable_for(self.current_tab() is not None, self.tabs.count() > 0)

    def _on_tab_status(self, tab: QWidget, text: str) -> None:
        """A tab's message: kept with the tab, shown only while that tab is the current one."""
        text = printable(text)  # it names the file, and may quote it
        self._tab_status[tab] = text
        if self.tabs.currentWidget() is tab:
            self.statusBar().showMessage(text)

    def _on_tab_failed(self, tab: CheckpointTab) -> None:
        index = self.tabs.indexOf(tab)
        if index >= 0:  # a failed tab must not look like a good one
            self.tabs.setTabIcon(index, self._icon(QStyle.StandardPixmap.SP_MessageBoxCritical))
        self._update_busy()

    def queue_build(self, tab: Buildable) -> None:
        """Build `tab`'s page on a later event-loop turn (one tab per turn, the current tab first)."""
        if not isinstance(tab, CheckpointTab):  # only the window's own tabs wait in its queue
            tab.finish_open()
            return
        if tab not in self._build_queue:
            self._build_queue.append(tab)
        self._build_timer.start()

    def _build_next(self) -> None:
        self._build_queue = [t for t in self._build_queue if t.build_pending and self.tabs.indexOf(t) >= 0]
        if not self._build_queue:
            return
        current = self.current_tab()
        tab = current if current in self._build_queue else self._build_queue[0]
        self._build_queue.remove(tab)
        tab.finish_open()
        if self._build_queue:
            self._build_timer.start()

    def reload_current_tab(self) -> None:
        """File > Reload (Ctrl+R): open the current tab's file again; the other tabs keep their state."""
        tab = self.current_tab()
        if tab is not None:
            tab.reload()
            self._update_busy()

    def poll_files(self) -> None:
        """Compare open files with the disk: the current tab every time, the others a few at a time."""
        tabs = self.checkpoint_tabs()
        if not tabs:
            return
        current = self.current_tab()
        if current is not None:
            current.check_file()
        for _ in range(min(FILES_PER_POLL, len(tabs))):
            self._poll_turn = (self._poll_turn + 1) % len(tabs)
            if tabs[self._poll_turn] is not current:
                tabs[self._poll_turn].check_file()

    def _on_file_changed(self, path: str, message: str) -> None:
        """A worker's read found `path` changed on disk: the tab holding it offers the reload."""
        names = {os.path.abspath(path), os.path.realpath(path)}
        for tab in self.checkpoint_tabs():
            roots = {tab.path, os.path.realpath(tab.path)}
            inside = any(n == r or n.startswith(r.rstrip(os.sep) + os.sep) for n in names for r in roots)
            if inside and not tab.check_file():  # the core saw a change the stat did not (same size, mtime)
                tab.mark_changed("a read found it different from what was opened")

    def _on_tab_loaded(self, tab: CheckpointTab) -> None:
        if tab.path != os.path.abspath(example_path()):
            self.settings.add_recent(_shown(tab.path))  # a URL without user:password or tokens
        splitter = self.settings.bytes_value("tab/splitter")
        if splitter is not None:
            tab.splitter.restoreState(splitter)
        tab.splitter.splitterMoved.connect(
            lambda *_: self.settings.set_bytes_value("tab/splitter", tab.splitter.saveState()))
        self._update_busy()

    def _update_busy(self) -> None:
        loading = [t for t in self.checkpoint_tabs() if t.state == "loading"]
        self.progress.setVisible(bool(loading))
        self.status_label.setText(f"opening {len(loading)} file{'s' if len(loading) > 1 else ''}…"
                                  if loading else "")

    def open_dialog(self) -> None:
        """File > Open: pick one or more files."""
        start = os.path.dirname(self.settings.recent_files()[0]) if self.settings.recent_files() else ""
        paths, _ = QFileDialog.getOpenFileNames(self, "Open checkpoints", start, FILE_FILTER)
        if paths:
            self.open_paths(paths)

    def open_url_dialog(self) -> None:
        """File > Open URL: https://, hf://ORG/REPO[@REV]/PATH, s3://BUCKET/KEY, any fsspec protocol."""
        from PySide6.QtWidgets import QInputDialog

        text, ok = QInputDialog.getText(self, "Open URL", "URL (https://, hf://org/repo/file, s3://bucket/key):")
        if ok and text.strip():
            self.open_paths([text.strip()])

    def open_example(self) -> None:
        """Open the bundled example checkpoint."""
        self.open_paths([example_path()])

    def open_diff(self, a: str, b: str) -> None:
        """`--diff A B`: the comparison tab of A and B."""
        open_diff(self, a, b)

    def open_series(self, paths: list[str]) -> QWidget:
        """A series tab: the checkpoints of a training run as a timeline (`--series`, File > Open Series…)."""
        return open_series_tab(self, list(paths))

    def open_series_dialog(self) -> None:
        """File > Open Series…: pick a folder of checkpoints."""
        folder = choose_series_folder(self)
        if folder:
            self.open_series([folder])

    def add_tab(self, widget: QWidget, title: str, tooltip: str | list[str] = "") -> int:
        """Add a closable main tab that is not a checkpoint (a comparison, a report); returns its index.

        Title and tooltip name files: escaped like every name. A tooltip of several lines comes as a list
        (a newline inside one file's name is escaped, never a line of its own)."""
        lines = tooltip if isinstance(tooltip, list) else [tooltip or title]
        index = self.tabs.addTab(widget, printable(title))
        self.tabs.setTabToolTip(index, "\n".join(printable(line) for line in lines))
        self._update_start_page()
        self.tabs.setCurrentIndex(index)
        return index

    def raise_window(self) -> None:
        """Bring the window to the front (a second launch handed us files)."""
        if self.isMinimized():
            self.showNormal()
        self.show()
        self.raise_()
        self.activateWindow()

    # --- tabs ------------------------------------------------------------------------------------
    def checkpoint_tabs(self) -> list[CheckpointTab]:
        """Every checkpoint tab, in tab order."""
        return [w for w in (self.tabs.widget(i) for i in range(self.tabs.count())) if isinstance(w, CheckpointTab)]

    def tab_for(self, path: str) -> CheckpointTab | None:
        """The tab showing `path`, if any."""
        path = _normalized(path)
        return next((t for t in self.checkpoint_tabs() if t.path == path), None)

    def current_tab(self) -> CheckpointTab | None:
        """The current tab when it shows a checkpoint."""
        widget = self.tabs.currentWidget()
        return widget if isinstance(widget, CheckpointTab) else None

    @property
    def panels(self) -> Sequence[PanelSpec]:
        """The side panels every checkpoint tab shows, by their order (`TabHost`)."""
        return self._panels

    @property
    def workspace(self) -> Workspace:
        """This window's open checkpoints: each file opened once, shared by its tabs (`TabHost`)."""
        return self._workspace

    def placement(self) -> Placement:
        """Where a comparison's and an export's reading runs (Tools > Compute On…): a Dask scheduler, else
        this machine (its cores when a checkpoint is large enough)."""
        return Placement(self.settings.scheduler())

    def current_context(self) -> CheckpointContext | None:
        """The panel context of the current tab (None while loading or on an error)."""
        tab = self.current_tab()
        return tab.context if tab is not None else None

    def current_selection(self) -> list[Node]:
        """The nodes selected in the current tab's tree."""
        tab = self.current_tab()
        return tab.selected_nodes() if tab is not None else []

    def is_current(self, widget: QWidget) -> bool:
        """True when `widget` is the main tab the user sees (`TabHost`)."""
        return self.tabs.currentWidget() is widget

    def close_page(self, widget: QWidget) -> None:
        """Close the main tab holding `widget`, if one does (`TabHost`: a tab's own Close button)."""
        index = self.tabs.indexOf(widget)
        if index >= 0:
            self.close_tab(index)

    def close_tab(self, index: int) -> None:
        """Close the tab at `index` and release its file."""
        widget = self.tabs.widget(index)
        if widget is None:
            return
        if isinstance(widget, Tab):
            trees = widget.trees()  # a tab's trees (a checkpoint's, a comparison's two) were frozen out of
            widget.release()  # the collector: free them once it is gone, not the others
            collect_when_deleted(widget, trees, self.workspace.in_use)
        self.tabs.removeTab(index)
        widget.deleteLater()
        self._retitle()
        self._update_busy()

    def close_current_tab(self) -> None:
        """Ctrl+W."""
        if self.tabs.count():
            self.close_tab(self.tabs.currentIndex())

    def _on_current_changed(self, index: int) -> None:
        widget = self.tabs.widget(index)
        if isinstance(widget, CheckpointTab):
            if widget.build_pending:  # the user is looking at it: build it now, ahead of the queue
                widget.finish_open()
            widget.check_file()
        title = self.tabs.tabText(index) if widget is not None else ""
        self.setWindowTitle(f"{title} — ckptview" if title else "ckptview")
        self._update_tab_actions()
        # The status bar speaks for the current tab only: another tab's message must not linger there.
        self.statusBar().showMessage(self._tab_status.get(widget, "") if widget is not None else "")

    # --- drag and drop, closing --------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if _local_paths(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: Any) -> None:
        if _local_paths(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = _local_paths(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.open_paths(paths)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.settings.set_bytes_value("window/geometry", self.saveGeometry())
        self.settings.set_bytes_value("window/state", self.saveState())
        tab = self.current_tab()
        if tab is not None and tab.state == "ready":
            self.settings.set_bytes_value("tab/splitter", tab.splitter.saveState())
        self.settings.sync()
        self._poll_timer.stop()
        self._build_timer.stop()
        self._build_queue.clear()
        for page in tabs_in(self.tabs):
            page.release()
        self.graph_cache.close()
        if self._workspace.orders is not None:
            self._workspace.orders.close()
        super().closeEvent(event)


def _local_paths(mime: Any) -> list[str]:
    if mime is None or not mime.hasUrls():
        return []
    return [url.toLocalFile() if url.isLocalFile() else url.toString() for url in mime.urls()
            if url.isLocalFile() or locate(url.toString()).is_remote]  # dropped links open as URLs


def _normalized(path: str) -> str:
    """A local path made absolute; a URL in its shown form (no credentials or tokens: tabs and logs
    carry that form, reads map it back to the URL given)."""
    location = locate(path.strip())
    if location.is_remote:
        return location.shown
    return os.path.abspath(os.path.expanduser(path))


def _shown(path: str) -> str:
    """What a person sees of a path: a URL without user:password or query tokens."""
    return locate(path).shown

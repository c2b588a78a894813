"""The main window's menus, toolbar and shortcuts, built against `WindowHost`: what their actions call.

`WindowMenus` makes every action (File, Edit, View, the extra `ActionSpec` items of Tools and File, Help),
the menus (Help stays last), Open Recent, View > Palette and the toolbar at the right end of the menu bar.
The actions reach their window only through `WindowHost`, a Protocol whose members mypy checks against
`MainWindow` where the window passes itself; `ActionSpec` callbacks get that window.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QActionGroup, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QMessageBox, QStyle, QTabWidget, QToolBar

from ckptview import __version__
from ckptview.core.text import printable
from ckptview.gui.base.palette import Theme, apply_palette, on_palette_change, tinted
from ckptview.gui.base.settings import Settings
from ckptview.gui.checkpoint.tab import CheckpointTab


class WindowHost(Protocol):
    """The window, as far as its menus, toolbar and shortcuts may see it."""

    @property
    def settings(self) -> Settings:
        """The user's settings (recent files, the palette)."""
        ...

    @property
    def tabs(self) -> QTabWidget:
        """The window's tabs (Next Tab, Previous Tab)."""
        ...

    def open_dialog(self) -> None:
        """File > Open…"""
        ...

    def open_url_dialog(self) -> None:
        """File > Open URL…"""
        ...

    def open_example(self) -> None:
        """File > Open Example."""
        ...

    def open_series_dialog(self) -> None:
        """File > Open Series…"""
        ...

    def open_paths(self, paths: Iterable[str]) -> list[CheckpointTab]:
        """Open each path in its tab (File > Open Recent)."""
        ...

    def reload_current_tab(self) -> None:
        """File > Reload."""
        ...

    def close_current_tab(self) -> None:
        """File > Close Tab."""
        ...

    def close(self) -> bool:
        """File > Quit."""
        ...

    def current_tab(self) -> CheckpointTab | None:
        """The checkpoint tab shown (Find, Expand All, Collapse All, Graph act on it)."""
        ...

    def set_palette(self, choice: str) -> None:
        """View > Palette."""
        ...


@dataclass(frozen=True)
class ActionSpec:
    """A menu item: its menu, its text, `callback(window)` when triggered, and an optional shortcut."""

    menu: str
    text: str
    callback: Callable[[Any], object]
    shortcut: str | None = None


class WindowMenus:
    """Every action of the window, its menus (`menus["File"]`, `menu(title)`) and its toolbar."""

    def __init__(self, window: QMainWindow, host: WindowHost, extra: Sequence[ActionSpec] = ()) -> None:
        self.window, self.host = window, host
        self.menus: dict[str, QMenu] = {}
        self.palette_actions: dict[str, QAction] = {}
        self._build_actions()
        on_palette_change(window, self._tint_icons)
        self._build_menus(extra)
        self.toolbar = self._build_toolbar()

    def __getitem__(self, title: str) -> QMenu:
        return self.menus[title.replace("&", "")]

    def _action(self, text: str, slot: Callable[[], object], shortcut: Any = None,
                icon: QStyle.StandardPixmap | None = None) -> QAction:
        action = QAction(text, self.window)
        if icon is not None:
            action.setIcon(self.window.style().standardIcon(icon))
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(lambda _checked=False: slot())
        self.window.addAction(action)  # shortcuts work even while the menu bar is hidden
        return action

    def _on_tab(self, action: Callable[[CheckpointTab], object]) -> Callable[[], None]:
        def act() -> None:
            tab = self.host.current_tab()
            if tab is not None:
                action(tab)
        return act

    def _cycle(self, step: int) -> Callable[[], None]:
        def cycle() -> None:
            tabs = self.host.tabs
            if tabs.count() > 1:
                tabs.setCurrentIndex((tabs.currentIndex() + step) % tabs.count())
        return cycle

    def _build_actions(self) -> None:
        host, sp = self.host, QStyle.StandardPixmap
        self.open_action = self._action("&Open…", host.open_dialog, QKeySequence.StandardKey.Open,
                                        sp.SP_DialogOpenButton)
        self.example_action = self._action("Open &Example", host.open_example)
        self.open_series_action = self._action("Open &Series…", host.open_series_dialog)
        self.open_url_action = self._action("Open &URL…", host.open_url_dialog, "Ctrl+L")
        self.reload_action = self._action("&Reload", host.reload_current_tab, "Ctrl+R", sp.SP_BrowserReload)
        self.reload_action.setStatusTip("Open the current tab's file again, keeping the selection")
        self.close_action = self._action("&Close Tab", host.close_current_tab, "Ctrl+W", sp.SP_DialogCloseButton)
        self.quit_action = self._action("&Quit", host.close, QKeySequence.StandardKey.Quit)
        self.find_action = self._action("&Find…", self._on_tab(CheckpointTab.focus_filter), "Ctrl+F",
                                        sp.SP_FileDialogContentsView)
        self.expand_action = self._action("&Expand All", self._on_tab(CheckpointTab.expand_all), "Ctrl+E",
                                          sp.SP_ArrowDown)
        self.collapse_action = self._action("Co&llapse All", self._on_tab(CheckpointTab.collapse_all),
                                            "Ctrl+Shift+E", sp.SP_ArrowUp)
        self.graph_action = self._action("&Graph", self._on_tab(CheckpointTab.toggle_graph), "Ctrl+G")
        self.graph_action.setStatusTip("Show the model's graph beside the tree, or the panels again")
        self.next_tab_action = self._action("&Next Tab", self._cycle(1), "Ctrl+Tab")
        self.prev_tab_action = self._action("&Previous Tab", self._cycle(-1), "Ctrl+Shift+Tab")
        self.about_action = self._action("&About ckptview", self.about)

    def _tint_icons(self, current: Theme) -> None:
        """The toolbar's black arrows drawn in the palette's text colour (they vanished on dark)."""
        sp = QStyle.StandardPixmap
        for action, pixmap in ((self.expand_action, sp.SP_ArrowDown), (self.collapse_action, sp.SP_ArrowUp)):
            action.setIcon(tinted(self.window.style().standardIcon(pixmap), current.color("window_text")))

    def _build_menus(self, extra: Sequence[ActionSpec]) -> None:
        file_menu = self.menu("File")
        file_menu.addAction(self.open_action)
        file_menu.addAction(self.open_url_action)
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self.fill_recent)
        self.fill_recent()
        file_menu.addAction(self.example_action)
        file_menu.addAction(self.open_series_action)
        file_menu.addAction(self.reload_action)
        file_menu.addSeparator()
        file_menu.addAction(self.close_action)
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)
        self.menu("Edit").addAction(self.find_action)
        view = self.menu("View")
        for action in (self.expand_action, self.collapse_action, self.graph_action, None, self.next_tab_action,
                       self.prev_tab_action):
            view.addSeparator() if action is None else view.addAction(action)
        view.addSeparator()
        self._build_palette_menu(view)
        for spec in extra:
            item = self._action(spec.text, partial(spec.callback, self.host), spec.shortcut)
            if spec.menu.replace("&", "") == "File":  # keep Close and Quit at the bottom of File
                file_menu.insertAction(self.close_action, item)
            else:
                self.menu(spec.menu).addAction(item)
        self.menu("Help").addAction(self.about_action)

    def _build_palette_menu(self, view: QMenu) -> None:
        """View > Palette: the system's choice, light or dark; kept in settings (`view/palette`)."""
        menu = view.addMenu("&Palette")
        group = QActionGroup(self.window)
        group.setExclusive(True)
        for choice, text in (("system", "Follow the &System"), ("light", "&Light"), ("dark", "&Dark")):
            action = menu.addAction(text)
            action.setCheckable(True)
            action.setChecked(choice == self.host.settings.palette())
            action.triggered.connect(partial(self._choose_palette, choice))
            group.addAction(action)
            self.palette_actions[choice] = action
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._on_color_scheme_changed)

    def _choose_palette(self, choice: str, _checked: bool = False) -> None:
        self.host.set_palette(choice)

    def check_palette(self, choice: str) -> None:
        """Show `choice` checked in View > Palette."""
        action = self.palette_actions.get(choice)
        if action is not None and not action.isChecked():
            action.setChecked(True)

    def _on_color_scheme_changed(self, _scheme: Any) -> None:
        if self.host.settings.palette() == "system":  # the desktop switched between light and dark
            apply_palette("system")

    def menu(self, title: str) -> QMenu:
        """The menu called `title` ("File", "Tools", ...), created when missing (Help stays last)."""
        key = title.replace("&", "")
        if key not in self.menus:
            menu = QMenu(f"&{key}", self.window)
            help_menu = self.menus.get("Help")
            if help_menu is not None:
                self.window.menuBar().insertMenu(help_menu.menuAction(), menu)
            else:
                self.window.menuBar().addMenu(menu)
            self.menus[key] = menu
        return self.menus[key]

    def _build_toolbar(self) -> QToolBar:
        """Open, Expand, Collapse and Find, at the right end of the menu bar: a row of its own cost 32 px
        of a 640 px screen (the histograms' room). A native menu bar (macOS) holds no widgets: a toolbar."""
        bar = QToolBar("Main")
        bar.setObjectName("mainToolbar")
        bar.setMovable(False)
        bar.setIconSize(QSize(16, 16))
        bar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        for action in (self.open_action, None, self.expand_action, self.collapse_action, None, self.find_action):
            bar.addSeparator() if action is None else bar.addAction(action)
        menu_bar = self.window.menuBar()
        if menu_bar.isNativeMenuBar():
            self.window.addToolBar(bar)
        else:
            bar.setStyleSheet("QToolBar { border: none; padding: 0; spacing: 2px; }")
            bar.setContentsMargins(0, 0, 0, 0)
            menu_bar.setCornerWidget(bar, Qt.Corner.TopRightCorner)
        return bar

    def fill_recent(self) -> None:
        """File > Open Recent, as the settings list the files now."""
        self.recent_menu.clear()
        files = self.host.settings.recent_files()
        for i, path in enumerate(files):
            name = printable(os.path.basename(path)).replace("&", "&&")
            label = f"&{i + 1} {name}" if i < 9 else name
            action = self.recent_menu.addAction(label)
            action.triggered.connect(lambda _checked=False, p=path: self.host.open_paths([p]))
            action.setToolTip(printable(path))
            action.setStatusTip(printable(path))
        if files:
            self.recent_menu.addSeparator()
            self.recent_menu.addAction("Clear Recent", self.host.settings.clear_recent)
        else:
            self.recent_menu.addAction("No recent files").setEnabled(False)

    def enable_for(self, checkpoint: bool, tabs: bool) -> None:
        """Actions on the current tab only while a checkpoint tab is shown; Close Tab while any tab is open."""
        for action in (self.expand_action, self.collapse_action, self.find_action, self.graph_action,
                       self.reload_action):
            action.setEnabled(checkpoint)
        self.close_action.setEnabled(tabs)

    def about(self) -> None:
        """Help > About."""
        QMessageBox.about(self.window, "About ckptview",
                          f"<b>ckptview {__version__}</b><p>Browse PyTorch checkpoints without executing them.</p>")


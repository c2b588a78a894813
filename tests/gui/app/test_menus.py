"""The window's menus reach their window only through `WindowHost` (gui/app/menus.py): built on a bare
QMainWindow against a recording host, each action calls the host's member it names."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtWidgets import QMainWindow, QTabWidget

from ckptview.gui.app.menus import ActionSpec, WindowHost, WindowMenus


class RecordingHost:
    """A `WindowHost` that records what the menus ask of it."""

    def __init__(self, settings) -> None:
        self.settings, self.tabs, self.calls = settings, QTabWidget(), []

    def _record(name):  # noqa: N805 - builds the recording methods below
        return lambda self, *args: self.calls.append((name, *args))

    open_dialog = _record("open_dialog")
    open_url_dialog = _record("open_url_dialog")
    open_example = _record("open_example")
    open_series_dialog = _record("open_series_dialog")
    reload_current_tab = _record("reload_current_tab")
    close_current_tab = _record("close_current_tab")
    set_palette = _record("set_palette")

    def open_paths(self, paths: Iterable[str]) -> list:
        self.calls.append(("open_paths", list(paths)))
        return []

    def close(self) -> bool:
        self.calls.append(("close",))
        return True

    def current_tab(self):
        return None


def test_each_action_calls_the_host_member_it_names(qtbot, settings) -> None:
    window = QMainWindow()
    qtbot.addWidget(window)
    host = RecordingHost(settings)
    settings.add_recent("/runs/a.pt")
    extra = [ActionSpec("Tools", "Record", lambda win: host.calls.append(("extra", win is host)))]
    menus = WindowMenus(window, host, extra)  # type: WindowHost via the Protocol
    for action in (menus.open_action, menus.open_url_action, menus.example_action, menus.open_series_action,
                   menus.reload_action, menus.close_action, menus.quit_action, menus.palette_actions["dark"],
                   menus.find_action, menus.expand_action, menus.next_tab_action):
        action.trigger()  # Find, Expand and Next Tab do nothing without a tab
    menus.fill_recent()
    next(a for a in menus.recent_menu.actions() if a.toolTip() == "/runs/a.pt").trigger()
    next(a for a in menus.menu("Tools").actions() if a.text() == "Record").trigger()
    assert host.calls == [("open_dialog",), ("open_url_dialog",), ("open_example",), ("open_series_dialog",),
                          ("reload_current_tab",), ("close_current_tab",), ("close",), ("set_palette", "dark"),
                          ("open_paths", ["/runs/a.pt"]), ("extra", True)]
    assert [a.text() for a in window.menuBar().actions()] == ["&File", "&Edit", "&View", "&Tools", "&Help"]
    menus.enable_for(checkpoint=False, tabs=True)
    assert not menus.find_action.isEnabled() and menus.close_action.isEnabled()


def test_the_main_window_is_a_window_host(window) -> None:
    host: WindowHost = window  # mypy checks MainWindow against it where the window builds its menus
    assert host.tabs is window.tabs and window.menus["File"] is window.menus.menu("File")

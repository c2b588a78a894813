"""`ckptview` on a Linux desktop missing a library of Qt's xcb plugin names them and the install command in
one line (issue 35, finding 9): Qt aborted with "could not load the Qt platform plugin xcb ... Reinstalling
the application may fix this problem" on Debian 12 without libxcb-icccm4, libxcb-keysyms1, libxcb-cursor0."""

from __future__ import annotations

import os
import sys

import pytest

from ckptview.cli import main  # the window's flags are parsed there, then handed to gui/app/launch.py
from ckptview.gui.app import platform_libs
from ckptview.gui.app.launch import startup_problem

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Qt's xcb plugin is Linux's")
DEBIAN_12_WITHOUT = {"libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0"}  # the desktop


def finder_without(missing: set[str]):
    """A stand-in for the loader: every library loads except `missing`."""
    return lambda soname: soname not in missing


def test_the_plugins_own_needs_are_read_from_its_elf_file():
    plugin = platform_libs.xcb_plugin()
    assert plugin is not None and os.path.basename(plugin) == "libqxcb.so"
    needed = platform_libs.needed_libraries(plugin)
    assert "libxcb-icccm.so.4" in needed and "libxcb-keysyms.so.1" in needed  # through libQt6XcbQpa.so.6
    assert "libxcb-cursor.so.0" in needed and "libxkbcommon-x11.so.0" in needed
    assert not any(name.startswith("libQt6") for name in needed)  # Qt's own libraries are beside it


def test_missing_libraries_are_named_with_the_install_commands():
    line = startup_problem({"DISPLAY": ":0"}, "linux", finder=finder_without(DEBIAN_12_WITHOUT))
    assert line is not None and "\n" not in line
    for soname in sorted(DEBIAN_12_WITHOUT):
        assert soname in line
    assert "sudo apt install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in line
    assert "sudo dnf install xcb-util-cursor xcb-util-keysyms xcb-util-wm" in line
    assert "Reinstalling" not in line


def test_nothing_is_said_when_every_library_loads_or_the_platform_is_not_xcb():
    everything = finder_without(set())
    assert startup_problem({"DISPLAY": ":0"}, "linux", finder=everything) is None
    missing = finder_without(DEBIAN_12_WITHOUT)
    # Another platform chosen, or a Wayland session (Qt tries its wayland plugin first): xcb is not loaded.
    for env in ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, {"WAYLAND_DISPLAY": "wayland-0"},
                {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}):
        assert startup_problem(env, "linux", finder=missing) is None, env
    assert startup_problem({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, "linux", finder=missing) is not None
    assert startup_problem({"DISPLAY": ":0"}, "darwin", finder=missing) is None
    # No display at all: that line still comes first (there is nothing to connect the plugin to).
    assert "no display found" in startup_problem({}, "linux", finder=missing)


def test_the_window_command_says_it_in_one_line_before_qt_starts(monkeypatch, capsys, state_dict_file):
    monkeypatch.setenv("DISPLAY", ":0")
    for name in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(platform_libs, "loads", finder_without({"libxcb-icccm.so.4"}))
    monkeypatch.setattr("ckptview.gui.app.launch.application",
                        lambda: pytest.fail("the QApplication was created"))
    assert main([state_dict_file]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "libxcb-icccm.so.4" in err[0] and "libxcb-icccm4" in err[0], err


def test_a_library_that_loads_is_found_by_the_real_loader():
    assert platform_libs.loads("libc.so.6")
    assert not platform_libs.loads("libckptview-no-such-library.so.0")

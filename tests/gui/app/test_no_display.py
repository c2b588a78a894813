"""`ckptview FILE` on a machine with no display says so in one line (issue 25, finding 7): Qt aborted with a
message about a missing xcb-cursor library."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def env_without_display() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["CKPTVIEW_SERVER_NAME"] = f"ckptview-nodisplay-{os.getpid()}"
    return env


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11/Wayland sessions are a Linux matter")
def test_the_window_without_a_display_says_no_display_was_found(state_dict_file):
    done = subprocess.run([sys.executable, "-m", "ckptview", state_dict_file], env=env_without_display(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no display found" in lines[0], done.stderr
    assert "xcb" not in done.stderr and "Traceback" not in done.stderr


def test_help_needs_no_display():
    done = subprocess.run([sys.executable, "-m", "ckptview", "--help"], env=env_without_display(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "usage" in done.stdout.lower()


def test_a_chosen_platform_or_a_display_is_enough():
    from ckptview.gui.app.launch import no_display_reason

    assert no_display_reason({}, "linux") is not None
    assert no_display_reason({"QT_QPA_PLATFORM": "offscreen"}, "linux") is None
    assert no_display_reason({"DISPLAY": ":0"}, "linux") is None
    assert no_display_reason({"WAYLAND_DISPLAY": "wayland-0"}, "linux") is None
    assert no_display_reason({}, "darwin") is None and no_display_reason({}, "win32") is None


def test_the_no_display_message_names_every_command():
    """Its list of what runs on a terminal left out `graph` and `devices`."""
    from ckptview.cli import SUBCOMMANDS
    from ckptview.gui.app.launch import no_display_reason

    said = no_display_reason({}, "linux")
    assert said is not None
    assert [c for c in SUBCOMMANDS if c not in said] == []

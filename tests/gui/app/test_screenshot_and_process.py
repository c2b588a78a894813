"""The window as a person sees it (an offscreen PNG), and as a separate process (no torch import)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from PySide6.QtGui import QImage

from ckptview.gui.app.main_window import example_path
from tests.support.guihelpers import make_state_dict, wait_settled


def test_render_main_window_to_png(qtbot, window, tmp_path):
    """Saves the window with the bundled example; CKPTVIEW_SCREENSHOT=path keeps a copy to look at."""
    window.resize(1280, 820)
    (tab,) = window.open_paths([example_path()])
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    assert tab.select_name("model_state_dict.hidden.weight")
    qtbot.wait(50)
    out = os.environ.get("CKPTVIEW_SCREENSHOT") or str(tmp_path / "window.png")
    assert window.grab().save(out)
    image = QImage(out)
    assert image.width() >= 800 and image.height() >= 600
    header = tab.tree.header()
    for column in range(tab.model.columnCount()):  # no clipped header captions
        if tab.tree.isColumnHidden(column):  # the Shard column, for sharded checkpoints only
            continue
        text_width = header.fontMetrics().horizontalAdvance(tab.model.headerData(column, header.orientation()))
        assert header.sectionSize(column) >= text_width + 8, column


def test_window_process_never_imports_torch(tmp_path):
    path = make_state_dict(str(tmp_path / "model.pth"))
    script = textwrap.dedent(f"""
        import os, sys, time
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        os.environ["CKPTVIEW_SERVER_NAME"] = "ckptview-notorch-{os.getpid()}"
        from ckptview.cli import window_args
        from ckptview.gui.app.launch import application, launch
        from ckptview.gui.base.settings import Settings
        app = application()
        window = launch(window_args([{path!r}, "--new-instance"]), Settings({str(tmp_path / "s.ini")!r}))
        tab = window.current_tab()
        while tab.state == "loading":  # the test's own timeout stops a hang
            app.processEvents()
            time.sleep(0.01)
        tab.select_name("decoder.embed.weight")
        app.processEvents()
        print(tab.state, "torch" in sys.modules)
        window.close()
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=270)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["ready", "False"], result.stdout + result.stderr


def test_a_window_left_open_at_exit_does_not_crash(tmp_path):
    """A script that leaves the window in a global, its plots drawn, exits 0: `launch.delete_windows` runs at
    exit, while Python is whole (left to the interpreter's teardown, pyqtgraph's items crashed about 1 exit in 5)."""
    path = make_state_dict(str(tmp_path / "model.pth"))
    script = textwrap.dedent(f"""
        import os, sys, time
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        os.environ["CKPTVIEW_SERVER_NAME"] = "ckptview-exit-" + str(os.getpid())
        from ckptview.cli import window_args
        from ckptview.gui.app.launch import application, launch
        from ckptview.gui.base.settings import Settings
        app = application()
        window = launch(window_args([{path!r}, "--new-instance"]), Settings({str(tmp_path / "s.ini")!r}))
        tab = window.current_tab()
        while tab.state == "loading":
            app.processEvents()
            time.sleep(0.01)
        tab.select_name("decoder.embed.weight")
        app.processEvents()
        print("done", flush=True)
        window.close()
    """)
    for _ in range(6):
        result = subprocess.run([sys.executable, "-X", "faulthandler", "-c", script], capture_output=True,
                                text=True, timeout=270)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.split() == ["done"], result.stdout

"""`python benchmarks/launch_timing.py PATH`: seconds from launch to a populated tree, for benchmarks.

Prints one JSON object:

- "seconds": the process's start (as the kernel recorded it, so the interpreter's own start counts) to the
  tree shown with rows and painted, the event loop free for the next click;
- "startup_seconds": process start to the opening worker queued (interpreter, imports, the window);
- "read_seconds": `open_checkpoint` in the worker (the core's listing of the file);
- "prepare_seconds": from the file read to the worker handing its rows over (grouping, totals, counts);
- "build_seconds": from there to the tree painted (the hand-over, building the page, the first paint);
- "gui_seconds": "seconds" less "read_seconds" (what the window adds to the core's open);
- "open_seconds": window shown to tree shown (the read, the preparation and the build);
- "tensors", "rows_shown", "torch_imported", "numpy_imported", "pyqtgraph_imported", "superqt_widgets_imported"
  (superqt's widgets and qtpy's QtWidgets: the window's workers need superqt's thread module only).

Runs offscreen unless QT_QPA_PLATFORM says otherwise.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # before Qt is imported: the launch cost counts

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402


def process_start() -> float:
    """The perf_counter() reading at which this process started (Linux: from /proc; elsewhere: this module's
    import, which misses the interpreter's own start-up)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time, clock ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - started
        return min(_T0, time.perf_counter() - age)
    except (OSError, ValueError, IndexError, AttributeError):
        return _T0


def _time_the_read(marks: dict[str, float]) -> None:
    """Record when the worker's `open_checkpoint` starts and returns (as the opening worker calls it:
    `ckptview.core.session.opening.open_checkpoint`, looked up there at call time)."""
    from ckptview.core.session import opening as core

    real = core.open_checkpoint

    def timed(*args: Any, **kwargs: Any) -> Any:
        marks.setdefault("read_start", time.perf_counter())
        try:
            return real(*args, **kwargs)
        finally:
            marks.setdefault("read_end", time.perf_counter())

    core.open_checkpoint = timed


def time_to_tree(path: str, timeout_s: float = 600.0) -> dict[str, Any]:
    """Open `path` in a fresh window and wait until its tree shows rows."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("CKPTVIEW_SERVER_NAME", f"ckptview-timing-{os.getpid()}")
    start = process_start()
    marks: dict[str, float] = {}
    _time_the_read(marks)
    from PySide6.QtCore import QEventLoop, Qt, QTimer

    from ckptview.cli import window_args
    from ckptview.gui.app.launch import application, launch
    from ckptview.gui.base.settings import Settings

    app = application()
    with tempfile.TemporaryDirectory() as tmp:
        window = launch(window_args([path, "--new-instance"]), Settings(os.path.join(tmp, "s.ini")))
        assert window is not None
        tab = window.current_tab()
        assert tab is not None  # launched with a path: its tab is open
        opened_at = time.perf_counter()
        worker = tab.opener.worker  # measuring: when the worker hands its result over
        if worker is not None:  # a direct connection: runs in the worker as it emits, before the GUI sees it
            worker.signals.returned.connect(lambda *_: marks.setdefault("handed", time.perf_counter()),
                                            Qt.ConnectionType.DirectConnection)
        if tab.state == "loading":
            # Wait inside Qt's event loop, as the application does: a Python polling loop here would
            # take the GIL from the opening worker every few milliseconds and slow it down.
            loop = QEventLoop()
            tab.loaded.connect(loop.quit)
            tab.failed.connect(loop.quit)
            QTimer.singleShot(int(timeout_s * 1000), loop.quit)
            loop.exec()
        app.processEvents()  # one more round: the view lays out and paints its first rows
        shown = time.perf_counter()
        read = marks.get("read_end", shown) - marks.get("read_start", shown)
        # The worker may begin reading before launch() returns: the start-up ends where the read began then.
        opened_at = min(opened_at, marks.get("read_start", opened_at))
        result = {"path": path, "state": tab.state, "error": tab.error_text,
                  "seconds": round(shown - start, 3),
                  "startup_seconds": round(opened_at - start, 3),
                  "read_seconds": round(read, 3),
                  "prepare_seconds": round(marks.get("handed", shown) - marks.get("read_end", shown), 3),
                  "build_seconds": round(shown - marks.get("handed", shown), 3),
                  "gui_seconds": round(shown - start - read, 3),
                  "open_seconds": round(shown - opened_at, 3),
                  "tensors": tab.top.tensors if tab.top is not None else 0,
                  "rows_shown": tab.model.rowCount() if tab.model is not None else 0,
                  "torch_imported": "torch" in sys.modules,
                  "numpy_imported": "numpy" in sys.modules,
                  "pyqtgraph_imported": "pyqtgraph" in sys.modules,
                  "superqt_widgets_imported": "superqt" in sys.modules or "qtpy.QtWidgets" in sys.modules}
        window.close()
    return result


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/launch_timing.py PATH")
    print(json.dumps(time_to_tree(sys.argv[1])))

"""`python -m ckptview.gui.timing PATH`: seconds from launch to a populated tree, for benchmarks.

Prints one JSON object: {"seconds": launch -> tree shown with rows, "open_seconds": worker time,
"tensors": count, "torch_imported": bool}. Runs offscreen unless QT_QPA_PLATFORM says otherwise.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()  # before Qt is imported: the launch cost counts

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402


def time_to_tree(path: str, timeout_s: float = 600.0) -> dict[str, Any]:
    """Open `path` in a fresh window and wait until its tree shows rows."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("CKPTVIEW_SERVER_NAME", f"ckptview-timing-{os.getpid()}")
    from PySide6.QtCore import QEventLoop, QTimer

    from ckptview.gui.app import application, launch, parse_args
    from ckptview.gui.settings import Settings

    app = application()
    with tempfile.TemporaryDirectory() as tmp:
        window = launch(parse_args([path, "--new-instance"]), Settings(os.path.join(tmp, "s.ini")))
        assert window is not None
        tab = window.current_tab()
        assert tab is not None  # launched with a path: its tab is open
        opened_at = time.perf_counter()
        if tab.state == "loading":
            # Wait inside Qt's event loop, as the application does: a Python polling loop here would
            # take the GIL from the opening worker every few milliseconds and slow it down.
            loop = QEventLoop()
            tab.loaded.connect(loop.quit)
            tab.failed.connect(loop.quit)
            QTimer.singleShot(int(timeout_s * 1000), loop.quit)
            loop.exec()
        app.processEvents()  # one more round: the view lays out and paints its first rows
        result = {"path": path, "state": tab.state, "error": tab.error_text,
                  "seconds": round(time.perf_counter() - _T0, 3),
                  "open_seconds": round(time.perf_counter() - opened_at, 3),
                  "tensors": tab.top.tensors if tab.top is not None else 0,
                  "rows_shown": tab.model.rowCount() if tab.model is not None else 0,
                  "torch_imported": "torch" in sys.modules}
        window.close()
    return result


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m ckptview.gui.timing PATH")
    print(json.dumps(time_to_tree(sys.argv[1])))

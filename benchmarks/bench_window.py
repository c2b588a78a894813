"""How long the window's GUI thread stops answering while it opens many files or a huge header.

    .venv/bin/python benchmarks/bench_window.py                      # 150 files, a 900,000-tensor header
    .venv/bin/python benchmarks/bench_window.py --files 50 --tensors 200000

A QTimer ticks every TICK_MS on the GUI thread and records the gaps between its ticks: the longest gap is
how long the window was frozen (a click or a repaint waits that long). Goal: every scenario's longest gap
stays a fraction of a second while the files open in workers. Offscreen; prints one line per scenario.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

TICK_MS = 5


class Probe:
    """Longest gap between ticks of a GUI-thread timer, and how many ticks ran."""

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.timer = QTimer(interval=TICK_MS)
        self.timer.timeout.connect(self._tick)
        self.last = 0.0
        self.longest = 0.0
        self.ticks = 0

    def _tick(self) -> None:
        now = time.perf_counter()
        if self.last:
            self.longest = max(self.longest, now - self.last)
        self.last = now
        self.ticks += 1

    def start(self) -> None:
        self.last, self.longest, self.ticks = 0.0, 0.0, 0
        self.timer.start()

    def stop(self) -> None:
        self._tick()  # the time since the last tick counts too (a freeze until the very end)
        self.timer.stop()


def make_files(folder: str, count: int) -> list[str]:
    """`count` small torch checkpoints."""
    import torch

    paths = []
    for i in range(count):
        path = os.path.join(folder, f"ckpt_{i:03d}.pt")
        torch.save({f"layer{j}.weight": torch.zeros(4, 4) for j in range(20)} | {"step": i}, path)
        paths.append(path)
    return paths


def make_wide_safetensors(path: str, tensors: int) -> str:
    """A safetensors file of `tensors` one-element F32 tensors: its header is about 110 bytes per tensor."""
    header = {f"model.layers.{i // 10}.part{i % 10}.weight": {"dtype": "F32", "shape": [1],
                                                               "data_offsets": [4 * i, 4 * i + 4]}
              for i in range(tensors)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little"))
        fh.write(raw)
        fh.write(b"\0" * (4 * tensors))
    return path


def run(window, qtbot_wait, probe: Probe, paths: list[str], accept_large: bool = False) -> dict:
    """Open `paths` in `window` and wait until every tab settled; the probe's figures and the wall time."""
    start = time.perf_counter()
    probe.start()
    tabs = window.open_paths(paths)
    qtbot_wait(lambda: all(t.state != "loading" for t in tabs))
    asked = [t for t in tabs if t.state == "asking"]
    if accept_large:
        for tab in asked:
            tab.open_anyway()
        qtbot_wait(lambda: all(t.state not in ("loading", "asking") for t in tabs))
    probe.stop()
    states = sorted({t.state for t in tabs})
    return {"seconds": time.perf_counter() - start, "longest_gap_s": probe.longest, "ticks": probe.ticks,
            "states": states, "asked": len(asked)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=150)
    parser.add_argument("--tensors", type=int, default=900_000)
    parser.add_argument("--skip-open-anyway", action="store_true",
                        help="only measure the question, not reading the huge header")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QEventLoop, QTimer

    from ckptview.gui.app.launch import application
    from ckptview.gui.app.main_window import MainWindow
    from ckptview.gui.base.settings import Settings
    from ckptview.gui.base.workers import wait_for_workers

    app = application()

    def wait(condition) -> None:
        """Run the real event loop (as the app does) until `condition()` holds."""
        loop, check = QEventLoop(), QTimer(interval=20)
        deadline = time.monotonic() + 1800

        def poll() -> None:
            if condition() or time.monotonic() > deadline:
                loop.quit()

        check.timeout.connect(poll)
        check.start()
        loop.exec()
        check.stop()
        if not condition():
            raise TimeoutError("the window did not settle in 30 minutes")

    with tempfile.TemporaryDirectory(prefix="bench_window") as folder:
        window = MainWindow(Settings(os.path.join(folder, "settings.ini")))
        window.show()
        probe = Probe()
        wait(lambda: True)
        print(f"making {args.files} files and a {args.tensors:,}-tensor safetensors header ...", flush=True)
        paths = make_files(folder, args.files)
        wide = make_wide_safetensors(os.path.join(folder, "wide.safetensors"), args.tensors)
        header_mb = (os.path.getsize(wide) - 4 * args.tensors) / 1e6
        figures = run(window, wait, probe, paths)
        print(f"{args.files} files at once: settled in {figures['seconds']:.2f} s, GUI thread's longest gap "
              f"{figures['longest_gap_s'] * 1000:.0f} ms ({figures['ticks']} ticks), states {figures['states']}")
        probe.start()
        start = time.perf_counter()
        for i in range(window.tabs.count() - 1, -1, -1):
            window.close_tab(i)
        wait(lambda: time.perf_counter() - start > 3)
        probe.stop()
        print(f"closing them: longest gap {probe.longest * 1000:.0f} ms")
        figures = run(window, wait, probe, [wide])
        print(f"{header_mb:.0f} MB header: asked={figures['asked']} in {figures['seconds']:.2f} s, longest gap "
              f"{figures['longest_gap_s'] * 1000:.0f} ms")
        window.close_tab(0)
        if args.skip_open_anyway:
            window.close()
            wait_for_workers(60_000)
            return 0
        figures = run(window, wait, probe, [wide], accept_large=True)
        print(f"{header_mb:.0f} MB header, opened anyway: settled in {figures['seconds']:.2f} s, GUI thread's "
              f"longest gap {figures['longest_gap_s'] * 1000:.0f} ms, states {figures['states']}")
        tab = window.current_tab()
        if tab is not None and tab.state == "ready":
            probe.start()
            start = time.perf_counter()
            tab.filter_edit.setText("part3")  # as typed: a big tree is matched in a worker
            wait(lambda: tab.match_label.text().endswith("match") and tab.model.filtered)
            probe.stop()
            print(f"   typing the filter 'part3': {tab.model.match_count:,} matches in "
                  f"{time.perf_counter() - start:.2f} s, longest gap {probe.longest * 1000:.0f} ms")
        window.close()
        wait_for_workers(60_000)
        app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

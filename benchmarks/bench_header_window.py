"""How long the window's GUI thread stops while it opens a huge safetensors header (issue 18's last row).

    .venv/bin/python benchmarks/bench_header_window.py [PATH] [--repeat 3]

PATH defaults to bench_scale's 900,000-tensor file (built once into benchmarks/_data). Each run starts a
fresh offscreen window, lets it settle, opens PATH (it asks first: a huge header), clicks "Open anyway",
and counts the gaps between the ticks of a 10 ms QTimer until the tree is shown: a GUI thread that stops
shows as one long gap. Prints, per run and as medians: the longest gap, the gaps over 100 ms, the seconds
to the tree and the load average. Nothing is asserted: benchmarks are not tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_ONE_RUN = r"""
import json, os, sys, tempfile, time
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["CKPTVIEW_SERVER_NAME"] = f"bench-header-{os.getpid()}"
from PySide6.QtCore import QEventLoop, QTimer
from ckptview.gui.app.launch import application
from ckptview.gui.app.main_window import MainWindow
from ckptview.gui.base.settings import Settings

app = application()
ticks = []
with tempfile.TemporaryDirectory() as tmp:
    settings = Settings(os.path.join(tmp, "s.ini"))
    settings.set_header_ask_bytes(1 << 20)
    window = MainWindow(settings)
    window.show()
    (tab,) = window.open_paths([sys.argv[1]])
    deadline = time.perf_counter() + 60
    while tab.state == "loading" and time.perf_counter() < deadline:
        app.processEvents()
    settle = time.perf_counter() + 1
    while time.perf_counter() < settle:
        app.processEvents()
    assert tab.state == "asking", tab.state
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    loop = QEventLoop()
    tab.loaded.connect(loop.quit)
    tab.failed.connect(loop.quit)
    timer.start()
    t0 = time.perf_counter()
    ticks.append(t0)
    tab.open_anyway_button.click()
    QTimer.singleShot(600_000, loop.quit)
    loop.exec()
    app.processEvents()
    end = time.perf_counter()
    ticks.append(end)
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    print(json.dumps({"state": tab.state, "seconds": end - t0, "longest_gap_ms": 1000 * gaps[worst],
                      "longest_gap_at_s": ticks[worst] - t0,
                      "gaps_over_100ms": sum(g > 0.1 for g in gaps), "ticks": len(ticks),
                      "tensors": tab.top.tensors if tab.top is not None else 0}))
    window.close()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", help="a safetensors file (default: bench_scale's 900k header)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    path = args.path
    if path is None:
        sys.path.insert(0, HERE)
        from bench_scale import DATA, big_header

        os.makedirs(DATA, exist_ok=True)
        path = big_header(900_000)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    runs = []
    for _ in range(args.repeat):
        out = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _ONE_RUN, path], capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            print(f"failed (exit status {out.returncode}):", out.stderr[-3000:])
            continue
        run = json.loads(out.stdout.strip().splitlines()[-1])
        runs.append(run)
        print(f"  {run['state']}: {run['tensors']:,} tensors in {run['seconds']:.2f} s, longest GUI-thread gap "
              f"{run['longest_gap_ms']:.0f} ms (at {run['longest_gap_at_s']:.2f} s), {run['gaps_over_100ms']} gaps over 100 ms", flush=True)
    if runs:
        print(f"window opens a {os.path.getsize(path) // 2**20} MB header: median longest gap "
              f"{statistics.median(r['longest_gap_ms'] for r in runs):.0f} ms, median "
              f"{statistics.median(r['seconds'] for r in runs):.2f} s to the tree   target: never frozen")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

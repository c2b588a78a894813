"""Every panel that computes shows progress and Cancel, and Cancel reaches the loop (issue 43, finding 12 and
"Cancel reaches every loop").

Before: the Spectrum panel on a 16,384 x 16,384 matrix said "computing spectra... 50%" at 30 s and at 90 s,
both plots said "Select a weight or a module." while one was selected, and there was no Cancel; the statistics
of a module and the heat-map had no Cancel either. Each job here is held at a known point (a chunk read, a
LAPACK call) by an event, Cancel is pressed there, and the test asserts what ran after it: no wall clock.
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import pytest
import torch

pytest.importorskip("pytestqt")

from ckptview.core import open_checkpoint  # noqa: E402
from ckptview.core.figures import analysis as analysis_mod  # noqa: E402
from ckptview.core.figures import heatmap as heatmap_mod  # noqa: E402
from ckptview.core.figures import stats as stats_mod  # noqa: E402
from ckptview.core.figures.analysis import Analysis  # noqa: E402
from ckptview.core.inspect.grouping import ModuleGroup  # noqa: E402
from ckptview.gui.base.plots import nothing_text  # noqa: E402

WAIT_MS = 600_000  # a guard against a hang (faulthandler's job), never a measure of speed


@pytest.fixture
def ckpt(tmp_path):
    g = torch.Generator().manual_seed(0)
    sd = {f"enc.{i}.weight": torch.randn(300, 200, generator=g) for i in range(4)}
    path = tmp_path / "m.pt"
    torch.save(sd, path)
    ck = open_checkpoint(str(path))
    yield ck
    ck.close()


def tensors(ck) -> list:
    return [n for n in ck.root.walk() if n.kind == "tensor"]


class Gate:
    """Holds a worker at its `at`-th call until the test lets it go; counts the calls after Cancel."""

    def __init__(self, at: int) -> None:
        self.at, self.calls, self.at_cancel = at, 0, -1
        self.reached, self.go = threading.Event(), threading.Event()

    def passing(self) -> None:
        self.calls += 1
        if self.calls == self.at:
            self.reached.set()
            self.go.wait()

    def after_cancel(self) -> int:
        return self.calls - self.at_cancel


def press_cancel(qtbot, panel, gate: Gate) -> None:
    """Wait until the job is held, press the panel's Cancel, let the job go, wait for its `aborted`."""
    qtbot.waitUntil(gate.reached.is_set, timeout=WAIT_MS)
    qtbot.waitUntil(panel.job_bar.isVisible, timeout=WAIT_MS)  # shown once the job has run a moment
    assert panel.job_bar.cancel_button.isVisible()
    with qtbot.waitSignal(panel.slot.aborted, timeout=WAIT_MS):
        gate.at_cancel = gate.calls
        panel.job_bar.cancel_button.click()
        gate.go.set()
    qtbot.waitUntil(lambda: not panel.job_bar.cancel_button.isVisible(), timeout=WAIT_MS)
    assert panel.job_bar.retry_button.isVisible()  # Compute, to start it again


def test_the_spectrum_panel_says_computing_shows_progress_and_cancels_a_held_lapack_call(qtbot, ckpt, monkeypatch):
    """The factorisation held (as a 16k x 16k one holds it for minutes): Cancel ends the job while it still
    runs; the plots said "computing…" meanwhile, "Cancelled" after; Compute computes it."""
    from ckptview.gui.panels.spectrum import SpectrumPanel

    entered, release = threading.Event(), threading.Event()
    real = np.linalg.eigvalsh

    def held(a):
        entered.set()
        release.wait()
        return real(a)

    monkeypatch.setattr(np.linalg, "eigvalsh", held)
    panel = SpectrumPanel()
    qtbot.addWidget(panel)
    panel.show()
    node = tensors(ckpt)[0]
    try:
        panel.set_weights([(node.name, node.tensor)])
        qtbot.waitUntil(entered.is_set, timeout=WAIT_MS)
        assert nothing_text(panel.esd_plot) == nothing_text(panel.sv_plot) == "computing…"
        qtbot.waitUntil(panel.job_bar.isVisible, timeout=WAIT_MS)
        qtbot.waitUntil(lambda: "computing spectra" in panel.status.text(), timeout=WAIT_MS)
        with qtbot.waitSignal(panel.slot.aborted, timeout=WAIT_MS):
            panel.job_bar.cancel_button.click()
        assert not release.is_set()  # the call still runs: the job did not wait for it
        assert panel.status.text().startswith("Cancelled")
        assert nothing_text(panel.esd_plot).startswith("Cancelled")
    finally:
        release.set()
    qtbot.waitUntil(lambda: not panel.slot.running and panel.job_bar.retry_button.isVisible(), timeout=WAIT_MS)
    with qtbot.waitSignal(panel.ready, timeout=WAIT_MS):
        panel.job_bar.retry_button.click()
    assert nothing_text(panel.esd_plot) == ""
    qtbot.waitUntil(lambda: not panel.job_bar.isVisible(), timeout=WAIT_MS)


def test_a_module_s_statistics_stop_at_the_next_chunk(qtbot, ckpt, monkeypatch):
    from ckptview.gui.panels.statistics import StatsPanel

    gate = Gate(at=5)
    real = stats_mod.iter_chunks

    def gated(info, chunk_elems, ahead=None):
        for chunk in real(info, chunk_elems, ahead):
            gate.passing()
            yield chunk

    monkeypatch.setattr(stats_mod, "iter_chunks", gated)
    panel = StatsPanel()
    panel.analysis = Analysis(chunk_elems=2_000)  # 30 chunks a tensor, 120 for the module
    qtbot.addWidget(panel)
    panel.show()
    nodes = tensors(ckpt)
    panel.set_selection([ModuleGroup("enc", nodes)])
    press_cancel(qtbot, panel, gate)
    assert gate.after_cancel() <= 1, gate.after_cancel()  # the chunk in flight, none after
    assert panel.status.text().startswith("Cancelled")
    with qtbot.waitSignal(panel.statsReady, timeout=WAIT_MS):
        panel.job_bar.retry_button.click()  # Compute: the module's figures, this time to the end
    assert panel.figures(0)["numel"] == f"{4 * 300 * 200:,}"


def test_the_heat_map_stops_at_the_next_block_of_rows(qtbot, ckpt, monkeypatch):
    from ckptview.gui.panels.heatmap import HeatmapPanel

    gate = Gate(at=3)
    real = heatmap_mod.read_region

    def gated(info, index, ahead=None):
        gate.passing()
        return real(info, index, ahead)

    monkeypatch.setattr(heatmap_mod, "read_region", gated)
    monkeypatch.setattr(analysis_mod, "iter_tensor_heatmap",
                        functools.partial(heatmap_mod.iter_tensor_heatmap, chunk_elems=2_000))
    panel = HeatmapPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.set_tensor(tensors(ckpt)[0].tensor)
    press_cancel(qtbot, panel, gate)
    assert gate.after_cancel() <= 1, gate.after_cancel()
    assert panel.status.text().startswith("Cancelled")
    with qtbot.waitSignal(panel.ready, timeout=WAIT_MS):
        panel.job_bar.retry_button.click()
    assert panel.heatmap is not None

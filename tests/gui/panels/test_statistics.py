"""Statistics panel, histogram, heat-map and values table driven with qtbot on a checkpoint saved by torch."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch

pytest.importorskip("pytestqt")

from ckptview.core import open_checkpoint  # noqa: E402
from ckptview.gui.panels.statistics import StatsPanel, format_figure  # noqa: E402


@pytest.fixture
def ckpt(tmp_path):
    g = torch.Generator().manual_seed(0)
    enc_w = torch.randn(30, 20, generator=g)
    enc_w[0, 0] = math.nan
    enc_w[1, 1] = math.inf
    sd = {
        "enc": {"w": enc_w, "b": torch.zeros(20)},
        "big": torch.randn(400, 500, generator=g),
        "conv": torch.randn(8, 3, 5, 5, generator=g).to(torch.bfloat16),
    }
    path = tmp_path / "m.pt"
    torch.save(sd, path)
    ck = open_checkpoint(str(path))
    yield ck, torch.load(path, weights_only=True)
    ck.close()


def node(ck, name):
    for n in ck.root.walk():
        if n.name == name:
            return n
    raise KeyError(name)


def finite_hist(t: torch.Tensor, bins: int) -> np.ndarray:
    x = t.double().reshape(-1).numpy()
    x = x[np.isfinite(x)]
    return np.histogram(x, bins, (x.min(), x.max()))[0]


def test_select_a_tensor_shows_stats_and_exact_histogram(qtbot, ckpt) -> None:
    ck, ref = ckpt
    panel = StatsPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignals([panel.statsReady, panel.histogram.exactReady], timeout=10_000):
        panel.set_selection([node(ck, "enc.w")])
    t = ref["enc"]["w"]
    fin = t[torch.isfinite(t)].double()
    shown = panel.figures()
    assert shown["numel"] == "600" and shown["nan"].startswith("1 ") and shown["posinf"].startswith("1 ")
    assert shown["mean"] == format_figure("mean", float(fin.mean()), 600)
    assert shown["std"] == format_figure("std", float(fin.std()), 600)
    assert shown["max"] == format_figure("max", float(fin.max()), 600)
    (counts,) = panel.histogram.plotted_counts()
    np.testing.assert_array_equal(counts, finite_hist(t, panel.histogram.bins.value()))
    assert "NaN 1, +Inf 1" in panel.histogram.status.text()
    assert "count" in panel.histogram.hover_text(float(fin.mean()))


def test_module_row_shows_aggregate_figures(qtbot, ckpt) -> None:
    ck, ref = ckpt
    panel = StatsPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.statsReady, timeout=10_000):
        panel.set_selection([node(ck, "enc")])
    assert panel.figures()["numel"] == "620"
    assert panel.figures()["zeros"].startswith("20 ")


def test_switching_mid_computation_never_shows_the_stale_result(qtbot, ckpt, monkeypatch) -> None:
    ck, ref = ckpt
    import ckptview.core.read.values.reading as values

    real = values.iter_chunks
    big_info = ck.tensor("big")

    def slow_chunks(info, chunk_elems=1 << 22, ahead=None):
        for chunk in real(info, 10_000, ahead):
            if info is big_info:
                time.sleep(0.02)  # the big tensor takes ~0.4 s: long enough to switch away
            yield chunk

    from ckptview.core.figures import stats

    monkeypatch.setattr(stats, "iter_chunks", slow_chunks)  # as the panel's statistics read values
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.set_selection([node(ck, "big")])
    qtbot.wait(50)
    with qtbot.waitSignals([panel.statsReady, panel.histogram.exactReady], timeout=10_000):
        panel.set_selection([node(ck, "enc.b")])
    # Let the stale job end and deliver whatever it queued: it must not replace the figures shown.
    from PySide6.QtCore import QCoreApplication

    from ckptview.gui.base.workers import wait_for_workers

    assert wait_for_workers(60_000)
    QCoreApplication.sendPostedEvents()
    QCoreApplication.processEvents()
    assert panel.figures()["numel"] == "20" and panel.figures()["zeros"].startswith("20 ")
    (counts,) = panel.histogram.plotted_counts()
    assert counts.sum() == 20


def test_overlay_of_two_tensors_with_a_legend(qtbot, ckpt) -> None:
    ck, ref = ckpt
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.histogram.bins.setValue(16)
    with qtbot.waitSignals([panel.statsReady, panel.histogram.exactReady], timeout=10_000):
        panel.set_selection([node(ck, "big"), node(ck, "conv")])
    a, b = panel.histogram.plotted_counts()
    np.testing.assert_array_equal(a, finite_hist(ref["big"], 16))
    np.testing.assert_array_equal(b, finite_hist(ref["conv"], 16))
    legend = panel.histogram.status.text()  # beside the plot, never over the data
    assert legend.count("&#9632;") == 2 and "big: exact" in legend and "conv: exact" in legend
    assert panel.histogram.plot.plotItem.legend is None
    assert panel.table.columnCount() == 2 and panel.figures(1)["numel"] == "600"


def test_log_x_and_export_png(qtbot, ckpt, tmp_path) -> None:
    ck, ref = ckpt
    panel = StatsPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.histogram.exactReady, timeout=10_000):
        panel.set_selection([node(ck, "big")])
    with qtbot.waitSignal(panel.histogram.exactReady, timeout=10_000):
        panel.histogram.log_x.setChecked(True)
    (counts,) = panel.histogram.plotted_counts()
    mags = np.log10(np.abs(ref["big"].double().numpy().reshape(-1)))
    np.testing.assert_array_equal(counts, np.histogram(mags, 100, (mags.min(), mags.max()))[0])
    panel.histogram.log_y.setChecked(True)
    out = tmp_path / "h.png"
    panel.histogram.export_png(str(out))
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_heatmap_view_draws_the_matrix_with_a_symmetric_range(qtbot, ckpt) -> None:
    from ckptview.gui.panels.heatmap import HeatmapPanel

    ck, ref = ckpt
    view = HeatmapPanel()
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.ready, timeout=10_000):
        view.set_selection([node(ck, "conv")])
    conv = ref["conv"].double()
    np.testing.assert_array_equal(view.heatmap.image, conv.reshape(8, 75).numpy())
    m = float(np.percentile(conv.abs().numpy(), 99.5))  # the colour range: a percentile, symmetric
    assert view.bar.levels() == pytest.approx((-m, m))
    assert f"max |x| {float(conv.abs().max()):.6g}" in view.status.text()  # the max is still shown
    view.percentile.setValue(100.0)
    assert view.bar.levels() == pytest.approx((-float(conv.abs().max()), float(conv.abs().max())))
    assert view.value_at(2, 7) == f"row 2, col 7: {float(conv.reshape(8, 75)[2, 7]):.6g}"  # hover readout
    assert view.value_at(8, 0) == ""
    with qtbot.waitSignal(view.ready, timeout=10_000):
        view.axis.setValue(1)
    assert view.heatmap.image.shape == (3, 200)
    with qtbot.waitSignal(view.ready, timeout=10_000):
        view.set_selection([node(ck, "enc.w")])  # NaN and +Inf: finite colour range, Inf saturated
    assert view.image.image is not None and np.isfinite(view.image.image).all()


def test_values_table_reads_only_the_tiles_it_shows(qtbot, tmp_path) -> None:
    from ckptview.gui.panels import values as values_table
    from ckptview.gui.panels.values import ValuesPanel

    t = torch.randn(20_000, 600)
    path = tmp_path / "big.pt"
    torch.save({"m": t, "k": torch.arange(2 * 3 * 4).reshape(2, 3, 4)}, path)
    ck = open_checkpoint(str(path))
    try:
        view = ValuesPanel()
        view.resize(600, 400)
        qtbot.addWidget(view)
        view.show()
        with qtbot.waitSignal(view.sliceReady, timeout=10_000):
            view.set_selection([node(ck, "m")])
        model = view.model
        assert (model.rowCount(), model.columnCount()) == (20_000, 600)
        view.table.scrollTo(model.index(19_990, 590))
        qtbot.waitUntil(lambda: model.cell_text(19_999, 599) is not None, timeout=10_000)
        assert model.cell_text(19_999, 599) == f"{float(t[19_999, 599]):.6g}"
        assert len(model._tiles) <= 8  # a few tiles, not 12 million cells
        # A slice spec over a 3-D tensor, then a wrong one with its message.
        with qtbot.waitSignal(view.sliceReady, timeout=10_000):
            view.set_selection([node(ck, "k")])
        assert view.spec.text() == "[0, :, :]"
        view.spec.setText("[1, :, ::2]")
        with qtbot.waitSignal(view.sliceReady, timeout=10_000):
            view.spec.returnPressed.emit()
        qtbot.waitUntil(lambda: model.cell_text(2, 1) is not None, timeout=10_000)
        assert (model.rowCount(), model.columnCount()) == (3, 2) and model.cell_text(2, 1) == "22"
        view.table.selectAll()
        assert view.selection_text() == "12\t14\n16\t18\n20\t22"
        view.spec.setText("[5]")
        with qtbot.waitSignal(view.sliceReady, timeout=10_000):
            view.spec.returnPressed.emit()
        assert "index 5 out of range for dimension 0 of size 2" in view.status.text()
        assert model.rowCount() == 0
        assert values_table.format_cells(np.array([[1.5, np.nan]])).tolist() == [["1.5", "nan"]]
    finally:
        ck.close()


def test_one_selection_reads_the_tensor_once_for_statistics_and_histogram(qtbot, ckpt) -> None:
    ck, ref = ckpt
    panel = StatsPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignals([panel.statsReady, panel.histogram.exactReady], timeout=10_000):
        panel.set_selection([node(ck, "conv")])  # bf16: the one pass also gives the exact histogram
    assert panel.analysis.passes == 1
    assert panel.histogram.plotted_counts()[0].sum() == ref["conv"].numel()
    with qtbot.waitSignals([panel.statsReady, panel.histogram.exactReady], timeout=10_000):
        panel.set_selection([node(ck, "big")])  # float32: its values are kept from the statistics pass
    assert panel.analysis.passes == 2
    with qtbot.waitSignals([panel.statsReady, panel.histogram.exactReady], timeout=10_000):
        panel.set_selection([node(ck, "conv")])  # back again: everything from the cache
    assert panel.analysis.passes == 2


def test_values_precision_exact_copy_steppers_and_column_width(qtbot, tmp_path) -> None:
    from ckptview.gui.panels.values import EXACT, ValuesPanel

    g = torch.Generator().manual_seed(3)
    conv = torch.randn(4, 3, 5, 5, generator=g) * 1e-3 - 123.456789  # long texts, negatives
    path = tmp_path / "conv.pt"
    torch.save({"conv": conv}, path)
    ck = open_checkpoint(str(path))
    try:
        view = ValuesPanel()
        view.resize(700, 400)
        qtbot.addWidget(view)
        view.show()
        with qtbot.waitSignal(view.sliceReady, timeout=10_000):
            view.set_selection([node(ck, "conv")])
        model = view.model
        assert [b.prefix() for b in view.steppers] == ["dim 0: ", "dim 1: "]
        assert [b.maximum() for b in view.steppers] == [3, 2]
        qtbot.waitUntil(lambda: model.cell_text(0, 0) is not None, timeout=10_000)
        assert model.cell_text(0, 0) == f"{float(conv[0, 0, 0, 0]):.6g}"
        # The columns grew to fit the widest text: no cut negatives.
        width = view.table.horizontalHeader().sectionSize(0)
        assert width >= view.fontMetrics().horizontalAdvance(model.cell_text(0, 0))
        # Step to the 2-D slice [2, 1, :, :].
        with qtbot.waitSignal(view.sliceReady, timeout=10_000):
            view.steppers[0].setValue(2)
        with qtbot.waitSignal(view.sliceReady, timeout=10_000):
            view.steppers[1].setValue(1)
        assert view.spec.text() == "[2, 1, :, :]"
        qtbot.waitUntil(lambda: model.cell_text(4, 3) is not None, timeout=10_000)
        assert model.cell_text(4, 3) == f"{float(conv[2, 1, 4, 3]):.6g}"
        # Exact display, and copy always copies exact values (they read back as the stored float32).
        view.digits.setCurrentIndex(view.digits.findData(EXACT))
        qtbot.waitUntil(lambda: model.cell_text(4, 3) is not None, timeout=10_000)
        assert np.float32(model.cell_text(4, 3)) == conv[2, 1, 4, 3].numpy()
        view.digits.setCurrentIndex(0)
        view.table.selectAll()
        rows = [line.split("\t") for line in view.selection_text().split("\n")]
        np.testing.assert_array_equal(np.array(rows, dtype=np.float32), conv[2, 1].numpy())
    finally:
        ck.close()


def test_a_module_group_row_of_a_flat_state_dict_has_statistics(qtbot, window, tmp_path) -> None:
    from tests.support.guihelpers import make_state_dict, wait_settled

    path = make_state_dict(str(tmp_path / "flat.pth"))
    ref = torch.load(path, weights_only=True)
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab)
    panel = tab.panel("Statistics")
    assert isinstance(panel, StatsPanel)
    with qtbot.waitSignal(panel.statsReady, timeout=10_000):
        assert tab.select_name("encoder.layers.0")  # a synthetic group row: the file has no such key
    names = [k for k in ref if k.startswith("encoder.layers.0.")]
    both = torch.cat([ref[k].double().reshape(-1) for k in names])
    shown = panel.figures()
    assert panel.targets[0][0] == f"encoder.layers.0 ({len(names)} tensors)"
    assert shown["numel"] == f"{both.numel():,}"
    assert float(shown["mean"]) == pytest.approx(float(both.mean()), rel=1e-5)
    assert float(shown["std"]) == pytest.approx(float(both.std()), rel=1e-5)
    assert float(shown["max"]) == pytest.approx(float(both.max()), rel=1e-5)
    heatmap = tab.panel("Heat-map")
    assert "select a tensor below it" in heatmap.status.text()  # disabled, with the reason


def test_a_module_s_figures_leave_its_counters_apart(qtbot, tmp_path) -> None:
    """A BatchNorm's num_batches_tracked (36) is no value of the module: its figures are over the floating-point
    parameters and buffers, as torch.cat of them gives; the counter is on its own line."""
    torch.manual_seed(0)
    features = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    with torch.no_grad():
        for _ in range(36):
            features(torch.randn(2, 3, 6, 6))
    path = tmp_path / "features.pt"
    torch.save({"features": features.state_dict()}, path)
    ck = open_checkpoint(str(path))
    try:
        panel = StatsPanel()
        qtbot.addWidget(panel)
        with qtbot.waitSignal(panel.statsReady, timeout=10_000):
            panel.set_selection([node(ck, "features")])
        floats = torch.cat([t.double().reshape(-1) for t in features.state_dict().values() if t.is_floating_point()])
        shown = panel.figures()
        assert shown["numel"] == f"{floats.numel():,}"
        assert float(shown["max"]) == pytest.approx(float(floats.max()), rel=1e-5)
        assert float(shown["mean"]) == pytest.approx(float(floats.mean()), rel=1e-5)
        assert panel.targets[0][0] == "features (6 tensors)"
        assert "features.1.num_batches_tracked = 36" in panel.counters.text()
        with qtbot.waitSignal(panel.statsReady, timeout=10_000):
            panel.set_selection([node(ck, "features.0.weight")])
        assert panel.counters.text() == "" and panel.counters.isHidden()
    finally:
        ck.close()


def test_a_module_of_counters_only_names_them_all(qtbot, tmp_path) -> None:
    """A container holding counters alone still gets its line (each value, a many-element one by its max), and
    past six counters the line says how many more there are."""
    counts = {f"c{i}": torch.tensor(i) for i in range(8)}
    torch.save({"counts": counts, "m": {"ids": torch.tensor([1, 2, 5]), "step": torch.tensor(4.0)}},
               tmp_path / "counts.pt")
    ck = open_checkpoint(str(tmp_path / "counts.pt"))
    try:
        panel = StatsPanel()
        qtbot.addWidget(panel)
        with qtbot.waitSignal(panel.statsReady, timeout=10_000):
            panel.set_selection([node(ck, "counts")])
        assert panel.targets == [] and not panel.counters.isHidden()
        assert panel.counters.text() == ("counters apart: counts.c0 = 0, counts.c1 = 1, counts.c2 = 2, counts.c3 = 3, "
                                         "counts.c4 = 4, counts.c5 = 5 and 2 more")
        with qtbot.waitSignal(panel.statsReady, timeout=10_000):
            panel.set_selection([node(ck, "m")])
        assert panel.counters.text() == "counters apart: m.ids max 5, m.step = 4"
    finally:
        ck.close()

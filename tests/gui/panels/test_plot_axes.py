"""The panels' plots: axes from the data, a legend for every line, per-plot axes (issue 35, finding 5).

Found on checkpoints the libraries write: a 1-D heat-map had row ticks 0, 0.2 … 1.0; a large weight's
spectrum had tick labels over each other (`0.0010.01`, `1001e+03`); the ESD's fit and xmin lines had no
legend; two histograms of 65,536 and 1,280 values shared one count axis, so the small one was a flat line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ckptview.core import open_checkpoint
from tests.gui.series.test_views import assert_no_overlap, texts


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    """A torch model's state dict: a 256 x 256 Linear (65,536 weights), a 1,280-long bias, a square weight."""
    torch.manual_seed(0)
    model = nn.ModuleDict({"proj": nn.Linear(256, 256), "head": nn.Linear(64, 1280), "wide": nn.Linear(768, 768)})
    path = tmp_path_factory.mktemp("plot_axes") / "model.pt"
    torch.save(model.state_dict(), path)
    ck = open_checkpoint(str(path))
    yield ck, torch.load(path, weights_only=True)
    ck.close()


def node(ck, name):
    return next(n for n in ck.root.walk() if n.name == name)


def shown(qtbot, widget, size=(520, 420)):
    qtbot.addWidget(widget)
    widget.resize(*size)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_a_one_dimensional_heatmap_has_whole_index_ticks(qtbot, model_file):
    from ckptview.gui.panels.heatmap import HeatmapPanel

    ck, _ref = model_file
    view = shown(qtbot, HeatmapPanel())
    with qtbot.waitSignal(view.ready, timeout=20_000):
        view.set_selection([node(ck, "head.bias")])
    assert view.heatmap.matrix_shape == (1, 1280)
    qtbot.waitUntil(lambda: len(texts(view.plot.getAxis("bottom"))) >= 2, timeout=10_000)
    rows = [t for _, t in texts(view.plot.getAxis("left"))]
    assert rows == ["0"]  # one row: one tick, no 0.2 … 1.0
    columns = [t for _, t in texts(view.plot.getAxis("bottom"))]
    assert all(t.isdigit() and int(t) < 1280 for t in columns), columns
    assert_no_overlap(texts(view.plot.getAxis("bottom")))


def test_spectrum_ticks_do_not_overlap_and_every_line_is_in_the_legend(qtbot, model_file):
    from ckptview.gui.panels.spectrum import SpectrumPanel

    ck, _ref = model_file
    panel = shown(qtbot, SpectrumPanel(), size=(360, 560))
    with qtbot.waitSignal(panel.ready, timeout=120_000):
        panel.set_selection([node(ck, "wide.weight")])
    s = panel.spectra[0]
    assert s.fit is not None  # the ESD has a fitted tail and its xmin: both are drawn
    qtbot.waitUntil(lambda: len(texts(panel.esd_plot.getAxis("bottom"))) >= 2, timeout=10_000)
    overlaps = []
    for width in range(260, 1000, 20):  # the side panel's width at every screen size
        panel.resize(width, 560)
        qtbot.waitUntil(lambda w=width: panel.width() == w, timeout=5_000)
        for plot in (panel.esd_plot, panel.sv_plot):
            for side in ("bottom", "left"):
                try:
                    assert_no_overlap(texts(plot.getAxis(side)))
                except AssertionError as exc:
                    overlaps.append((width, side, str(exc)))
    assert overlaps == []
    decades = [t for _, t in texts(panel.esd_plot.getAxis("bottom"))]
    assert len(decades) >= 2
    legend = panel.esd_legend.text()
    for words in ("ESD", "power-law fit", "xmin"):
        assert words in legend, legend
    assert f"{s.fit.alpha:.2f}" in legend and f"{s.fit.xmin:.3g}" in legend
    assert panel.esd_legend.isVisible()


def test_histograms_of_very_different_sizes_get_their_own_count_axes(qtbot, model_file):
    from ckptview.gui.panels.statistics import StatsPanel

    ck, ref = model_file
    panel = shown(qtbot, StatsPanel(), size=(520, 640))
    with qtbot.waitSignals([panel.statsReady, panel.histogram.exactReady], timeout=20_000):
        panel.set_selection([node(ck, "proj.weight"), node(ck, "head.bias")])
    hist = panel.histogram
    big, small = hist.plotted_counts()
    assert big.sum() == 65_536 and small.sum() == 1_280
    plots = hist.plot_items()
    assert len(plots) == 2  # 65,536 and 1,280 values: one count axis each
    for plot, counts in zip(plots, (big, small), strict=True):
        top = plot.vb.viewRange()[1][1]
        assert counts.max() <= top <= 1.5 * counts.max()  # each axis fits its own histogram
    # Each keeps room for two labels of counts, and no "count" title: two of them ran into each other.
    from ckptview.gui.panels.histogram import STACKED_MIN_HEIGHT

    qtbot.waitUntil(lambda: all(p.height() >= STACKED_MIN_HEIGHT for p in plots), timeout=5_000)
    for plot in plots:
        qtbot.waitUntil(lambda p=plot: len(texts(p.getAxis("left"))) >= 2, timeout=5_000)
        assert not plot.getAxis("left").label.isVisible()
    # Tensors of like sizes share one axis, as before.
    with qtbot.waitSignals([panel.statsReady, panel.histogram.exactReady], timeout=20_000):
        panel.set_selection([node(ck, "head.bias"), node(ck, "wide.bias")])  # 1,280 and 768 values
    assert len(hist.plot_items()) == 1 and len(hist.plotted_counts()) == 2
    assert hist.plot_items()[0].getAxis("left").label.isVisible()  # one plot: its axis is named
    np.testing.assert_array_equal(hist.plotted_counts()[1].sum(), ref["wide.bias"].numel())


@pytest.mark.parametrize(("log", "lo", "hi"), [
    (True, -9.0, 0.2),    # a 4096 x 4096 Linear's ESD: eigenvalues from 1e-9 to 1.3, nine decades
    (True, -3.0, 3.0),    # where `0.0010.01` and `1001e+03` were read
    (True, -0.4, 0.3),    # within one decade: round values between the decades
    (False, 0.0, 4096.0),  # its singular values' index axis
])
def test_tick_labels_never_overlap_at_any_width(qtbot, log, lo, hi):
    """The ranges of a 4096² weight's spectrum (computing it takes a minute on a busy machine, so the plot is
    given its ranges) on plots of every width a side panel gets: labels never overlap, and two or more
    are shown."""
    import pyqtgraph as pg

    from ckptview.gui.base.log_axis import log_tick_axis

    widget = pg.PlotWidget(axisItems={"bottom": log_tick_axis("bottom"), "left": log_tick_axis("left")})
    shown(qtbot, widget)
    item = widget.getPlotItem()
    item.setLogMode(x=log, y=log)
    item.setRange(xRange=(lo, hi), yRange=(lo, hi), padding=0)
    for width, height in ((160, 140), (260, 200), (420, 320), (700, 420), (1000, 560)):
        widget.resize(width, height)
        qtbot.waitUntil(lambda w=width: widget.width() == w, timeout=5_000)
        for side in ("bottom", "left"):  # a vertical axis widens to its labels a layout later: wait for it
            axis = item.getAxis(side)
            qtbot.waitUntil(lambda a=axis: len(texts(a)) >= 2, timeout=5_000)
            assert_no_overlap(texts(axis))

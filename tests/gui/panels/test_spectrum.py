"""The Spectrum panel driven with qtbot: the table of a module's weights, sorting, flags, the ESD view."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402

from ckptview.core import open_checkpoint  # noqa: E402
from ckptview.core.figures.spectral import spectrum  # noqa: E402
from ckptview.gui.panels.spectrum import SpectrumPanel  # noqa: E402
from tests.support.guihelpers import wait_settled  # noqa: E402


@pytest.fixture
def ckpt(tmp_path):
    rng = np.random.default_rng(0)
    g = torch.Generator().manual_seed(0)
    low = torch.randn(60, 4, generator=g) @ torch.randn(4, 90, generator=g)  # rank 4: flagged
    sd = {
        "enc.q.weight": torch.randn(64, 64, generator=g),
        "enc.q.bias": torch.zeros(64),
        "enc.mlp.weight": torch.from_numpy(rng.standard_t(3, size=(120, 80)).astype(np.float32)),
        "enc.low.weight": low,
        "enc.conv.weight": torch.randn(16, 3, 3, 3, generator=g),
        "head.weight": torch.randn(10, 64, generator=g),
    }
    path = tmp_path / "m.pt"
    torch.save(sd, path)
    ck = open_checkpoint(str(path))
    yield ck, path
    ck.close()


def module(ck, prefix):
    """The module-group row the tree shows for dotted keys (the file has no such key)."""
    from ckptview.core.inspect.grouping import ModuleGroup

    return ModuleGroup(prefix, [n for n in ck.root.walk() if n.kind == "tensor" and n.name.startswith(prefix + ".")])


def node(ck, name):
    for n in ck.root.walk():
        if n.name == name:
            return n
    raise KeyError(name)


def click_header(qtbot, panel: SpectrumPanel, column: int) -> None:
    header = panel.table.horizontalHeader()
    x = header.sectionViewportPosition(column) + header.sectionSize(column) // 2
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, header.height() // 2))


GRAM = "W<sup>T</sup>W"


def test_module_table_figures_sorting_and_flags(qtbot, ckpt) -> None:
    ck, _path = ckpt
    panel = SpectrumPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.tableReady, timeout=60_000):
        panel.set_selection([node(ck, "")])
    names = panel.column_texts(0)
    assert names == ["enc.q.weight", "enc.mlp.weight", "enc.low.weight", "enc.conv.weight", "head.weight"]
    expected = {name: spectrum(e.info) for e in ck.tensors() for name in [e.name] if name in names}
    for row, name in enumerate(names):
        s = expected[name]
        assert panel.table.item(row, 2).text() == f"{s.alpha:.3f}"
        assert float(panel.table.item(row, 4).text()) == pytest.approx(s.spectral_norm, rel=1e-3)
    assert "enc.low.weight" in panel.flagged_rows()
    low_row = names.index("enc.low.weight")
    assert "rank_collapse" in panel.table.item(low_row, 5).text()
    assert panel.table.item(low_row, 0).background().color().alpha() > 0  # the whole row is marked
    assert set(panel.flagged_rows()) == {n for n, s in expected.items() if s.flags}

    click_header(qtbot, panel, 2)  # sort by alpha, as numbers
    alphas = [float(t) for t in panel.column_texts(2)]
    assert alphas in (sorted(alphas), sorted(alphas, reverse=True)) and len(set(alphas)) > 1
    click_header(qtbot, panel, 4)  # and by spectral norm
    norms = [float(t) for t in panel.column_texts(4)]
    assert norms in (sorted(norms), sorted(norms, reverse=True))


def test_clicking_a_row_draws_its_spectrum_and_reopening_is_immediate(qtbot, ckpt) -> None:
    ck, _path = ckpt
    panel = SpectrumPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignals([panel.tableReady, panel.ready], timeout=60_000):
        panel.set_selection([module(ck, "enc")])
    assert panel.figures.text().startswith("enc.q.weight: 64 x 64, exact")
    row = panel.column_texts(0).index("enc.mlp.weight")
    rect = panel.table.visualItemRect(panel.table.item(row, 0))
    with qtbot.waitSignal(panel.ready, timeout=10_000):
        qtbot.mouseClick(panel.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    s = spectrum(next(e.info for e in ck.tensors() if e.name == "enc.mlp.weight"))
    text = panel.figures.text()
    assert text.startswith("enc.mlp.weight: 120 x 80, exact") and f"alpha {s.alpha:.3f}" in text
    esd, fit = panel.esd_plot.listDataItems()  # the ESD points and the fitted tail
    assert fit.xData.min() == pytest.approx(s.fit.xmin) and esd.xData.size > 5
    assert panel.esd_plot.ctrl.logXCheck.isChecked() and panel.esd_plot.ctrl.logYCheck.isChecked()
    (sv,) = panel.sv_plot.listDataItems()
    np.testing.assert_allclose(sv.yData, s.singular_values, rtol=1e-12)
    # One form of the Gram matrix on the axis and in the legend (the axis said W^T W, the legend WᵀW)
    axis = panel.esd_plot.getAxis("bottom").labelText
    assert GRAM in axis and GRAM in panel.esd_legend.text() and "^" not in axis

    passes = panel.analysis.spectral_passes
    with qtbot.waitSignal(panel.tableReady, timeout=30_000):  # every spectrum cached: no pass below
        panel.set_selection([module(ck, "enc")])
    flagged = sum(1 for e in ck.tensors() if e.name.startswith("enc.")
                  and len(e.info.shape) > 1 and spectrum(e.info).flags)
    assert panel.analysis.spectral_passes == passes and panel.status.text() == f"4 weights, {flagged} flagged"


def test_a_weight_without_spectrum_says_why(qtbot, tmp_path) -> None:
    w = torch.randn(8, 8)
    w[1, 1] = float("nan")
    torch.save({"w": w, "b": torch.zeros(3)}, tmp_path / "n.pt")
    ck = open_checkpoint(str(tmp_path / "n.pt"))
    try:
        panel = SpectrumPanel()
        qtbot.addWidget(panel)
        with qtbot.waitSignal(panel.tableReady, timeout=10_000):
            panel.set_selection([node(ck, "")])
        assert panel.column_texts(0) == ["w"]
        assert "1 NaN/Inf value" in panel.table.item(0, 5).text() and "1 unreadable" in panel.status.text()
        assert "NaN/Inf" in panel.figures.text()
        panel.set_selection([node(ck, "b")])  # a bias: nothing to analyse
        assert panel.table.rowCount() == 0 and "2-D weights" in panel.status.text()
    finally:
        ck.close()


def test_a_new_selection_cancels_the_running_job(qtbot, tmp_path) -> None:
    g = torch.Generator().manual_seed(1)
    torch.save({f"l{i}.weight": torch.randn(700, 600, generator=g) for i in range(6)}, tmp_path / "big.pt")
    ck = open_checkpoint(str(tmp_path / "big.pt"))
    try:
        panel = SpectrumPanel()
        qtbot.addWidget(panel)
        panel.set_selection([node(ck, "")])
        worker = next(iter(panel.slot._workers))
        panel.set_selection([])
        assert worker.token.cancelled
        qtbot.waitUntil(lambda: worker.is_done, timeout=60_000)
        assert panel.table.rowCount() == 0
    finally:
        ck.close()


def test_in_the_window_the_panel_computes_when_shown(qtbot, ckpt) -> None:
    from ckptview.gui.app.main_window import MainWindow

    _ck, path = ckpt
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    (tab,) = window.open_paths([str(path)])
    wait_settled(qtbot, tab)
    assert tab.select_name("enc.mlp.weight")
    panel = tab.panel("Spectrum")
    assert isinstance(panel, SpectrumPanel)
    with qtbot.waitSignal(panel.ready, timeout=60_000):
        tab.show_panel("Spectrum")
    assert panel.column_texts(0) == ["enc.mlp.weight"]
    assert panel.figures.text().startswith("enc.mlp.weight: 120 x 80")


def test_log_axes_label_their_ticks_apart_in_a_short_plot(qtbot, ckpt) -> None:
    """At 1024x640 the ESD is about 120 px tall: pyqtgraph's own log axis drew its minor labels over each
    other there; every labelled tick must sit at least a text line from the next."""
    from ckptview.gui.base.log_axis import tick_font_metrics

    ck, _path = ckpt
    panel = SpectrumPanel()
    qtbot.addWidget(panel)
    panel.resize(480, 360)
    panel.show()
    with qtbot.waitSignals([panel.tableReady, panel.ready], timeout=60_000):
        panel.set_selection([module(ck, "enc")])
    for plot, side in ((panel.esd_plot, "left"), (panel.esd_plot, "bottom"), (panel.sv_plot, "left")):
        axis = plot.getAxis(side)
        (lo, hi) = plot.viewRange()[1 if side == "left" else 0]
        size = axis.height() if side == "left" else axis.width()
        ticks = [v for _spacing, values in axis.tickValues(lo, hi, size) for v in values]
        assert ticks, side
        pixels = sorted((v - lo) / (hi - lo) * size for v in ticks)
        gap = tick_font_metrics(axis).height()
        assert all(b - a >= gap for a, b in zip(pixels, pixels[1:], strict=False)), (side, pixels)
        labels = axis.tickStrings(ticks, 1.0, 1.0)
        assert len(set(labels)) == len(labels), labels

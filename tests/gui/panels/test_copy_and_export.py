"""What users of Netron and TensorBoard look for (issue 35, finding 10): the statistics table copied whole
(Ctrl+C and a context-menu action, tab-separated with headers), and every plot exported as PNG or SVG
through one shared action (histograms, heat-maps, spectra, the series tab's and the comparison's plots)."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog

from ckptview.core import open_checkpoint
from ckptview.gui.base.plots import EXPORT_TEXT, export_actions


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
    path = tmp_path_factory.mktemp("copy_export") / "model.pt"
    torch.save(model.state_dict(), path)
    ck = open_checkpoint(str(path))
    yield ck, path
    ck.close()


def node(ck, name):
    return next(n for n in ck.root.walk() if n.name == name)


def test_the_statistics_table_copies_whole(qtbot, saved):
    from ckptview.gui.panels.statistics import LABELS, StatsPanel

    ck, _path = saved
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.show()
    with qtbot.waitSignal(panel.statsReady, timeout=20_000):
        panel.set_selection([node(ck, "0.weight"), node(ck, "1.weight")])
    QGuiApplication.clipboard().clear()
    panel.table.setFocus()
    qtbot.keyClick(panel.table, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    lines = QGuiApplication.clipboard().text().split("\n")
    assert lines[0] == "figure\t0.weight\t1.weight"
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in lines[1:]}
    assert list(rows) == list(LABELS.values())  # every figure, in the table's order
    assert rows["elements"] == ["512", "128"]
    assert rows["mean"] == [panel.figures(0)["mean"], panel.figures(1)["mean"]]
    QGuiApplication.clipboard().clear()
    menu = panel.table_menu()
    copy = next(a for a in menu.actions() if a.text() == "Copy table")
    copy.trigger()
    assert QGuiApplication.clipboard().text().split("\n") == lines


def exported(qtbot, widget, tmp_path, monkeypatch, expected: int) -> list[str]:
    """Trigger every plot's export action in `widget`, once as PNG and once as SVG; the names exported."""
    actions = export_actions(widget)
    assert len(actions) == expected, [a.data() for a in actions]
    names = []
    for action in actions:
        assert action.text() == EXPORT_TEXT
        for suffix, magic in ((".png", b"\x89PNG"), (".svg", b"<svg")):
            out = tmp_path / f"{action.data()}{suffix}"
            monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, o=out, **k: (str(o), "")))
            action.trigger()
            data = out.read_bytes()
            assert data.startswith(magic) or magic in data[:400], (action.data(), data[:80])
        names.append(action.data())
    return names


def test_every_panel_plot_exports_png_and_svg(qtbot, saved, tmp_path, monkeypatch):
    from ckptview.gui.panels.heatmap import HeatmapPanel
    from ckptview.gui.panels.spectrum import SpectrumPanel
    from ckptview.gui.panels.statistics import StatsPanel

    ck, _path = saved
    stats, heat, spectrum = StatsPanel(), HeatmapPanel(), SpectrumPanel()
    for widget in (stats, heat, spectrum):
        qtbot.addWidget(widget)
        widget.resize(480, 480)
        widget.show()
    with qtbot.waitSignals([stats.statsReady, stats.histogram.exactReady, heat.ready, spectrum.ready],
                           timeout=60_000):
        for widget in (stats, heat, spectrum):
            widget.set_selection([node(ck, "0.weight")])
    assert exported(qtbot, stats, tmp_path, monkeypatch, 1) == ["histogram"]
    assert exported(qtbot, heat, tmp_path, monkeypatch, 1) == ["heatmap"]
    assert exported(qtbot, spectrum, tmp_path, monkeypatch, 1) == ["spectrum"]
    # The plot's own menu offers it, in place of pyqtgraph's export dialog.
    assert stats.histogram.plot.scene().contextMenu == export_actions(stats)


def test_the_series_tab_and_the_comparison_export_their_plots(qtbot, tmp_path, monkeypatch):
    from ckptview.gui.compare.tab import CompareTab
    from tests.gui.series.test_views import open_tab

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    for step in (1, 2, 3):
        with torch.no_grad():
            model.weight.add_(0.1)
        torch.save({"step": step, "model": model.state_dict()}, tmp_path / f"s{step}.pt")
    tab = open_tab(qtbot, [tmp_path])
    tab.spectral_box.setChecked(True)
    names = exported(qtbot, tab, tmp_path, monkeypatch, 5)
    assert sorted(names) == ["logged-scalars", "norms-and-update-ratios", "spectra-over-the-run", "update-heatmap",
                             "values-over-the-run"]
    view = CompareTab(str(tmp_path / "s1.pt"), str(tmp_path / "s3.pt"))
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.finished, timeout=20_000):
        view.start()
    assert sorted(exported(qtbot, view, tmp_path, monkeypatch, 3)) == [
        "histogram-b-minus-a", "histograms-a-b", "relative-change"]


def test_the_summarys_size_chart_exports_by_the_same_action(qtbot, tmp_path, monkeypatch):
    """The size-by-module bars are painted by Qt, not pyqtgraph; their context menu holds the same action."""
    from ckptview.gui.base.size_chart import SizeChart

    chart = SizeChart([("model.encoder", 3 << 20), ("model.head", 1 << 20)])
    qtbot.addWidget(chart)
    chart.resize(360, 76)
    chart.show()
    assert chart.contextMenuPolicy() == Qt.ContextMenuPolicy.ActionsContextMenu
    assert chart.actions() == export_actions(chart)
    assert exported(qtbot, chart, tmp_path, monkeypatch, 1) == ["size-by-module"]

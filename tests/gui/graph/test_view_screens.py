"""The Graph view at the sizes people use (1024x640, 1280x800): the window keeps its size, the graph gets the
room, the tree stays beside it, and no control is cut."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect

from ckptview.gui.checkpoint.tree_model import DEVICE, NAME, SHARD, SIZE
from tests.support.graphview import laid_out, open_graph
from tests.support.layout_engines import needs_igraph

pytestmark = needs_igraph  # every test here lays out a graph

SIZES = [(1024, 640), (1280, 800)]
MIN_CANVAS = {(1024, 640): (600, 300), (1280, 800): (760, 450)}


def visible_rect(widget, window) -> QRect:
    rect = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
    parent = widget.parentWidget()
    while parent is not None and parent is not window:
        rect = rect.intersected(QRect(parent.mapTo(window, QPoint(0, 0)), parent.size()))
        parent = parent.parentWidget()
    return rect.intersected(window.rect())


@pytest.mark.parametrize("size", SIZES)
def test_view_fits_the_screen_and_gives_the_graph_the_room(qtbot, window, llama_file, size):
    window.resize(*size)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size)
    tab, page = open_graph(qtbot, window, llama_file[0])
    laid_out(qtbot, page, lambda: page.expand("model.layers.0"))
    page.overlay_box.setCurrentIndex(page.overlay_box.findText("spectral alpha"))
    qtbot.waitUntil(lambda: page.coloured is not None, timeout=60_000)
    assert (window.width(), window.height()) == size  # the window never grows
    canvas = visible_rect(page.canvas, window)
    assert canvas.width() >= MIN_CANVAS[size][0] and canvas.height() >= MIN_CANVAS[size][1], canvas
    assert visible_rect(tab.tree, window).width() >= 340  # the tree stays beside it, for the selection
    assert tab.tree.columnWidth(NAME) >= 200  # with room for its names (Dtype, Size and Params give way)
    tab.show_graph(False)
    assert not tab.tree.isColumnHidden(SIZE) and tab.right.currentWidget() is tab.side_tabs
    assert tab.tree.isColumnHidden(SHARD) and tab.tree.isColumnHidden(DEVICE)  # as they were: not sharded
    tab.show_graph(True)
    for widget in (page.search, page.overlay_box, page.top_button, page.fit_button, page.export_button,
                   page.source_label, page.legend, page.status, tab.graph_button):
        assert visible_rect(widget, window) == QRect(widget.mapTo(window, QPoint(0, 0)), widget.size()), widget
    for widget in (page.overlay_box, page.top_button, page.fit_button, page.export_button, tab.graph_button):
        assert widget.width() >= widget.sizeHint().width(), widget  # nothing short is cut
    assert page.source_label.height() >= page.source_label.heightForWidth(page.source_label.width())


def _controls(page):
    return (page.search, page.overlay_box, page.top_button, page.fit_button, page.export_button, page.legend,
            page.status)


@pytest.mark.parametrize("size", SIZES)
def test_the_run_and_comparison_graphs_fit_the_screen(qtbot, window, llama_file, tmp_path, size):
    import torch

    from ckptview.gui.compare.tab import open_diff
    from ckptview.gui.series.tab import open_series_tab

    path, tensors = llama_file
    run = tmp_path / "run"
    run.mkdir()
    for step in (1, 2):
        torch.save({k: t + 0.01 * step for k, t in tensors.items()}, run / f"step_{step}.pth")
    window.resize(*size)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size)
    tab = open_series_tab(window, [str(run)])
    qtbot.waitUntil(lambda: tab.state == "ready", timeout=120_000)
    tab.views.setCurrentWidget(tab.graph)
    qtbot.waitUntil(lambda: tab.graph.page is not None and tab.graph.page.coloured is not None, timeout=60_000)
    page = tab.graph.page
    assert (window.width(), window.height()) == size
    canvas = visible_rect(page.canvas, window)
    assert canvas.width() >= size[0] * 0.55 and canvas.height() >= size[1] * 0.45, canvas
    for widget in (*_controls(page), tab.graph.step_box):
        assert visible_rect(widget, window) == QRect(widget.mapTo(window, QPoint(0, 0)), widget.size()), widget
        assert widget.width() >= min(widget.sizeHint().width(), 200), widget

    view = open_diff(window, path, str(run / "step_2.pth"))
    qtbot.waitUntil(lambda: not view.busy and view.result is not None, timeout=60_000)
    host = view.show_graph(True)
    qtbot.waitUntil(lambda: host.page is not None and host.page.coloured is not None, timeout=60_000)
    page = host.page
    canvas = visible_rect(page.canvas, window)
    assert canvas.height() >= size[1] * 0.3, canvas  # the table keeps a few rows above it
    for widget in (*_controls(page), view.graph_button):
        assert visible_rect(widget, window) == QRect(widget.mapTo(window, QPoint(0, 0)), widget.size()), widget

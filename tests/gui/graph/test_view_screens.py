"""The Graph view at the sizes people use (1024x640, 1280x800): the window keeps its size, the graph gets the
room, the tree stays beside it, and no control is cut."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect

from ckptview.gui.checkpoint.tree_model import DEVICE, NAME, SHARD, SIZE
from tests.support.graphview import laid_out, open_graph

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

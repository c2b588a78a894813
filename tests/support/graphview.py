"""Helpers of the Graph view's window tests: open a checkpoint's Graph view, wait for layouts, click boxes."""

from __future__ import annotations

from PySide6.QtCore import Qt

from ckptview.core.graph.collapse import ALL_OPS
from tests.support.guihelpers import wait_settled

LAYERS = 2  # layers of the synthetic program the tests' checkpoint holds the keys of


def open_graph(qtbot, window, path, every_op: bool = True) -> tuple:
    """A tab's Graph view, laid out: in the view of every op (the tests of nesting, search and overlays), or
    (`every_op` False) in the architecture view it opens with."""
    tab = window.open_paths([path])[0]
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    page = tab.show_graph(True)
    assert page is not None and tab.right.currentWidget() is page
    qtbot.waitUntil(lambda: page.view is not None, timeout=30_000)
    if every_op:
        laid_out(qtbot, page, lambda: page.set_mode(ALL_OPS))
    return tab, page


def laid_out(qtbot, page, action) -> None:
    with qtbot.waitSignal(page.layout_ready, timeout=30_000):
        action()


def click_box(qtbot, page, key, double=False) -> None:
    rect = page.item_rect(key)
    assert rect is not None, key
    page.canvas.centerOn(rect.center())
    point = page.canvas.mapFromScene(rect.center())
    if double:
        qtbot.mouseDClick(page.canvas.viewport(), Qt.MouseButton.LeftButton, pos=point)
    else:
        qtbot.mouseClick(page.canvas.viewport(), Qt.MouseButton.LeftButton, pos=point)


def wait_coloured(qtbot, page) -> None:
    """Wait until the boxes shown have their figures (a new layout colours them again in a worker)."""
    qtbot.waitUntil(lambda: page.coloured is not None and page.coloured.view is page.view, timeout=60_000)

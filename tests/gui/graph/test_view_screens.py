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


PALETTES = ["light", "dark"]


def scene_contrast(page) -> dict[str, float]:
    """The drawing's contrast figures: each colour against what it is drawn on (text 4.5:1, lines 3:1)."""
    from ckptview.gui.base.palette import contrast

    c = page.scene.colours
    viewport = page.canvas.viewport()  # what is painted behind the drawing: the view's background role
    background = viewport.palette().color(viewport.backgroundRole())
    figures = {"box text on a module": contrast(c["text"], c["group"]), "box text on an op": contrast(c["text"], c["base"]),
               "frame title": contrast(c["title"], background), "edge label": contrast(c["edge_text"], background),
               "edge": contrast(c["edge"], background), "frame": contrast(c["frame"], background),
               "box outline": contrast(c["box"], background), "selection": contrast(c["highlight"], background)}
    figures.update({f"{status} outline": contrast(c[status], background) for status in ("added", "removed", "shape")})
    return figures


def _least(what: str) -> float:
    return 4.5 if "text" in what or "title" in what or "label" in what else 3.0


@pytest.mark.slow
@pytest.mark.parametrize("palette", PALETTES)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_graph_view_fits_and_reads_at_each_size_and_palette(qtbot, settings, llama_file, tmp_path, size,
                                                                   palette):
    """The architecture view, every op with a module open (edge labels shown), a comparison's merged graph and
    a run's graph: the window keeps its size, nothing short is cut, widget text 4.5:1 and the drawing's own
    colours (text 4.5:1, edges, frames and outlines 3:1) in light and dark."""
    import torch

    from ckptview.gui.app.main_window import MainWindow
    from ckptview.gui.base.palette import apply_palette
    from ckptview.gui.compare.tab import open_diff
    from ckptview.gui.series.tab import open_series_tab
    from tests.support.graphview import wait_coloured

    settings.set_palette(palette)
    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.resize(*size)
    window.show()
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size)
    figures, problems = {}, []
    try:
        path, tensors = llama_file
        tab, page = open_graph(qtbot, window, path, every_op=False)
        pages = {"architecture": page}
        laid_out(qtbot, page, lambda: page.set_mode("all"))
        laid_out(qtbot, page, lambda: page.expand("model.layers.0.self_attn"))
        page.canvas.set_zoom(1.0)
        pages["every op"] = page
        problems += _check_page(window, page, "every op", size)
        figures["every op"] = scene_contrast(page)
        assert page.scene.edge_label_layer.isVisible() and page.scene.edge_labels
        laid_out(qtbot, page, lambda: page.set_mode("architecture"))
        problems += _check_page(window, page, "architecture", size)
        figures["architecture"] = scene_contrast(page)
        run = tmp_path / "run"
        run.mkdir()
        for step in (1, 2):
            torch.save({k: t + 0.01 * step for k, t in tensors.items()}, run / f"step_{step}.pth")
        view = open_diff(window, path, str(run / "step_2.pth"))
        qtbot.waitUntil(lambda: not view.busy and view.result is not None, timeout=60_000)
        host = view.show_graph(True)
        qtbot.waitUntil(lambda: host.page is not None and host.page.view is not None, timeout=60_000)
        wait_coloured(qtbot, host.page)
        problems += _check_page(window, host.page, "comparison", size)
        figures["comparison"] = scene_contrast(host.page)
        series = open_series_tab(window, [str(run)])
        qtbot.waitUntil(lambda: series.state == "ready", timeout=120_000)
        series.views.setCurrentWidget(series.graph)
        qtbot.waitUntil(lambda: series.graph.page is not None and series.graph.page.view is not None, timeout=60_000)
        problems += _check_page(window, series.graph.page, "run", size)
        figures["run"] = scene_contrast(series.graph.page)
    finally:
        window.close()
        apply_palette("system")
    low = [f"{where}: {what} {ratio:.2f}:1" for where, found in figures.items() for what, ratio in found.items()
           if ratio < _least(what)]
    table = "\n".join(f"{where}: " + ", ".join(f"{w} {r:.1f}" for w, r in found.items()) for where, found in figures.items())
    print(f"\n{size} {palette}\n{table}")  # the contrast figures, in the log of a verbose run
    assert not problems and not low, "\n".join(problems + low) + "\n" + table


def _check_page(window, page, where: str, size) -> list[str]:
    from tests.support import layout_checks as check

    found = []
    if (window.width(), window.height()) != size:
        found.append(f"{where}: the window is {window.width()}x{window.height()}")
    for widget in (page.search, page.overlay_box, page.ops_button, page.pin_button, page.top_button,
                   page.fit_button, page.export_button, page.legend, page.status):
        if widget.isVisible() and visible_rect(widget, window) != QRect(widget.mapTo(window, QPoint(0, 0)), widget.size()):
            found.append(f"{where}: {widget.objectName() or type(widget).__name__} is cut")
    for button in (page.ops_button, page.pin_button, page.top_button, page.fit_button, page.export_button):
        if button.isVisible() and button.width() < button.sizeHint().width():
            found.append(f"{where}: {button.text()} is narrower than its text")
    found += check.label_problems(page, where)
    found += check.contrast_problems(page, where)
    return found

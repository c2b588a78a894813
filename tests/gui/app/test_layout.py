"""Every screen works at the sizes people use: 1280x800 (and the default 1280x820) and a 1024x640 laptop.

The key tables keep their rows in view: every statistics figure, at least 6 optimizer parameters, at least
8 rows of a comparison; the tree's Name column keeps priority. Rendered offscreen; a row counts when its
whole rectangle is inside the table's viewport and that viewport is not scrolled out of the window.
"""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QScrollArea

from tests.support.guihelpers import wait_settled

SIZES = [(1024, 640), (1280, 800)]


@pytest.fixture
def trained(tmp_path):
    """Training checkpoints of an 8-parameter MLP, 3 and 6 Adam steps in."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32),
                                torch.nn.ReLU(), torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 20), torch.randint(0, 4, (32,))
    paths = []
    for steps in (3, 3):
        for _ in range(steps):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        path = tmp_path / f"ckpt{len(paths)}.pt"
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 1}, path)
        paths.append(str(path))
    return paths


def rows_in_view(table) -> int:
    """Rows wholly visible: inside the table's viewport, with the viewport itself inside the window."""
    viewport = table.viewport()
    window = viewport.window()
    shown = QRect(viewport.mapTo(window, QPoint(0, 0)), viewport.size()).intersected(window.rect())
    area = viewport.parentWidget()
    while area is not None and not isinstance(area, QScrollArea):
        area = area.parentWidget()
    if area is not None:  # a side panel's scroll area clips what is scrolled away
        clip = area.viewport()
        shown = shown.intersected(QRect(clip.mapTo(window, QPoint(0, 0)), clip.size()))
    count = 0
    for row in range(table.model().rowCount()):
        rect = table.visualRect(table.model().index(row, 0))
        rect = QRect(viewport.mapTo(window, rect.topLeft()), rect.size())
        if not table.isRowHidden(row) and shown.contains(rect.topLeft()) and shown.contains(rect.bottomLeft()):
            count += 1
    return count


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_statistics_and_optimizer_tables_keep_their_rows(qtbot, window, trained, size) -> None:
    window.resize(*size)
    (tab,) = window.open_paths([trained[0]])
    wait_settled(qtbot, tab)
    stats = tab.show_panel("Statistics")
    with qtbot.waitSignal(stats.statsReady, timeout=10_000):
        tab.select_name("model.0.weight")
    assert stats.table.rowCount() == 11
    # Layouts settle in the event loop: wait for the state (a far deadline), never for a fixed time.
    qtbot.waitUntil(lambda: rows_in_view(stats.table) == 11, timeout=5000)  # +Inf and −Inf included
    optimizer = tab.panel("Optimizer")
    with qtbot.waitSignal(optimizer.figuresReady, timeout=10_000):
        tab.show_panel("Optimizer")
    assert optimizer.params_table.rowCount() == 8
    qtbot.waitUntil(lambda: rows_in_view(optimizer.params_table) >= 6, timeout=5000)
    header = tab.tree.header()
    assert header.sectionSize(0) >= 0.4 * tab.tree.viewport().width()  # Name keeps priority
    assert window.height() == size[1]  # the window can be as short as the screen


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_comparison_table_keeps_eight_rows(qtbot, window, trained, size) -> None:
    from ckptview.gui.compare.tab import open_diff

    window.resize(*size)
    view = open_diff(window, trained[0], trained[1])
    with qtbot.waitSignal(view.finished, timeout=20_000):
        pass
    assert view.model.rowCount() >= 8
    qtbot.waitUntil(lambda: rows_in_view(view.table) >= 8, timeout=5000)


def test_the_summary_header_collapses_and_the_choice_is_remembered(qtbot, window, trained) -> None:
    window.resize(1024, 640)
    (tab,) = window.open_paths([trained[0]])
    wait_settled(qtbot, tab)
    qtbot.waitUntil(lambda: tab.tree.isVisible() and tab.tree.height() > 150, timeout=5000)  # laid out
    tall = tab.tree.height()
    assert not tab.summary.collapsed
    qtbot.mouseClick(tab.summary.toggle, pytest.importorskip("PySide6.QtCore").Qt.MouseButton.LeftButton)
    assert tab.summary.collapsed and not tab.summary.body.isVisible()
    qtbot.waitUntil(lambda: tab.tree.height() > tall + 60, timeout=5000)  # the room (~80 px) goes to the tree
    assert "tensors" in tab.summary.toggle.text()  # collapsed, the toggle still says what the file is
    (second,) = window.open_paths([trained[1]])
    wait_settled(qtbot, second)
    assert second.summary.collapsed  # remembered for the next tab (and the next run)
    assert window.settings.flag("tab/summary_collapsed")

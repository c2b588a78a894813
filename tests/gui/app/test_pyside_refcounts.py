"""The installed PySide6 keeps Python's reference counts: 6.12.0 on Python < 3.12 dropped one reference to
`True` per `Signal(bool).emit` and one to `None` per void call, and the process aborted in bool_dealloc.

Each loop checks the count every few calls and stops at the first fall, so a leaking build is a red test
(with the version in the message) long before the count reaches zero and kills the interpreter.
"""

from __future__ import annotations

import gc
import sys

import pytest
from PySide6.QtCore import QEvent, QObject, Signal
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QTreeWidget,
    QTreeWidgetItem,
)

from tests.support.guihelpers import make_state_dict, wait_settled

CALLS, CHECK_EVERY = 5000, 25
DRIFT = 500  # references legitimately freed during a soak (tabs, panels, caches); a leak is thousands
LEAK_OF_20000 = 40_000  # what the leaking build lost filling a 20,000-row table (two calls a row)


def _pyside_version() -> str:
    import PySide6

    return f"PySide6 {PySide6.__version__} on Python {sys.version.split()[0]}"


def _no_fall(obj: object, call, what: str) -> None:
    """Run `call(i)` CALLS times; fail as soon as `sys.getrefcount(obj)` falls by one per call in a batch.

    Other objects holding `obj` may be freed meanwhile (a few references, not one per call): a leak is a
    fall of at least half the batch, or a net fall over all the calls of a tenth of them. The collector is
    emptied first and held off while counting: a collection in the middle would free whatever earlier tests
    left behind, with its references to None and True, and read as a fall.
    """
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        first = sys.getrefcount(obj)
        for start in range(0, CALLS, CHECK_EVERY):
            before = sys.getrefcount(obj)
            for i in range(start, start + CHECK_EVERY):
                call(i)
            after = sys.getrefcount(obj)
            assert before - after < CHECK_EVERY // 2, (
                f"{what} dropped {before - after} references to {obj!r} in {CHECK_EVERY} calls "
                f"({_pyside_version()}): this build would abort the window")
        assert first - sys.getrefcount(obj) < CALLS // 10, f"{what}: {obj!r} lost references ({_pyside_version()})"
    finally:
        if enabled:
            gc.enable()


def _free_what_earlier_tests_left() -> None:
    """Free now what earlier tests left for deletion (their windows' widgets and wrappers, with the rows they
    held), then what is left to the collector: freed by a test's own event loop mid-count, it reads as a fall."""
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)
    gc.collect()


class _Emitter(QObject):
    flag = Signal(bool)
    nothing = Signal()
    value = Signal(object)


def test_signal_emit_keeps_true_and_none(qtbot):
    emitter = _Emitter()
    seen = [0]

    def count(*_args) -> None:  # keeps no reference to what it receives
        seen[0] += 1

    emitter.flag.connect(count)
    emitter.nothing.connect(count)
    emitter.value.connect(count)
    _no_fall(True, lambda i: emitter.flag.emit(True), "Signal(bool).emit(True)")
    _no_fall(False, lambda i: emitter.flag.emit(False), "Signal(bool).emit(False)")
    _no_fall(None, lambda i: emitter.nothing.emit(), "Signal().emit()")
    _no_fall(None, lambda i: emitter.value.emit(None), "Signal(object).emit(None)")
    assert seen[0] == 4 * CALLS


def test_void_qt_methods_keep_none(qtbot):
    table = QTableWidget(10, 3)
    label = QLabel()
    tree = QTreeWidget()
    for widget in (table, label, tree):
        qtbot.addWidget(widget)
    _no_fall(None, lambda i: table.setItem(i % 10, i % 3, QTableWidgetItem(str(i))), "QTableWidget.setItem")
    _no_fall(None, lambda i: label.setToolTip(f"tip {i}"), "QWidget.setToolTip")
    _no_fall(None, lambda i: label.setText(str(i)), "QLabel.setText")
    _no_fall(None, lambda i: label.setVisible(i % 2 == 0), "QWidget.setVisible")
    _no_fall(True, lambda i: label.setEnabled(True), "QWidget.setEnabled(True)")
    _no_fall(None, lambda i: tree.addTopLevelItem(QTreeWidgetItem([str(i)])) if i < 500 else tree.clear(),
             "QTreeWidget.addTopLevelItem/clear")


@pytest.mark.slow
def test_selecting_2000_rows_keeps_the_window_alive(qtbot, window, tmp_path):
    """A soak: 2,000 selections drive the detail panel and every registered panel (signals, tables, tips)."""
    from ckptview.gui.app.main_window import example_path
    from ckptview.gui.base.workers import wait_for_workers

    [example] = window.open_paths([example_path()])
    [model_tab] = window.open_paths([make_state_dict(str(tmp_path / "model.pth"))])
    for tab in (example, model_tab):
        wait_settled(qtbot, tab)
        assert tab.state == "ready", tab.error_text
    rows = {}
    for tab in (example, model_tab):
        window.tabs.setCurrentWidget(tab)
        tab.expand_all()
        rows[tab] = []
        index = tab.model.index(0, 0)
        while index.isValid():  # every visible row, top to bottom, as the Down key walks them
            rows[tab].append(index)
            index = tab.tree.indexBelow(index)
        assert len(rows[tab]) > 5
        for row in rows[tab]:  # once over every row first: panels built, caches filled, first reads done
            tab.tree.setCurrentIndex(row)
    # Counted with nothing in flight: a worker's temporaries (a parsed config, a batch of results) are
    # references that go when it ends, and read as a fall if they are counted at the start (759 were, once).
    wait_for_workers(30_000)
    qtbot.wait(10)
    _free_what_earlier_tests_left()
    true_refs, none_refs = sys.getrefcount(True), sys.getrefcount(None)
    selected = 0
    for tab in (example, model_tab):
        window.tabs.setCurrentWidget(tab)
        for i in range(1000):
            tab.tree.setCurrentIndex(rows[tab][i % len(rows[tab])])
            selected += 1
            if i % 50 == 0:
                qtbot.wait(1)  # let queued worker signals arrive, as they do between clicks
    assert selected == 2000
    wait_for_workers(30_000)
    qtbot.wait(10)
    gc.collect()  # the soak's own cyclic garbage, as at the start
    assert window.isVisible() and example.state == "ready" and model_tab.state == "ready"
    assert example.selected_rows() and model_tab.selected_rows()
    # The leaking build lost one reference per signal: thousands here, far beyond any legitimate drift.
    assert sys.getrefcount(True) > true_refs - DRIFT, _pyside_version()
    assert sys.getrefcount(None) > none_refs - DRIFT, _pyside_version()


@pytest.mark.slow
def test_a_20000_entry_dict_builds_its_training_panel(qtbot, window, tmp_path):
    """The Training card fills a 20,000-row table (40,000 setItem/setToolTip calls) as the tab opens."""
    import torch

    path = str(tmp_path / "metrics.pt")
    torch.save({f"metric_{i}": float(i) for i in range(20_000)}, path)
    _free_what_earlier_tests_left()
    none_refs, true_refs = sys.getrefcount(None), sys.getrefcount(True)
    [tab] = window.open_paths([path])
    wait_settled(qtbot, tab, timeout=120_000)
    assert tab.state == "ready", tab.error_text
    titles = [tab.side_tabs.tabText(i) for i in range(tab.side_tabs.count())]
    if "Training" in titles:
        tab.side_tabs.setCurrentIndex(titles.index("Training"))
        qtbot.wait(10)
        assert tab.side_tabs.currentWidget().widget().objectName() != "panelPlaceholder"
    assert window.isVisible() and tab.select_name("metric_19999")
    # The leak lost one reference a call, 40,000 here; what the open itself frees (the reader's tree, caches
    # an earlier test filled) is a few thousand at most.
    assert sys.getrefcount(None) > none_refs - LEAK_OF_20000 // 4, _pyside_version()
    assert sys.getrefcount(True) > true_refs - LEAK_OF_20000 // 4, _pyside_version()

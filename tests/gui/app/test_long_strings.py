"""No string from a file reaches Qt whole: a 90 MB tensor name stopped the window for 95 s (issue 24, #20).

The header is parsed off the GUI thread; what still ran on it was Qt laying out the one huge string (the
tree's column widths, the side panels' tables, labels and tooltips). Every text the window hands to Qt
from a file is elided to a bounded length first; the test walks every widget and model the window shows
and checks the length of each string it finds.
"""

from __future__ import annotations

import json
import re
import struct

import pytest
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QApplication,
    QComboBox,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPlainTextEdit,
    QTabBar,
    QTextEdit,
    QWidget,
)

from ckptview.gui.base.workers import wait_for_workers
from tests.support.guihelpers import wait_settled

HUGE = 200_000  # laid out whole, a name 450 times longer stopped the window for 95 s; elided, nothing
BOUND = 16_384  # the longest string the window may hand to Qt for it (labels joining a few fields)


def _file(path, kind: str) -> tuple[str, str]:
    """A safetensors file with one huge name (`name`) or one huge __metadata__ value (`metadata`)."""
    huge = "layers." + "w" * HUGE + ".weight"
    ordinary = {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}
    if kind == "name":  # and a broken entry named after it: a warning in the banner quotes the name
        # One value: the Training card lists one-element tensors as facts of the run.
        header = {huge: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "bias": ordinary,
                  huge + "2": {"dtype": "F32", "shape": [2], "data_offsets": [800, 808]}}
    else:
        header = {"__metadata__": {"format": "pt", "note": huge, huge: "x"},
                  "weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "bias": ordinary}
    raw = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + bytes(16))
    return str(path), huge


def _model_texts(model, parent: QModelIndex | None = None, depth: int = 0) -> list[str]:
    parent = QModelIndex() if parent is None else parent
    texts: list[str] = []
    for row in range(min(model.rowCount(parent), 200)):
        for column in range(model.columnCount(parent)):
            index = model.index(row, column, parent)
            for role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.StatusTipRole):
                value = model.data(index, role)
                if isinstance(value, str):
                    texts.append(value)
        first = model.index(row, 0, parent)
        if depth < 6:
            if model.canFetchMore(first):
                model.fetchMore(first)
            texts += _model_texts(model, first, depth + 1)
    return texts


def shown_texts(root: QWidget) -> dict[str, str]:
    """Every string the window holds in its widgets and item models, keyed by where it was found."""
    found: dict[str, str] = {}
    for widget in [root, *root.findChildren(QWidget)]:
        where = f"{type(widget).__name__}:{widget.objectName()}"
        texts = {"tooltip": widget.toolTip(), "title": widget.windowTitle(), "status": widget.statusTip()}
        if isinstance(widget, QLabel | QAbstractButton | QLineEdit):
            texts["text"] = widget.text()
        if isinstance(widget, QTextEdit | QPlainTextEdit):
            texts["text"] = widget.toPlainText()
        if isinstance(widget, QTabBar):
            for i in range(widget.count()):
                texts[f"tab{i}"], texts[f"tabtip{i}"] = widget.tabText(i), widget.tabToolTip(i)
        if isinstance(widget, QComboBox):
            for i in range(widget.count()):
                texts[f"item{i}"] = widget.itemText(i)
        if isinstance(widget, QAbstractItemView) and not isinstance(widget, QHeaderView) and widget.model() is not None:
            for i, text in enumerate(_model_texts(widget.model())):
                texts[f"cell{i}"] = text
        if isinstance(widget, QMainWindow):
            texts["statusbar"] = widget.statusBar().currentMessage()
        for key, text in texts.items():
            if text:
                found[f"{where}.{key}"] = text
    return found


@pytest.mark.parametrize("kind", ["name", "metadata"])
def test_no_string_from_the_file_reaches_qt_whole(qtbot, window, settings, tmp_path, kind):
    settings.set_header_ask_bytes(1 << 40)  # no question first: the header is opened at once
    path, huge = _file(tmp_path / f"{kind}.safetensors", kind)
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab, timeout=60_000)
    assert tab.state == "ready", tab.error_text
    if kind == "name":
        assert tab.select_name("layers." + huge[7:]), "the tensor with the huge name is listed"
    else:
        assert tab.select_name("weight")
    for i in range(tab.side_tabs.count()):  # every side panel shown once, as a user would click through
        tab.side_tabs.setCurrentIndex(i)
        QApplication.processEvents()
    wait_for_workers(60_000)  # what the panels read in workers (the Training card's facts) is shown too
    QApplication.processEvents()
    tab.tree.copy_text(huge)  # the context menu's "Copy name": the status bar says what was copied
    assert QApplication.clipboard().text() == huge
    texts = shown_texts(window)
    too_long = sorted({re.sub(r"\d+$", "", where) for where, text in texts.items() if len(text) > BOUND})
    assert too_long == []
    assert any("more characters" in text for text in texts.values()), "the huge string is shown, elided"


def test_sorting_by_name_reads_a_bounded_key(qtbot, window, settings, tmp_path, monkeypatch):
    """Sorting by name on the GUI thread splits each name into a natural key: only its first characters."""
    from ckptview.core.text import SHOWN_CHARS
    from ckptview.gui.checkpoint import tree_model

    lengths: list[int] = []
    real = tree_model.natural_key

    def recording(text: str):
        lengths.append(len(text))
        return real(text)

    monkeypatch.setattr(tree_model, "natural_key", recording)
    settings.set_header_ask_bytes(1 << 40)
    path, huge = _file(tmp_path / "sort.safetensors", "name")
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab, timeout=60_000)
    assert tab.state == "ready", tab.error_text
    tab.model.sort(0, Qt.SortOrder.DescendingOrder)
    assert any("more characters" in text for text in _model_texts(tab.model))  # every level listed, sorted
    assert lengths and max(lengths) <= SHOWN_CHARS
    names = [tab.model.data(tab.model.index(r, 0)) for r in range(tab.model.rowCount())]
    assert names[-1] == "bias" and len(names) == 2  # 'layers' (holding both huge names) sorts after 'bias'


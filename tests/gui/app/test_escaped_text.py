"""The window shows names, values and globals from a file with their control characters escaped."""

from __future__ import annotations

import struct

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import QLabel

from tests.support.guihelpers import wait_settled

CONTROLS = {"osc": "w\x1b]0;pwned\x07", "clear": "x\x1b[2J", "newline": "a\nforged", "bidi": "abc\u202edcba",
            "cr": "hidden\rshown"}


def raw_controls(text: str) -> list[str]:
    return sorted({c for c in text if c != "\n" and c != "\u2029" and not c.isprintable()})


def hostile_file(path: str) -> str:
    """A torch zip with control characters in tensor names, value keys and values, plus a global with them."""
    import torch

    state = {name: torch.ones(2) for name in CONTROLS.values()}
    state["meta"] = {"key\x1b[2J": "value\x1b]0;x\x07\u202e"}
    torch.save(state, path)
    return path


def hostile_global_pickle(path: str) -> str:
    def text(s: str) -> bytes:
        e = s.encode()
        return b"X" + struct.pack("<I", len(e)) + e
    body = (b"\x80\x04}(" + text("a") + text("evil\x1b[2J\u202e") + text("run\r") + b"\x93)R" + b"u.")
    with open(path, "wb") as fh:
        fh.write(body)
    return path


def all_texts(model, parent: QModelIndex | None = None) -> list[str]:
    parent = QModelIndex() if parent is None else parent
    texts = []
    for row in range(model.rowCount(parent)):
        for column in range(model.columnCount(parent)):
            index = model.index(row, column, parent)
            for role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
                value = model.data(index, role)
                if isinstance(value, str):
                    texts.append(value)
        first = model.index(row, 0, parent)
        if model.canFetchMore(first):
            model.fetchMore(first)
        texts += all_texts(model, first)
    return texts


def test_tree_detail_and_banner_escape_control_characters(qtbot, window, tmp_path):
    tab = window.open_paths([hostile_file(str(tmp_path / "hostile.pth"))])[0]
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    texts = all_texts(tab.model)
    assert any("\\x1b]0;pwned\\x07" in t for t in texts)
    assert [t for t in texts if raw_controls(t)] == []
    for name in CONTROLS.values():
        assert tab.select_name(name), name
        assert raw_controls(tab.detail.toPlainText()) == [], name
    unsafe = window.open_paths([hostile_global_pickle(str(tmp_path / "globals.pkl"))])[0]
    wait_settled(qtbot, unsafe)
    assert unsafe.state == "ready", unsafe.error_text
    banner = unsafe.banner.findChild(QLabel, "bannerText").text()
    assert "evil\\x1b[2J\\u202e.run\\x0d" in banner and raw_controls(banner) == []

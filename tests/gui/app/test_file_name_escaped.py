"""A file's name reaches the window escaped by the one printable() (issue 24, finding 16).

`weights<U+202E>gnp.safetensors` was drawn as `weights...safetensors.png` in the window title, the tab,
its tooltip, the summary's File label and the status bar; a newline or ESC in a name forged lines."""

from __future__ import annotations

import struct

import pytest
from PySide6.QtWidgets import QLabel

from tests.support.guihelpers import wait_settled

NAMES = ["weights\u202egnp.safetensors", "two\nlines.safetensors", "esc\x1b[2Jape.safetensors"]


def raw_controls(text: str) -> list[str]:
    return sorted({c for c in text if not c.isprintable()})


def safetensors_bytes() -> bytes:
    header = b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'
    return struct.pack("<Q", len(header)) + header + b"\0" * 8


def shown_texts(window, tab) -> dict[str, str]:
    index = window.tabs.indexOf(tab)
    texts = {"title": window.windowTitle(), "tab": window.tabs.tabText(index),
             "tooltip": window.tabs.tabToolTip(index), "status": window.statusBar().currentMessage()}
    summary = tab.findChild(QLabel, "fact_file")
    if summary is not None:
        texts["summary"] = summary.text()
        texts["summary tooltip"] = summary.toolTip()
    for i, label in enumerate(tab.findChildren(QLabel)):
        texts[f"label {i}"] = label.text()
    return texts


@pytest.mark.parametrize("name", NAMES)
def test_a_file_name_with_controls_is_escaped_everywhere_the_window_shows_it(qtbot, window, tmp_path, name):
    path = tmp_path / name
    path.write_bytes(safetensors_bytes())
    tab = window.open_paths([str(path)])[0]
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    texts = shown_texts(window, tab)
    assert "summary" in texts
    assert {k: v for k, v in texts.items() if raw_controls(v)} == {}
    escaped = name.replace("\u202e", "\\u202e").replace("\n", "\\x0a").replace("\x1b", "\\x1b")
    assert escaped in texts["title"] and escaped in texts["tab"] and escaped in texts["summary"]
    assert escaped in texts["status"]


def test_a_file_that_fails_to_open_is_named_escaped(qtbot, window, tmp_path):
    path = tmp_path / "bad\u202etxt.safetensors"
    path.write_bytes(b"not a checkpoint at all")
    tab = window.open_paths([str(path)])[0]
    wait_settled(qtbot, tab)
    assert tab.state == "error"
    texts = shown_texts(window, tab)
    assert {k: v for k, v in texts.items() if raw_controls(v)} == {}


def test_a_comparison_tab_names_its_files_escaped(qtbot, window, tmp_path):
    from ckptview.gui.compare.tab import open_diff

    a, b = tmp_path / "a\u202egnp.safetensors", tmp_path / "b\nforged.safetensors"
    a.write_bytes(safetensors_bytes())
    b.write_bytes(safetensors_bytes())
    view = open_diff(window, str(a), str(b))
    with qtbot.waitSignal(view.finished, timeout=20_000):
        pass
    index = window.tabs.indexOf(view)
    assert raw_controls(window.tabs.tabText(index)) == [] and "\\u202e" in window.tabs.tabText(index)
    tip = window.tabs.tabToolTip(index).split("\n")
    assert len(tip) == 2 and tip[0].startswith("A: ") and "b\\x0aforged" in tip[1]
    assert all(raw_controls(line) == [] for line in tip)

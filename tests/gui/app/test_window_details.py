"""Small things a desktop app gets right (issue 35, finding 8): Escape clears the filter; no tab open shows a
start page, not a blank grey window; files of one name in different folders get distinct titles; a NaN
counted for the whole model is marked on the tensor, and its module rows, that hold it."""

from __future__ import annotations

import math
import os

import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from tests.support.guihelpers import make_state_dict, wait_settled


def opened(qtbot, window, path):
    (tab,) = window.open_paths([str(path)])
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    return tab


def test_escape_clears_the_filter(qtbot, window, state_dict_file):
    tab = opened(qtbot, window, state_dict_file)
    tab.filter.set_text("q_proj")
    assert tab.model.filtered and tab.model.match_count == 3
    tab.filter_edit.setFocus()
    qtbot.keyClick(tab.filter_edit, Qt.Key.Key_Escape)
    assert tab.filter_edit.text() == "" and not tab.model.filtered
    tab.filter.set_text("q_proj")
    tab.tree.setFocus()
    qtbot.keyClick(tab.tree, Qt.Key.Key_Escape)  # from the tree too, where the matches are looked at
    assert tab.filter_edit.text() == "" and not tab.model.filtered


def test_no_tab_open_shows_a_start_page(qtbot, window, state_dict_file, tmp_path):
    from ckptview.gui.app.main_window import example_path

    assert window.start_page.isVisible()  # nothing opened yet
    texts = " ".join(b.text() for b in window.start_page.findChildren(QPushButton))
    for words in ("Open…", "Open Series…", "Open URL…", "Open the example"):
        assert words in texts, texts
    assert "Drop" in window.start_page.hint.text()
    tab = opened(qtbot, window, state_dict_file)
    assert not window.start_page.isVisible() and window.tabs.isVisible()
    window.close_current_tab()
    assert window.start_page.isVisible() and window.windowTitle() == "ckptview"
    recent = window.start_page.recent_buttons()
    assert [b.toolTip() for b in recent] == [state_dict_file]  # the recent file, by its whole path
    qtbot.mouseClick(recent[0], Qt.MouseButton.LeftButton)
    tab = window.current_tab()
    assert tab is not None and tab.path == state_dict_file and not window.start_page.isVisible()
    window.close_current_tab()
    qtbot.mouseClick(window.start_page.example_button, Qt.MouseButton.LeftButton)
    assert window.current_tab().path == os.path.abspath(example_path())


def test_files_of_one_name_get_distinct_titles(qtbot, window, tmp_path):
    paths = []
    for parent in ("run_a/ckpt", "run_b/ckpt", "run_b/best"):
        os.makedirs(tmp_path / parent)
        paths.append(make_state_dict(str(tmp_path / parent / "model.pth")))
    first = opened(qtbot, window, paths[0])
    assert window.tabs.tabText(window.tabs.indexOf(first)) == "model.pth"
    tabs = [first] + [opened(qtbot, window, p) for p in paths[1:]]
    titles = [window.tabs.tabText(window.tabs.indexOf(t)) for t in tabs]
    sep = os.sep
    assert titles == [f"run_a{sep}ckpt{sep}model.pth", f"run_b{sep}ckpt{sep}model.pth", f"best{sep}model.pth"]
    assert [window.tabs.tabToolTip(window.tabs.indexOf(t)) for t in tabs] == paths  # the whole path
    assert window.windowTitle() == f"best{sep}model.pth — ckptview"
    window.close_tab(window.tabs.indexOf(tabs[1]))
    titles = [window.tabs.tabText(window.tabs.indexOf(t)) for t in (tabs[0], tabs[2])]
    assert titles == [f"ckpt{sep}model.pth", f"best{sep}model.pth"]


def test_a_nan_counted_for_the_model_is_marked_where_it_is(qtbot, window, tmp_path):
    from ckptview.gui.checkpoint.tree_model import NONFINITE_ROLE
    from ckptview.gui.panels.statistics import StatsPanel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    state = model.state_dict()
    state["2.weight"][1, 3] = math.nan
    state["2.weight"][0, 0] = math.inf
    path = tmp_path / "model.pt"
    torch.save({"model": state, "step": 3}, path)
    tab = opened(qtbot, window, path)
    panel = tab.show_panel("Statistics")
    assert isinstance(panel, StatsPanel)
    with qtbot.waitSignal(panel.statsReady, timeout=20_000):
        assert tab.select_name("model")  # the whole model: one NaN and one +Inf among its tensors
    assert panel.figures()["nan"].startswith("1 ") and panel.figures()["posinf"].startswith("1 ")
    model_rows = {name: tab.model.index_of(row) for name, row in
                  ((n, r) for r in tab.top.walk() for n in [r.name]) if name.startswith("model")}

    def marks(name):
        return tab.model.data(model_rows[name], NONFINITE_ROLE)

    qtbot.waitUntil(lambda: marks("model.2.weight") is not None, timeout=20_000)
    assert marks("model.2.weight") == (1, 1)  # (NaN, ±Inf) of the tensor
    assert marks("model.2") == (1, 1) and marks("model") == (1, 1)  # its module rows
    assert marks("model.0.weight") is None and marks("model.2.bias") is None
    index = model_rows["model.2.weight"]
    assert "1 NaN" in tab.model.data(index, Qt.ItemDataRole.ToolTipRole)
    assert tab.model.data(index, Qt.ItemDataRole.ForegroundRole) is not None


def test_retitling_checks_no_file_but_the_current_tabs(qtbot, window, tmp_path, monkeypatch):
    """Opening or closing a tab retitles every tab; only a tab becoming current compares its file with the
    disk (a stat each): retitling 150 tabs must not stat the tab that was current before."""
    from ckptview.gui.checkpoint.tab import CheckpointTab

    paths = [make_state_dict(str(tmp_path / f"m{i}.pth")) for i in range(3)]
    window._poll_timer.stop()  # the poll of open files (every second) is not what is counted here
    first = opened(qtbot, window, paths[0])
    checked: list[str] = []
    real = CheckpointTab.check_file
    monkeypatch.setattr(CheckpointTab, "check_file", lambda self: checked.append(self.path) or real(self))
    second = opened(qtbot, window, paths[1])
    assert checked == [second.path]  # the new current tab, once; the one before is left alone
    checked.clear()
    window.close_tab(window.tabs.indexOf(second))
    assert checked == [first.path]
    assert window.windowTitle() == "m0.pth — ckptview"


def test_the_filter_box_says_its_language_whole_at_1024_px(qtbot, window, state_dict_file):
    """The placeholder (figures and sort: included) is read whole in a 1024 px window; the tooltip lists every
    kind of term, every figure name among them."""
    from ckptview.core.inspect.figure_terms import FIGURE_LABELS

    window.resize(1024, 640)
    tab = opened(qtbot, window, state_dict_file)
    edit = tab.filter_edit
    qtbot.waitUntil(lambda: window.width() == 1024, timeout=5_000)
    text = edit.placeholderText()
    assert "nan>0" in text and "sort:" in text and "Esc" in text
    room = edit.contentsRect().width() - 2 * edit.textMargins().left() - 8  # the frame's own padding
    assert edit.fontMetrics().horizontalAdvance(text) <= room, (edit.width(), text)
    tip = edit.toolTip()
    for word in ("*.q_proj.weight", "768x3072", "bf16", ">10MB", "device:cuda", "sort:-norm", "alpha<2"):
        assert word in tip, word
    named = {"l2": "norm", "abs_max": "absmax", "stable_rank": "stable_rank", "spectral_norm": "spectral_norm"}
    for figure in FIGURE_LABELS:
        if figure not in ("posinf", "neginf", "numel"):  # inf counts both; elements is the shape's
            assert named.get(figure, figure) in tip, figure

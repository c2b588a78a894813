"""The main window, driven through real widgets: every way in, filter, sort, detail, errors, panels."""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QFileOpenEvent, QGuiApplication
from PySide6.QtWidgets import QApplication, QLabel, QWidget

from ckptview.cli import window_args
from ckptview.gui.app.launch import launch
from ckptview.gui.app.main_window import ACTIONS, PANELS, ActionSpec, MainWindow, example_path
from ckptview.gui.app.single_instance import send_to_running
from ckptview.gui.checkpoint.host import CheckpointContext, PanelSpec
from ckptview.gui.checkpoint.tab import CheckpointTab
from ckptview.gui.checkpoint.tree_model import DTYPE, NAME, PARAMS, SIZE
from ckptview.gui.compare.tab import CompareTab
from tests.support.guihelpers import make_sharded_folder, make_state_dict, wait_settled


def open_one(qtbot, window: MainWindow, path: str) -> CheckpointTab:
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab)
    return tab


def visible_names(tab: CheckpointTab) -> list[str]:
    """Contract names of every leaf row the view can show (expanding as a person would)."""
    tab.tree.expandAll()
    model, out = tab.model, []
    stack = [model.index(r, 0) for r in range(model.rowCount())]
    while stack:
        index = stack.pop()
        row = model.row_of(index)
        if model.hasChildren(index):
            while model.canFetchMore(index):
                model.fetchMore(index)
            stack.extend(model.index(r, 0, index) for r in range(model.rowCount(index)))
        else:
            out.append(row.name)
    return sorted(out)


def test_open_paths_shows_the_tree(qtbot, window, state_dict_file):
    tab = open_one(qtbot, window, state_dict_file)
    assert tab.state == "ready", tab.error_text
    assert window.tabs.tabText(window.tabs.indexOf(tab)) == "model.pth"
    assert window.tabs.tabToolTip(window.tabs.indexOf(tab)) == os.path.abspath(state_dict_file)
    top_labels = [tab.model.index(r, 0).data() for r in range(tab.model.rowCount())]
    assert top_labels == ["encoder", "decoder", "lm_head", "step"]
    encoder = tab.model.index(0, 0)
    assert tab.model.index(0, PARAMS).data() == f"{8 * 16 + 8 + 8 * 16 + 32 * 16 + 768 * 16:,}"
    assert tab.model.data(encoder.siblingAtColumn(SIZE)) == "26.0 KiB"  # 264*4 + 512*2 + 12288*2 bytes
    assert tab.summary.facts["Tensors"] == "8"
    params = 8 * 16 + 8 + 8 * 16 + 32 * 16 + 768 * 16 + 100 * 16  # lm_head is tied: counted once
    assert tab.summary.facts["Parameters"] == f"{params:,}"
    assert tab.summary.facts["Buffers"] == "1"  # the int64 step counter: not a parameter
    assert window.settings.recent_files() == [os.path.abspath(state_dict_file)]
    # Opening the same file again switches to its tab instead of opening a second one.
    window.tabs.setCurrentIndex(0)
    assert window.open_paths([state_dict_file]) == [tab] and window.tabs.count() == 1


def test_open_by_argument_and_second_instance(qtbot, settings, server_name, state_dict_file, tmp_path):
    window = launch(window_args([state_dict_file]), settings, server_name)
    assert window is not None
    qtbot.addWidget(window)
    wait_settled(qtbot, window.current_tab())
    assert window.current_tab().state == "ready"
    other = make_state_dict(str(tmp_path / "second.pt"))
    # A second launch with the same server name hands its path over and exits.
    assert launch(window_args([other]), settings, server_name) is None
    qtbot.waitUntil(lambda: window.tabs.count() == 2, timeout=5000)
    assert window.current_tab().path == os.path.abspath(other)
    wait_settled(qtbot, window.current_tab())
    assert send_to_running([], server_name)  # a bare second launch only raises the window
    window.close()


def test_no_file_opens_the_bundled_example(qtbot, settings, server_name):
    window = launch(window_args([]), settings, server_name)
    qtbot.addWidget(window)
    tab = window.current_tab()
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    assert tab.path == os.path.abspath(example_path())
    names = visible_names(tab)
    assert "model_state_dict.hidden.weight" in names and "optimizer_state_dict.state.0.exp_avg" in names
    assert "epoch" in names and "loss" in names
    assert window.settings.recent_files() == []  # the example is not a recent file
    window.close()


@pytest.mark.filterwarnings("ignore:Function.*QDragEnterEvent:DeprecationWarning")
def test_drop_and_file_open_event(qtbot, window, state_dict_file, tmp_path):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(state_dict_file)])
    buttons, mods = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(50, 50), Qt.DropAction.CopyAction, mime, buttons, mods)
    window.event(enter)  # QApplication only routes drops while a real drag runs; deliver to the widget
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(50, 50), Qt.DropAction.CopyAction, mime, buttons, mods)
    window.event(drop)
    assert drop.isAccepted()
    text_only = QMimeData()
    text_only.setText("not a file")
    refused = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, text_only, buttons, mods)
    window.event(refused)
    assert not refused.isAccepted()
    qtbot.waitUntil(lambda: window.tabs.count() == 1)
    wait_settled(qtbot, window.current_tab())
    assert window.current_tab().path == os.path.abspath(state_dict_file)

    from ckptview.gui.app.launch import FileOpenFilter

    other = make_state_dict(str(tmp_path / "mac.pth"))
    file_filter = FileOpenFilter(window)
    file_filter.paths_received.connect(window.open_paths)
    QApplication.instance().installEventFilter(file_filter)
    try:
        QApplication.sendEvent(QApplication.instance(), QFileOpenEvent(other))
    finally:
        QApplication.instance().removeEventFilter(file_filter)
    assert window.tabs.count() == 2 and window.current_tab().path == os.path.abspath(other)
    wait_settled(qtbot, window.current_tab())


def test_filter_by_name_shape_dtype_and_size(qtbot, window, state_dict_file):
    tab = open_one(qtbot, window, state_dict_file)
    all_names = visible_names(tab)
    assert len(all_names) == 8
    cases = {
        "q_proj": ["encoder.layers.0.attn.q_proj.bias", "encoder.layers.0.attn.q_proj.weight",
                   "encoder.layers.1.attn.q_proj.weight"],
        "8x16": ["encoder.layers.0.attn.q_proj.weight", "encoder.layers.1.attn.q_proj.weight"],
        "*x16 float16": ["encoder.layers.1.mlp.fc.weight"],
        "bfloat16": ["encoder.layers.10.mlp.fc.weight"],
        ">6KB": ["decoder.embed.weight", "encoder.layers.10.mlp.fc.weight", "lm_head.weight"],
        "int64": ["step"],
    }
    for text, expected in cases.items():
        qtbot.keyClicks(tab.filter_edit, text)
        tab.apply_filter()  # skip the typing debounce
        assert visible_names(tab) == expected, text
        assert tab.match_label.text().startswith(f"{len(expected)} of 8")
        tab.filter_edit.clear()
    tab.apply_filter()
    assert visible_names(tab) == all_names
    qtbot.keyClicks(tab.filter_edit, "/[bad/")
    qtbot.waitUntil(lambda: "regular expression" in tab.match_label.text())
    assert visible_names(tab) == all_names  # a bad query leaves the tree as it was


def test_filter_fires_after_typing(qtbot, window, state_dict_file):
    tab = open_one(qtbot, window, state_dict_file)
    qtbot.keyClicks(tab.filter_edit, "lm_head")
    qtbot.waitUntil(lambda: tab.model.filtered, timeout=30_000)
    assert visible_names(tab) == ["lm_head.weight"]
    window.menus.find_action.trigger()  # Ctrl+F focuses and selects the filter box
    assert tab.filter_edit.selectedText() == "lm_head"


def test_sort_by_columns(qtbot, window, state_dict_file):
    tab = open_one(qtbot, window, state_dict_file)
    model = tab.model
    layers = model.index_of(next(r for r in tab.top.walk() if r.name == "encoder.layers"))
    tab.tree.expand(layers)
    file_order = [model.index(r, 0, layers).data() for r in range(model.rowCount(layers))]
    assert file_order == ["0", "1", "10"]
    tab.tree.sortByColumn(NAME, Qt.SortOrder.DescendingOrder)
    layers = model.index_of(next(r for r in tab.top.walk() if r.name == "encoder.layers"))
    assert [model.index(r, 0, layers).data() for r in range(model.rowCount(layers))] == ["10", "1", "0"]
    assert tab.tree.isExpanded(layers)  # sorting keeps expansion
    tab.tree.sortByColumn(SIZE, Qt.SortOrder.DescendingOrder)
    top = [model.index(r, 0).data() for r in range(model.rowCount())]
    assert top == ["encoder", "decoder", "lm_head", "step"]  # 26.0 KiB, 6.2 KiB, 6.2 KiB, 8 B
    tab.tree.sortByColumn(DTYPE, Qt.SortOrder.AscendingOrder)
    assert [model.index(r, 0).data() for r in range(model.rowCount())][:2] == ["encoder", "decoder"]
    assert model.index(model.rowCount() - 1, 0).data() == "step"  # int64 sorts after float32
    header = tab.tree.header()
    size_x = header.sectionViewportPosition(SIZE) + header.sectionSize(SIZE) // 2
    for _ in range(3):  # ascending, descending, then back to file order
        qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(size_x, 5))
    assert header.sortIndicatorSection() == -1
    assert [model.index(r, 0).data() for r in range(model.rowCount())] == ["encoder", "decoder", "lm_head", "step"]
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(size_x, 5))
    assert [model.index(r, 0).data() for r in range(model.rowCount())][0] == "step"  # ascending size


def test_detail_panel_and_sharing_links(qtbot, window, state_dict_file):
    tab = open_one(qtbot, window, state_dict_file)
    assert tab.select_name("decoder.embed.weight")
    text = tab.detail.toPlainText()
    for expected in ("decoder.embed.weight", "100 × 16", "[16, 1]", "float32", "6,400 bytes", "cpu",
                     "Storage key", "Shares storage with", "lm_head.weight"):
        assert expected in text, expected
    assert "lm_head.weight" in tab.detail.toHtml() and "tensor:lm_head.weight" in tab.detail.toHtml()
    tab.detail.anchorClicked.emit(QUrl("tensor:lm_head.weight"))
    assert tab.model.row_of(tab.tree.currentIndex()).name == "lm_head.weight"
    assert tab.select_name("step")
    assert "scalar" in tab.detail.toPlainText() and "int64" in tab.detail.toPlainText()


def test_context_menu_copies_name_and_shape(qtbot, window, state_dict_file):
    tab = open_one(qtbot, window, state_dict_file)
    tab.select_name("encoder.layers.10.mlp.fc.weight")
    menu = tab.tree.build_context_menu(tab.tree.currentIndex())
    actions = {a.text(): a for a in menu.actions()}
    actions["Copy name"].trigger()
    assert QGuiApplication.clipboard().text() == "encoder.layers.10.mlp.fc.weight"
    actions["Copy shape"].trigger()
    assert QGuiApplication.clipboard().text() == "[768, 16]"
    menu.deleteLater()


def test_broken_file_shows_error_and_other_tabs_survive(qtbot, window, state_dict_file, tmp_path):
    good = open_one(qtbot, window, state_dict_file)
    junk = tmp_path / "junk.pth"
    junk.write_bytes(os.urandom(4096))
    bad = open_one(qtbot, window, str(junk))
    assert bad.state == "error"
    assert "not a checkpoint" in bad.error_label.text()
    assert bad.error_label.isVisible()
    truncated = tmp_path / "truncated.pth"
    with open(state_dict_file, "rb") as fh:
        truncated.write_bytes(fh.read()[:40])  # inside data.pkl: nothing to salvage (issue 45)
    cut = open_one(qtbot, window, str(truncated))
    assert cut.state == "error" and "incomplete download" in cut.error_text
    missing = open_one(qtbot, window, str(tmp_path / "nope.pth"))
    assert missing.state == "error"
    assert window.tabs.count() == 4 and good.state == "ready"
    window.tabs.setCurrentWidget(good)
    assert good.select_name("lm_head.weight")
    assert window.settings.recent_files() == [os.path.abspath(state_dict_file)]  # failures are not recent


def test_safety_banner_names_unsafe_globals(qtbot, window, tmp_path):
    import argparse

    import torch

    path = str(tmp_path / "unsafe.pth")
    torch.save({"weight": torch.ones(2), "args": argparse.Namespace(lr=0.1)}, path)
    tab = open_one(qtbot, window, path)
    assert tab.state == "ready", tab.error_text
    assert tab.banner is not None and tab.banner.isVisible()
    text = tab.banner.findChild(QLabel, "bannerText").text()
    assert "argparse.Namespace" in text and "did not" in text


def test_keyboard_tabs_and_close(qtbot, window, state_dict_file, tmp_path):
    first = open_one(qtbot, window, state_dict_file)
    second = open_one(qtbot, window, make_state_dict(str(tmp_path / "b.pth")))
    assert window.current_tab() is second
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    qtbot.keyClick(second.tree, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier)
    assert window.current_tab() is first
    qtbot.keyClick(first.tree, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert first.filter_edit.hasFocus()
    assert window.menus.next_tab_action.shortcut().toString() == "Ctrl+Tab"
    assert window.menus.close_action.shortcut().toString() == "Ctrl+W"
    assert window.menus.open_action.shortcut().toString() == "Ctrl+O"
    window.menus.close_action.trigger()
    assert window.tabs.count() == 1 and window.current_tab() is second


def test_recent_files_persist(qtbot, settings, state_dict_file):
    from ckptview.gui.base.settings import Settings

    win = MainWindow(settings)
    qtbot.addWidget(win)
    open_one(qtbot, win, state_dict_file)
    win.resize(700, 500)
    win.close()
    again = MainWindow(Settings(settings._qs.fileName()))
    qtbot.addWidget(again)
    assert again.settings.recent_files() == [os.path.abspath(state_dict_file)]
    again.menus.fill_recent()
    entry = next(a for a in again.menus.recent_menu.actions() if a.toolTip() == os.path.abspath(state_dict_file))
    entry.trigger()
    wait_settled(qtbot, again.current_tab())
    assert again.current_tab().state == "ready"
    assert again.size().width() == 700  # geometry restored


class RecordingPanel(QWidget):
    def __init__(self, context: CheckpointContext) -> None:
        super().__init__()
        self.context, self.selections = context, []

    def set_selection(self, entries) -> None:
        self.selections.append([n.name for n in entries])


def test_listed_panels_actions_and_tabs(qtbot, settings, state_dict_file):
    calls = []
    win = MainWindow(settings, panels=[*PANELS, PanelSpec("Recorder", RecordingPanel)],
                     actions=[*ACTIONS, ActionSpec("Tools", "Record window", lambda win: calls.append(win))])
    qtbot.addWidget(win)
    tab = open_one(qtbot, win, state_dict_file)
    titles = [tab.side_tabs.tabText(i) for i in range(tab.side_tabs.count())]
    assert titles[0] == "Details" and "Recorder" in titles  # beside other engineers' panels
    panel = tab.panel("Recorder")
    assert panel.context.checkpoint is tab.checkpoint and panel.context.window is win
    panel.context.select_name("encoder.layers.1.mlp.fc.weight")
    assert panel.selections[-1] == ["encoder.layers.1.mlp.fc.weight"]
    assert win.current_selection()[0].name == "encoder.layers.1.mlp.fc.weight"
    action = next(a for a in win.menus.menu("Tools").actions() if a.text() == "Record window")
    action.trigger()
    assert calls == [win]
    index = win.add_tab(QLabel("diff"), "a ↔ b", "comparison")
    assert win.tabs.tabText(index) == "a ↔ b" and win.current_tab() is None
    win.close_tab(index)


def test_diff_flag_opens_a_comparison(qtbot, settings, server_name, state_dict_file, tmp_path):
    other = make_state_dict(str(tmp_path / "other.pth"))
    window = launch(window_args(["--diff", state_dict_file, other]), settings, server_name)
    qtbot.addWidget(window)
    view = window.tabs.currentWidget()
    assert isinstance(view, CompareTab) and (view.path_a, view.path_b) == (state_dict_file, other)
    qtbot.waitUntil(lambda: not view.busy, timeout=60_000)
    window.close()


def test_cancel_and_close_while_loading(qtbot, window, state_dict_file, tmp_path):
    (tab,) = window.open_paths([state_dict_file])
    assert tab.state == "loading" and window.progress.isVisibleTo(window)  # status-bar progress shows
    tab.cancel()
    assert tab.state == "error" and "cancelled" in tab.error_text
    other = make_state_dict(str(tmp_path / "closing.pth"))
    (closing,) = window.open_paths([other])
    window.close_current_tab()  # closed before the worker answers: its result is dropped, nothing breaks
    assert window.tab_for(other) is None
    from ckptview.gui.base.workers import wait_for_workers

    assert wait_for_workers(10_000)
    qtbot.waitUntil(lambda: not window.progress.isVisibleTo(window), timeout=30_000)


def test_shard_column_only_for_sharded_checkpoints(qtbot, window, tmp_path, state_dict_file):
    folder = make_sharded_folder(tmp_path / "sharded")
    from ckptview.gui.checkpoint.tree_model import SHARD

    tab = open_one(qtbot, window, str(folder))
    assert tab.state == "ready", tab.error_text
    assert not tab.tree.isColumnHidden(SHARD)
    assert tab.model.headerData(SHARD, Qt.Orientation.Horizontal) == "Shard"
    assert tab.select_name("b.weight")
    (index,) = [i for i in tab.tree.selectionModel().selectedRows(SHARD)]
    assert index.data() == "2 of 2"  # the number tells shards apart; the file is named in the tooltip
    assert index.data(Qt.ItemDataRole.ToolTipRole).splitlines()[0] == "model-00002-of-00002.safetensors"
    plain = open_one(qtbot, window, state_dict_file)
    assert plain.tree.isColumnHidden(SHARD)


def test_a_banner_of_warnings_only_shows_quotes_not_entities(qtbot) -> None:
    from PySide6.QtGui import QTextDocumentFragment
    from PySide6.QtWidgets import QLabel

    from ckptview.core.checkpoint import Checkpoint, Node
    from ckptview.gui.checkpoint.pages import safety_banner

    ckpt = Checkpoint(path="/x/it's.pth", format="torch-zip", file_size=0, root=Node(key="", kind="dict"))
    ckpt.warnings.append("tensor 'enc.w' is broken: <shape larger than storage> & more")
    frame = safety_banner(ckpt)
    qtbot.addWidget(frame)
    label = frame.findChild(QLabel, "bannerText")
    assert label.textFormat() == Qt.TextFormat.RichText
    shown = QTextDocumentFragment.fromHtml(label.text()).toPlainText()
    assert shown == "tensor 'enc.w' is broken: <shape larger than storage> & more"


def test_status_bar_speaks_for_the_current_tab_and_a_failed_tab_looks_failed(qtbot, window, state_dict_file,
                                                                               tmp_path) -> None:
    broken = tmp_path / "broken.pth"
    broken.write_bytes(b"<html>not a checkpoint</html>")
    good, bad = window.open_paths([state_dict_file, str(broken)])
    wait_settled(qtbot, good)
    wait_settled(qtbot, bad)
    assert bad.state == "error"
    window.tabs.setCurrentWidget(bad)
    assert "Could not open broken.pth" in window.statusBar().currentMessage()
    window.tabs.setCurrentWidget(good)
    assert "broken.pth" not in window.statusBar().currentMessage()  # not another tab's message
    icons = [window.tabs.tabIcon(window.tabs.indexOf(t)).pixmap(16, 16).toImage() for t in (good, bad)]
    assert icons[0] != icons[1]  # the failed tab has the error icon, not the file icon

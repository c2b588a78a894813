"""A checkpoint tab talks to its window only through `TabHost`: a host that records what it is asked sees
every request, a tab without a window gets `NullHost`, and `MainWindow` answers as a host."""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton, QWidget

from ckptview.core.session import Workspace
from ckptview.gui.app.main_window import PANELS
from ckptview.gui.checkpoint.host import NullHost, NullSettings
from ckptview.gui.checkpoint.tab import SUMMARY_COLLAPSED, CheckpointTab
from tests.support.guihelpers import make_state_dict, wait_settled


class RecordingSettings:
    def __init__(self, ask_above: int | None = None) -> None:
        self.ask_above = ask_above
        self.flags: dict[str, bool] = {}

    def header_ask_bytes(self) -> int | None:
        return self.ask_above

    def flag(self, key: str, default: bool = False) -> bool:
        return self.flags.get(key, default)

    def set_flag(self, key: str, value: bool) -> None:
        self.flags[key] = value

    def column_choice(self, column: str) -> bool | None:
        return None

    def set_column_choice(self, column: str, shown: bool | None) -> None:
        pass


class RecordingHost:
    """A `TabHost` that writes down what the tab asks of it."""

    def __init__(self, ask_above: int | None = None, current: bool = True) -> None:
        self.settings = RecordingSettings(ask_above)
        self.panels = PANELS
        self.queued: list[CheckpointTab] = []
        self.closed: list[QWidget] = []
        self.current = current
        self.workspace = Workspace()  # what the tab opens is leased from its host's workspace
        self.graph_cache = None  # as a window without a graph cache of its own

    def queue_build(self, tab: CheckpointTab) -> None:
        self.queued.append(tab)

    def is_current(self, widget: QWidget) -> bool:
        return self.current

    def close_page(self, widget: QWidget) -> None:
        self.closed.append(widget)


def test_a_tab_without_a_window_gets_the_null_host_and_builds_at_once(qtbot, tmp_path):
    tab = CheckpointTab(make_state_dict(str(tmp_path / "model.pth")))  # never shown: built all the same
    qtbot.addWidget(tab)
    assert isinstance(tab.host, NullHost) and tab.host.panels == []  # outside a window: the tree and details
    with qtbot.waitSignal(tab.loaded, timeout=20_000):
        tab.start()
    assert tab.state == "ready" and tab.context is not None and tab.context.window is None
    assert [tab.side_tabs.tabText(i) for i in range(tab.side_tabs.count())] == ["Details"]
    # A null host given panels: outside a window too, each is built when its side tab is shown or asked for.
    host = NullHost(PANELS)
    with_panels = CheckpointTab(make_state_dict(str(tmp_path / "other.pth")), window=host)
    qtbot.addWidget(with_panels)
    with qtbot.waitSignal(with_panels.loaded, timeout=20_000):
        with_panels.start()
    assert with_panels.side_panels.widgets == []
    # every panel that applies: a state dict with a `step` holds training facts, no optimizer state
    applies = [p for p in PANELS if p.title != "Optimizer"]
    assert all(with_panels.panel(spec.title) is not None for spec in applies)
    assert len(with_panels.side_panels.widgets) == len(applies)
    assert not with_panels.findChildren(QWidget, "panelPlaceholder")
    assert not tab.summary.collapsed
    tab.summary.toggle.click()  # nothing remembers it, and nothing fails
    assert tab.summary.collapsed
    assert NullSettings().flag(SUMMARY_COLLAPSED) is False


def test_a_tab_in_the_background_asks_its_host_for_a_turn(qtbot, tmp_path):
    host = RecordingHost(current=False)
    tab = CheckpointTab(make_state_dict(str(tmp_path / "model.pth")), window=host)
    qtbot.addWidget(tab)  # not shown: in the background
    tab.start()
    qtbot.waitUntil(lambda: host.queued == [tab], timeout=20_000)
    assert tab.state == "loading" and tab.build_pending
    tab.finish_open()  # the host's turn comes
    assert tab.state == "ready" and not tab.build_pending
    assert tab.context is not None and tab.context.window is host
    # Neither visible nor current: every panel waits for its side tab to be shown.
    assert tab.findChildren(QWidget, "panelPlaceholder")


def test_the_host_settings_decide_asking_and_remember_the_summary(qtbot, tmp_path):
    import torch
    from safetensors.torch import save_file

    path = str(tmp_path / "wide.safetensors")
    save_file({f"layers.{i}.weight": torch.zeros(2) for i in range(200)}, path)
    host = RecordingHost(ask_above=2000)
    tab = CheckpointTab(path, window=host)
    qtbot.addWidget(tab)
    tab.show()
    tab.start()
    wait_settled(qtbot, tab)
    assert tab.state == "asking"
    assert tab.findChild(QPushButton, "openAnywayButton") is tab.open_anyway_button  # the question's page
    buttons = {b.text(): b for b in tab.findChildren(QPushButton)}
    buttons["Close tab"].click()
    assert host.closed == [tab]  # the window closes it; the tab only asks
    tab.open_anyway_button.click()
    wait_settled(qtbot, tab)
    assert tab.state == "ready" and tab.top.tensors == 200
    tab.summary.toggle.click()
    assert tab.summary.collapsed and host.settings.flags == {SUMMARY_COLLAPSED: True}


def test_the_main_window_answers_as_a_host(qtbot, window, tmp_path):
    first, second = (make_state_dict(str(tmp_path / f"{n}.pth")) for n in "ab")
    tab_a, tab_b = window.open_paths([first, second])
    assert tab_a.host is window and tab_b.host is window
    assert window.is_current(tab_b) and not window.is_current(tab_a)
    wait_settled(qtbot, tab_b)
    window.close_page(QWidget())  # a widget in no tab: nothing happens
    assert window.tabs.count() == 2
    window.close_page(tab_a)
    assert window.checkpoint_tabs() == [tab_b]

"""The start page and what the window offers with nothing open (issue 45, defects 8 and 9)."""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton


def test_the_recent_list_shows_only_the_new_buttons_without_an_event_loop(qtbot):
    """tools/screenshots.py drives the window without running its event loop: `deleteLater()` waits for that
    loop, so the old buttons stayed on the page, the new ones stacked under them."""
    from ckptview.gui.app.start_page import StartPage

    page = StartPage()
    qtbot.addWidget(page)
    page.show()
    page.set_recent(["/a/one.pt", "/a/two.pt", "/a/three.pt"])
    page.set_recent(["/b/four.pt"])  # no event processed in between
    shown = [b for b in page.recent_box.findChildren(QPushButton) if b.isVisible()]
    assert [b.toolTip() for b in shown] == ["/b/four.pt"]
    assert [b.toolTip() for b in page.recent_buttons()] == ["/b/four.pt"]


def test_tab_actions_are_disabled_with_nothing_open(qtbot, window, tmp_path):
    """Expand All, Collapse All and Find were enabled on the start page, where they do nothing."""
    import torch

    from tests.support.guihelpers import wait_settled

    tab_actions = (window.menus.expand_action, window.menus.collapse_action, window.menus.find_action, window.menus.graph_action,
                   window.menus.reload_action, window.menus.close_action)
    assert window.start_page.isVisible()
    assert not [a.text() for a in tab_actions if a.isEnabled()]
    torch.save({"w": torch.ones(2)}, tmp_path / "m.pt")
    (tab,) = window.open_paths([str(tmp_path / "m.pt")])
    wait_settled(qtbot, tab)
    assert all(a.isEnabled() for a in tab_actions)
    window.close_tab(window.tabs.indexOf(tab))
    assert window.start_page.isVisible() and not any(a.isEnabled() for a in tab_actions)

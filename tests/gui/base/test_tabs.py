"""Side tabs that do not fit go into a menu, never behind scroll arrows (issue 35, finding 3: at 1024x640 the
Run tab hid behind the tab bar's arrows, `Trainin◂▸`)."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QToolButton

from ckptview.gui.base.tabs import OverflowTabWidget

TITLES = ["Details", "Statistics", "Heat-map", "Spectrum", "Values", "Optimizer", "Training", "Run"]


def make(qtbot, width: int) -> OverflowTabWidget:
    tabs = OverflowTabWidget()
    qtbot.addWidget(tabs)
    for title in TITLES:
        tabs.addTab(QLabel(title), title)
    tabs.resize(width, 300)
    tabs.show()
    qtbot.waitUntil(tabs.isVisible)
    return tabs


def on_bar(tabs: OverflowTabWidget) -> list[int]:
    bar = tabs.tabBar()
    return [i for i in range(tabs.count()) if bar.isTabVisible(i) and bar.rect().contains(bar.tabRect(i))]


def test_tabs_that_do_not_fit_are_in_the_menu_and_none_scrolls(qtbot):
    tabs = make(qtbot, 420)
    bar = tabs.tabBar()
    assert not [b for b in bar.findChildren(QToolButton) if b.isVisible()]  # no scroll arrows
    shown, hidden = on_bar(tabs), tabs.hidden_tabs()
    assert hidden and sorted(shown + hidden) == list(range(len(TITLES)))
    assert tabs.more_button.isVisible()
    menu = [(a.text(), a.data()) for a in tabs.more_button.menu().actions()]
    assert menu == [(TITLES[i], i) for i in hidden]
    assert tabs.minimumSizeHint().width() < 420  # the bar never widens what holds it


def test_a_tab_chosen_from_the_menu_is_current_and_on_the_bar(qtbot):
    tabs = make(qtbot, 420)
    run = TITLES.index("Run")
    assert run in tabs.hidden_tabs()
    action = next(a for a in tabs.more_button.menu().actions() if a.data() == run)
    action.trigger()
    assert tabs.currentIndex() == run and run in on_bar(tabs)
    assert TITLES.index("Details") not in tabs.hidden_tabs()  # the first tabs stay, one further on gave way
    tabs.setCurrentIndex(0)
    assert 0 in on_bar(tabs)


def test_every_tab_shows_when_there_is_room(qtbot):
    tabs = make(qtbot, 420)
    tabs.resize(1000, 300)
    qtbot.waitUntil(lambda: not tabs.hidden_tabs())
    assert on_bar(tabs) == list(range(len(TITLES))) and not tabs.more_button.isVisible()


def test_each_tab_made_current_is_the_one_shown(qtbot):
    # From Optimizer (the bar holding Details..Spectrum and Optimizer), Training was chosen: showing Values
    # again made Qt move the current tab there, since Training was still off the bar (a layout-test stop
    # titled 'Training' checked the Values panel).
    tabs = make(qtbot, 420)
    for i in range(len(TITLES)):
        tabs.setCurrentIndex(i)
        assert (tabs.currentIndex(), i in on_bar(tabs)) == (i, True), TITLES[i]
    for i in reversed(range(len(TITLES))):
        tabs.setCurrentIndex(i)
        assert (tabs.currentIndex(), i in on_bar(tabs)) == (i, True), TITLES[i]

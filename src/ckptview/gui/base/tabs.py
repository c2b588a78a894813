"""Tabs that never hide behind scroll arrows: those that do not fit go into a menu at the bar's end.

At 1024x640 the side tabs of a checkpoint (Details, Statistics, Heat-map, Spectrum, Values, Optimizer,
Training, Run) took more than the side panel's width; Qt's tab bar then scrolled and the Run tab hid behind
two small arrows (`Trainin◂▸`). `OverflowTabWidget` shows as many tabs as fit, always the current one among
them, and lists the others in a "»" menu in the corner; choosing one makes it current (and shown). The bar
never asks for more width than its current tab, so no number of tabs makes a panel, or the window, wider.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QResizeEvent
from PySide6.QtWidgets import QMenu, QTabBar, QTabWidget, QToolButton, QWidget

__all__ = ["OverflowTabWidget"]


class _Bar(QTabBar):
    """A tab bar whose minimum is one tab: the widget decides which tabs show (never scroll arrows)."""

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """One tab's width (the current's), so the bar never widens what holds it."""
        hint = super().minimumSizeHint()
        current = self.currentIndex()
        width = self.tabSizeHint(current).width() if current >= 0 else 0
        return QSize(min(hint.width(), width), hint.height())


class OverflowTabWidget(QTabWidget):
    """A QTabWidget whose tabs that do not fit are in the corner menu (`more_button`), never scrolled."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        bar = _Bar()
        bar.setUsesScrollButtons(False)
        bar.setExpanding(False)
        bar.setElideMode(Qt.TextElideMode.ElideNone)
        self.setTabBar(bar)
        self.more_button = QToolButton(self)
        self.more_button.setObjectName("moreTabs")
        self.more_button.setText("»")
        self.more_button.setAutoRaise(True)
        self.more_button.setToolTip("The tabs that do not fit")
        self.more_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.more_button.setMenu(QMenu(self.more_button))
        self.setCornerWidget(self.more_button, Qt.Corner.TopRightCorner)
        self.more_button.hide()
        self.currentChanged.connect(lambda _index: self._fit())
        self._fitting = False

    def show_tab(self, index: int) -> None:
        """Make tab `index` current, on the bar (another one goes to the menu if room is short)."""
        self.setTabVisible(index, True)
        self.setCurrentIndex(index)
        self._fit()

    def hidden_tabs(self) -> list[int]:
        """Indexes of the tabs in the menu rather than on the bar."""
        return [i for i in range(self.count()) if not self.isTabVisible(i)]

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        """Choose again which tabs show."""
        super().resizeEvent(event)
        self._fit()

    def tabInserted(self, index: int) -> None:  # noqa: N802 (Qt's name)
        """A tab added (or a panel's page swapped in): choose again."""
        super().tabInserted(index)
        self._fit()

    def tabRemoved(self, index: int) -> None:  # noqa: N802 (Qt's name)
        """A tab removed: choose again."""
        super().tabRemoved(index)
        self._fit()

    def _fit(self) -> None:
        if self._fitting:
            return
        self._fitting = True
        try:
            self._choose()
        finally:
            self._fitting = False

    def _choose(self) -> None:
        bar = self.tabBar()
        widths = [bar.tabSizeHint(i).width() for i in range(self.count())]
        room = self.width() - 4
        shown = set(range(self.count()))
        if sum(widths) > room:
            room -= self.more_button.sizeHint().width()
            current = self.currentIndex()
            used = widths[current] if current >= 0 else 0
            shown = {current} if current >= 0 else set()
            for i, width in enumerate(widths):  # in order, as many as fit beside the current one
                if i != current and used + width <= room:
                    shown.add(i)
                    used += width
                elif i != current:
                    break
        # The current tab goes on the bar first: Qt makes a tab shown while the current one is off the bar
        # the current tab (choosing Training from the menu then showed Values).
        order = sorted(range(self.count()), key=lambda i: i != self.currentIndex())
        for i in order:
            if self.isTabVisible(i) != (i in shown):
                self.setTabVisible(i, i in shown)
        self._fill_menu()

    def _fill_menu(self) -> None:
        menu = self.more_button.menu()
        menu.clear()
        hidden = self.hidden_tabs()
        for i in hidden:
            action = QAction(self.tabText(i), menu)
            action.setData(i)
            action.triggered.connect(lambda _checked=False, i=i: self.show_tab(i))
            menu.addAction(action)
        self.more_button.setVisible(bool(hidden))

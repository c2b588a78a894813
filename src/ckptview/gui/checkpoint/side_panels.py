"""The side tabs of a checkpoint tab: "Details" and the panels its host lists, each built when first needed.

Panels cost tens of milliseconds each (plots), some O(tensors), and a person looks at one at a time: a panel
is built when its side tab is first shown, or when something asks for it (`panel`, `show_panel`), and is
then given the current selection. Opening a file builds none of them. A panel that fails to build, or fails
on a selection, is logged and leaves the others working.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QWidget

from ckptview.core.checkpoint import Node
from ckptview.core.inspect.grouping import ModuleGroup, Row
from ckptview.gui.base.tabs import OverflowTabWidget
from ckptview.gui.checkpoint.host import CheckpointContext, PanelSpec, SupportsSelection

__all__ = ["PanelScrollArea", "SidePanels", "entries_of"]
log = logging.getLogger(__name__)
Entries = list[Node | ModuleGroup]


def entries_of(rows: Sequence[Row]) -> Entries:
    """What panels get for selected rows: nodes, and module-group rows as the tensors below them."""
    return [r.node if r.node is not None else ModuleGroup.of_row(r) for r in rows]


class SidePanels(QObject):
    """`tabs`: "Details" first, then the panels of `specs` in that order; `widgets`: the panels built."""

    def __init__(self, detail: QWidget, context: CheckpointContext,
                 selection: Callable[[], Entries], specs: Sequence[PanelSpec] = (),
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self._selection = selection  # the entries selected now, for a panel built late
        self.widgets: list[QWidget] = []
        self._pending: dict[int, PanelSpec] = {}  # side-tab index -> panel not built yet
        self.tabs = OverflowTabWidget()  # the tabs that do not fit go into a menu, never behind arrows
        self.tabs.setObjectName("sideTabs")
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(detail, "Details")
        for spec in specs:  # each side tab's page is there from the start; its panel comes into it later
            placeholder = QLabel(f"Preparing {spec.title}…")
            placeholder.setObjectName("panelPlaceholder")
            placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
            self._pending[self.tabs.addTab(PanelScrollArea(placeholder), spec.title)] = spec
        self.tabs.currentChanged.connect(self.build)

    def build_current(self) -> None:
        """Build the panel whose side tab is current, if it waits (the tab was shown)."""
        if self._pending:
            self.build(self.tabs.currentIndex())

    def build(self, index: int) -> None:
        """Put its panel in place of the placeholder at side-tab `index`, given the current selection."""
        spec = self._pending.pop(index, None)
        if spec is None:
            return
        widget = self._make(spec)
        page = self.tabs.widget(index)
        assert isinstance(page, PanelScrollArea)
        page.set_panel(widget)  # the tab itself stays: the bar, the current tab and the menu are unchanged
        entries = self._selection()
        if entries:
            _tell(widget, entries)

    def tell(self, entries: Entries) -> None:
        """Give every built panel the selected entries (an empty list: let go of what they show)."""
        for widget in self.widgets:
            _tell(widget, entries)

    def panel(self, title: str) -> QWidget | None:
        """The side panel titled `title` (the widget itself, not the scroll area around it), built if it waits."""
        for i in range(self.tabs.count()):
            if self.tabs.tabText(i) == title:
                self.build(i)
                page = self.tabs.widget(i)
                return page.widget() if isinstance(page, QScrollArea) else page
        return None

    def show_panel(self, title: str) -> QWidget | None:
        """Bring the side panel titled `title` to the front; returns it."""
        for i in range(self.tabs.count()):
            if self.tabs.tabText(i) == title:
                self.tabs.show_tab(i)
                return self.panel(title)
        return None

    def close(self) -> None:
        """Close every panel (their jobs stop); nothing more is built."""
        self._pending = {}
        for widget in self.widgets:
            widget.close()

    def _make(self, spec: PanelSpec) -> QWidget:
        try:
            widget = spec.factory(self.context)
        except Exception as exc:  # one broken panel must not break the tab
            log.exception("panel %r failed to build", spec.title)
            widget = QLabel(f"This panel failed to start: {type(exc).__name__}: {exc}")
            widget.setWordWrap(True)
        self.widgets.append(widget)
        return widget


def _tell(widget: QWidget, entries: Entries) -> None:
    if isinstance(widget, SupportsSelection):  # optional: a panel may not follow the selection
        try:
            widget.set_selection(entries)
        except Exception:
            log.exception("panel %r failed in set_selection", type(widget).__name__)


class PanelScrollArea(QScrollArea):
    """A side panel's frame: the panel fills the height it is given and scrolls only below its minimum.

    On a short screen it scrolls instead of making the whole window taller than the screen (the Run
    panel's form alone needs ~370 px). QScrollArea's own resizing follows heightForWidth, which
    word-wrapped labels make as tall as the panel's *preferred* size: plots then scrolled at any window
    height. Here the panel gets the viewport's height, or its minimum when that is more, never more.
    """

    def __init__(self, panel: QWidget) -> None:
        super().__init__()
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidgetResizable(False)
        self.set_panel(panel)

    def set_panel(self, panel: QWidget) -> None:
        """Show `panel` here (a placeholder before it is deleted, as QScrollArea deletes a replaced widget)."""
        old = self.widget()
        if old is not None:
            old.removeEventFilter(self)
            old.hide()
        self.setWidget(panel)
        panel.installEventFilter(self)
        self._fit()

    def _fit(self) -> None:
        panel = self.widget()
        if panel is not None:
            viewport = self.viewport().size()
            panel.resize(viewport.width(), max(viewport.height(), panel.minimumSizeHint().height()))

    def resizeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        """Fit the panel to the new size."""
        super().resizeEvent(event)  # type: ignore[arg-type]
        self._fit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """Refit when the panel's layout changes what it needs."""
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self._fit()
        return super().eventFilter(watched, event)

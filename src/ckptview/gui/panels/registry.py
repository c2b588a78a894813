"""Extension points for panels, menu actions and tabs that other GUI modules add to the main window.

How to add a panel (histogram, statistics, optimizer, export, run, ...):

1. Create a module under ``src/ckptview/gui/`` and name it in :data:`PANEL_MODULES` (dotted, below
   ``ckptview.gui``): the main window imports exactly those modules once at start-up (:func:`load_plugins`),
   in that order, and each one registers what it adds at import time, at module level::

       from ckptview.gui.panels.registry import CheckpointContext, register_panel, register_action

       class HistogramPanel(QWidget):
           def __init__(self, context: CheckpointContext) -> None: ...
           def set_selection(self, entries: list[Node]) -> None: ...   # optional

       register_panel("Histogram", HistogramPanel, order=15)

2. ``register_panel(title, factory, order)``: for every opened checkpoint the window calls
   ``factory(context)`` and shows the widget as a side tab beside "Details", side tabs sorted by ``order``.
   When the selection in the tree changes it calls ``widget.set_selection(entries)`` if the widget has
   that method. ``entries`` are the core :class:`~ckptview.core.checkpoint.Node` objects of the selected rows
   (tensors, values, containers), in selection order; synthetic module-group rows (``encoder > layers``),
   which have no node of their own, are left out. The widget is destroyed with its tab: run jobs through a
   :class:`~ckptview.gui.base.workers.JobSlot`, which stops them then. Figures of tensors come from
   ``context.analysis`` (one read per tensor, shared by every panel).
3. ``register_action(menu, text, callback, shortcut=None)``: adds ``text`` to the menu called ``menu``
   ("File", "View", "Tools", ... created when missing). ``callback(window)`` receives the
   :class:`~ckptview.gui.app.main_window.MainWindow`; useful members: ``window.current_context()`` (the
   :class:`CheckpointContext` of the current tab or ``None``), ``window.current_selection()`` (``list[Node]``),
   ``window.add_tab(widget, title, tooltip)`` (a new closable main tab, e.g. a diff view),
   ``window.open_paths(paths)``, ``window.statusBar()``.
4. ``set_diff_handler(callback)``: ``ckptview --diff A B`` calls ``callback(window, a, b)``; without a
   handler both files open as ordinary tabs.

Panels must never read tensor bytes on the GUI thread: use :mod:`ckptview.gui.base.workers`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptview.core.figures.analysis import Analysis

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from ckptview.core.checkpoint import Checkpoint
    from ckptview.gui.checkpoint.host import TabHost

log = logging.getLogger(__name__)

# The modules that add panels and actions, imported once at start-up in this order.
PANEL_MODULES = ("panels.statistics", "panels.heatmap", "panels.values", "panels.optimizer", "panels.run",
                 "compare.tab", "export.dialog", "panels.spectrum")


@dataclass
class CheckpointContext:
    """What a panel knows about its tab: the opened checkpoint and a few ways to talk to the window."""

    checkpoint: Checkpoint
    path: str
    window: TabHost | None = None  # the window the tab is in (None outside one)
    # Select the tree row of the tensor/value called `name` (contract name, e.g. "model.fc.weight").
    select_name: Callable[[str], object] = field(default=lambda name: None)
    # Show a transient message in the status bar.
    show_status: Callable[[str], None] = field(default=lambda text: None)
    # Figures and values of this checkpoint (statistics, histograms, spectra, heat-maps, values pages): every
    # panel asks here, so each tensor is read once; shared with whatever else holds the checkpoint.
    analysis: Analysis = field(default_factory=Analysis)


@dataclass(frozen=True)
class PanelSpec:
    """A registered side panel: its tab title, the factory that builds it, and where its tab goes."""

    title: str
    factory: Callable[[CheckpointContext], QWidget]
    order: int = 1000


@dataclass(frozen=True)
class ActionSpec:
    """A registered menu action: menu, text, callback(window), shortcut."""
    menu: str
    text: str
    callback: Callable[[Any], object]
    shortcut: str | None = None


_panels: list[PanelSpec] = []
_actions: list[ActionSpec] = []
_diff_handler: list[Callable[[Any, str, str], object]] = []
_loaded = False


def register_panel(title: str, factory: Callable[[CheckpointContext], QWidget], order: int = 1000) -> None:
    """Show `factory(context)` as a side tab titled `title` in every checkpoint tab opened from now on.

    Side tabs are sorted by `order` (Statistics 10, Heat-map 20, Values 30, Optimizer 40, Training 50,
    Run 60); equal orders keep registration order.
    """
    if any(p.title == title for p in _panels):
        return  # a module imported twice must not add its panel twice
    _panels.append(PanelSpec(title, factory, order))


def register_action(menu: str, text: str, callback: Callable[[Any], object], shortcut: str | None = None) -> None:
    """Add a menu item; `callback(window)` runs when it is triggered."""
    if any(a.menu == menu and a.text == text for a in _actions):
        return
    _actions.append(ActionSpec(menu, text, callback, shortcut))


def set_diff_handler(callback: Callable[[Any, str, str], object]) -> None:
    """Handle `ckptview --diff A B`: `callback(window, a, b)`."""
    _diff_handler[:] = [callback]


def panels() -> list[PanelSpec]:
    """The registered panels, by their order (then registration order)."""
    return sorted(_panels, key=lambda p: p.order)


def actions() -> list[ActionSpec]:
    """The registered menu actions, in registration order."""
    return list(_actions)


def diff_handler() -> Callable[[Any, str, str], object] | None:
    """The registered `--diff` handler, if any."""
    return _diff_handler[0] if _diff_handler else None


def unregister(title_or_text: str) -> None:
    """Remove a panel or action by title/text (tests use it to clean up)."""
    _panels[:] = [p for p in _panels if p.title != title_or_text]
    _actions[:] = [a for a in _actions if a.text != title_or_text]


def load_plugins() -> list[str]:
    """Import the modules of PANEL_MODULES once; returns the names of those that failed."""
    global _loaded
    if _loaded:
        return []
    _loaded = True
    failed = []
    for name in PANEL_MODULES:
        try:
            importlib.import_module(f"ckptview.gui.{name}")
        except Exception:
            # One broken panel must not keep the window from opening; say so loudly in the log.
            log.exception("ckptview: could not load panel module %s", name)
            failed.append(name)
    return failed

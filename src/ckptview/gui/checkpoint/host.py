"""What a checkpoint tab needs from its window, typed: `TabHost`; `NullHost` for a tab outside a window.
And what the tab's side panels get: `CheckpointContext`, declared by `PanelSpec`.

The tab asks its window for a few settings, its side panels, a turn in the build queue, whether it is the
current tab, to close it, and to open other tabs (what an error page offers); nothing else. `MainWindow` satisfies `TabHost` (mypy checks it where the
window passes itself); tests and tools that build a tab alone get `NullHost`, which builds at once,
remembers nothing and shows the panels it is given (none by default).

A side panel is a widget class (or any factory) taking a `CheckpointContext`, listed with its side tab's
title and order in the window's table `ckptview.gui.app.main_window.PANELS` (napari's `layer_to_controls`
style: one literal table that mypy checks)::

    class HistogramPanel(QWidget):
        def __init__(self, context: CheckpointContext) -> None: ...
        def set_selection(self, entries: Sequence[Node | ModuleGroup]) -> None: ...   # optional

    PANELS = [..., PanelSpec("Histogram", HistogramPanel, order=15)]

For every opened checkpoint the tab calls ``factory(context)`` and shows the widget as a side tab beside
"Details", side tabs sorted by ``order``. A panel that follows the tree's selection provides
`SupportsSelection`: ``set_selection(entries)`` gets the core `Node` objects of the selected rows (tensors,
values, containers), in selection order, and a module-group row (``encoder > layers``) as the
`ModuleGroup` of the tensors below it. The widget is destroyed with its tab: it runs its jobs through a
`ckptview.gui.base.workers.JobSlot`, which stops them then, and never reads tensor bytes on the GUI thread.
Figures of tensors come from ``context.analysis`` (one read per tensor, shared by every panel).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ckptview.core.figures.analysis import Analysis
from ckptview.core.graph import GraphCache
from ckptview.core.inspect.hf_order import ParamOrders
from ckptview.core.session.workspace import Workspace

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from ckptview.core.checkpoint import Checkpoint, Node
    from ckptview.core.inspect.grouping import ModuleGroup


class TabSettings(Protocol):
    """The settings a tab reads and writes (`ckptview.gui.base.settings.Settings` has them)."""

    def header_ask_bytes(self) -> int | None:
        """Header bytes above which opening asks first (None: never ask)."""
        ...

    def flag(self, key: str, default: bool = False) -> bool:
        """A remembered on/off choice."""
        ...

    def set_flag(self, key: str, value: bool) -> None:
        """Remember an on/off choice."""
        ...

    def column_choice(self, column: str) -> bool | None:
        """The user's choice for a tree column: shown, hidden, or None (the tree decides)."""
        ...

    def set_column_choice(self, column: str, shown: bool | None) -> None:
        """Remember the user's choice for a tree column (None: the tree decides again)."""
        ...


class Buildable(Protocol):
    """A tab whose page the window builds when its turn in the queue comes."""

    def finish_open(self) -> None:
        """Build the page of the checkpoint opened (on the GUI thread, after the opening worker)."""
        ...


class TabHost(Protocol):
    """The window a checkpoint tab lives in, as far as the tab may see it."""

    @property
    def settings(self) -> TabSettings:
        """The user's settings."""
        ...

    @property
    def panels(self) -> Sequence[PanelSpec]:
        """The side panels every checkpoint tab shows, by their order."""
        ...

    @property
    def workspace(self) -> Workspace:
        """The window's open checkpoints, shared by its tabs (a file open in one is not read again)."""
        ...

    @property
    def graph_cache(self) -> GraphCache | None:
        """Where the Graph view keeps traced graphs (the window's; None: the user's cache file, per trace)."""
        ...

    def queue_build(self, tab: Buildable) -> None:
        """Build `tab`'s page on a later event-loop turn (a tab in the background waits its turn)."""
        ...

    def is_current(self, widget: QWidget) -> bool:
        """True when `widget` is the main tab the user sees."""
        ...

    def close_page(self, widget: QWidget) -> None:
        """Close the main tab holding `widget` and release its file (nothing when it holds none)."""
        ...

    def open_paths(self, paths: Iterable[str]) -> Sequence[QWidget]:
        """Open each path in a tab of its own (an error page's "Open NAME")."""
        ...

    def open_series(self, paths: list[str]) -> QWidget | None:
        """Open a series tab over these paths (an error page's "Open as series")."""
        ...

    def open_diff(self, a: str, b: str) -> None:
        """Open the comparison of two checkpoints (an error page's "Compare first and last")."""
        ...


class NullSettings:
    """Settings outside a window: never ask before opening, nothing remembered."""

    def header_ask_bytes(self) -> int | None:
        """Never ask."""
        return None

    def flag(self, key: str, default: bool = False) -> bool:
        """The default: nothing is remembered."""
        return default

    def set_flag(self, key: str, value: bool) -> None:
        """Forgotten at once."""

    def column_choice(self, column: str) -> bool | None:
        """No choice: the tree decides."""
        return None

    def set_column_choice(self, column: str, shown: bool | None) -> None:
        """Forgotten at once."""


class NullHost:
    """The host of a tab built without a window (tests, tools): it is always in view and builds at once;
    its tabs show `panels` (none unless given)."""

    def __init__(self, panels: Sequence[PanelSpec] = ()) -> None:
        self._settings = NullSettings()
        self._panels = sorted(panels, key=lambda p: p.order)
        self._workspace = Workspace()

    @property
    def settings(self) -> TabSettings:
        """Settings that ask nothing and remember nothing."""
        return self._settings

    @property
    def panels(self) -> Sequence[PanelSpec]:
        """The panels it was given, by their order."""
        return self._panels

    @property
    def workspace(self) -> Workspace:
        """A workspace of its own: what this tab opens is shared with no window."""
        return self._workspace

    @property
    def graph_cache(self) -> GraphCache | None:
        """None: a trace opens the user's graph cache for that call only."""
        return None

    def queue_build(self, tab: Buildable) -> None:
        """No queue outside a window: build now."""
        tab.finish_open()

    def is_current(self, widget: QWidget) -> bool:
        """A tab alone is what the user (or the test) looks at."""
        return True

    def close_page(self, widget: QWidget) -> None:
        """No window to close it in."""

    def open_paths(self, paths: Iterable[str]) -> Sequence[QWidget]:
        """No window to open tabs in."""
        return []

    def open_series(self, paths: list[str]) -> QWidget | None:
        """No window to open a series tab in."""
        return None

    def open_diff(self, a: str, b: str) -> None:
        """No window to open a comparison in."""


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
    # The parameter orders libraries told (the window's workspace's): they name a Trainer folder's optimizer
    # state. One arriving while the tab is open is announced to `FollowsParameterOrder` panels.
    param_orders: ParamOrders | None = None


@runtime_checkable
class SupportsSelection(Protocol):
    """A side panel that follows the tree's selection."""

    def set_selection(self, entries: Sequence[Node | ModuleGroup]) -> None:
        """Show what `entries` (the selected rows, in order) are; an empty list lets go of what it shows."""
        ...


@runtime_checkable
class FollowsParameterOrder(Protocol):
    """A side panel that names optimizer state by parameter: told when a library's parameter order, learned
    in the background after the tab opened, names it for sure (until then the names are marked guessed)."""

    def parameter_order_arrived(self) -> None:
        """Name the optimizer state again with `context.param_orders`, which now knows more."""
        ...


@dataclass(frozen=True)
class PanelSpec:
    """A side panel: its side tab's title, the factory that builds it, where its tab goes (by order), and what
    the checkpoint must hold for the tab to be there at all (`needs`: one of `opening.features_of`'s words;
    None: every checkpoint)."""

    title: str
    factory: Callable[[CheckpointContext], QWidget]
    order: int = 1000
    needs: str | None = None

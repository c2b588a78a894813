"""What a checkpoint tab needs from its window, typed: `TabHost`; `NullHost` for a tab outside a window.

The tab asks its window for a few settings, a turn in the build queue, whether it is the current tab, and
to close it; nothing else. `MainWindow` satisfies `TabHost` (mypy checks it where the window passes
itself); tests and tools that build a tab alone get `NullHost`, which builds at once and remembers nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget


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

    def queue_build(self, tab: Buildable) -> None:
        """Build `tab`'s page on a later event-loop turn (a tab in the background waits its turn)."""
        ...

    def is_current(self, widget: QWidget) -> bool:
        """True when `widget` is the main tab the user sees."""
        ...

    def close_page(self, widget: QWidget) -> None:
        """Close the main tab holding `widget` and release its file (nothing when it holds none)."""
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


class NullHost:
    """The host of a tab built without a window (tests, tools): it is always in view and builds at once."""

    def __init__(self) -> None:
        self._settings = NullSettings()

    @property
    def settings(self) -> TabSettings:
        """Settings that ask nothing and remember nothing."""
        return self._settings

    def queue_build(self, tab: Buildable) -> None:
        """No queue outside a window: build now."""
        tab.finish_open()

    def is_current(self, widget: QWidget) -> bool:
        """A tab alone is what the user (or the test) looks at."""
        return True

    def close_page(self, widget: QWidget) -> None:
        """No window to close it in."""

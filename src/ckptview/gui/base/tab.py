"""What every main tab of the window is (`CheckpointTab`, `CompareTab`, `SeriesTab`): the `Tab` protocol.

The window asks a tab it closes to let go of what it holds (`release`: files, leases, jobs) and frees the
trees it kept out of the collector's view (`trees`, see `gc_guard.collect_when_deleted`);
everything else it does with a checkpoint tab it does through that class's own typed members.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from PySide6.QtWidgets import QTabWidget


@runtime_checkable
class Tab(Protocol):
    """A main tab of the window."""

    def release(self) -> None:
        """Let go of the files, leases and jobs this tab holds (the window is closing it)."""
        ...

    def trees(self) -> list[Any]:
        """What holds this tab's trees (checkpoints, display rows), freed a slice at a time once it is gone."""
        ...


def tabs_in(widget: QTabWidget) -> list[Tab]:
    """The `Tab`s among `widget`'s pages, in tab order."""
    found: list[Tab] = []
    for i in range(widget.count()):
        page = widget.widget(i)
        if isinstance(page, Tab):
            found.append(page)
    return found

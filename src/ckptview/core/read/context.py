"""What an open needs to know, handed to every reader explicitly: `ReaderContext`.

No thread-local carries context in `ckptview.core.read`: a reader's `open(path, ctx)` gets the cancel
token, the progress callback, the remote session of the open in progress (the shards of an index join
it, so one transfer counts them all) and whether it runs inside an index's open (a shard that is itself
an index is refused, not recursed into). A nested open (an index's shards, a training folder's parts,
a DCP folder) passes a context derived from its own (`in_index`, `with_session`).

Reads of tensor values get their read-ahead the same way: a walk makes a `files.ReadAhead` and hands it
to the value reads (`values.iter_chunks(info, ahead=...)`); see `ckptview.core.read.files`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ckptview.core.jobs import CancelToken, Progress

if TYPE_CHECKING:
    from ckptview.core.read.remote import Session

__all__ = ["DEFAULT", "ReaderContext"]


@dataclass(frozen=True)
class ReaderContext:
    """The context of one open: cancel, progress, remote session, nesting. Immutable; derive, never mutate."""

    cancel: CancelToken | None = None
    """Checked between the steps a reader reports (a safetensors header read in pieces)."""
    progress: Callable[[Progress], None] | None = None
    """Handed each Progress of a reader that reports (it may raise, e.g. Cancelled, to stop the open)."""
    session: Session | None = None
    """The remote session of the open in progress (None for a local open or before the first URL)."""
    inside_index: bool = False
    """True while an index's shards are opened: a shard that is itself an index is refused."""

    @property
    def reports(self) -> bool:
        """Whether a reader should hand its steps to `report` (someone listens or may cancel)."""
        return self.cancel is not None or self.progress is not None

    def report(self, step: Progress) -> None:
        """Check the cancel token, then hand `step` to the progress callback."""
        if self.cancel is not None:
            self.cancel.check()
        if self.progress is not None:
            self.progress(step)

    def in_index(self) -> ReaderContext:
        """This context for the shards of an index."""
        return self if self.inside_index else replace(self, inside_index=True)

    def with_session(self, session: Session) -> ReaderContext:
        """This context reading through `session` (the open of a URL)."""
        return self if self.session is session else replace(self, session=session)


DEFAULT = ReaderContext()

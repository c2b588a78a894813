"""What a reader is handed, explicitly: the `Source` it reads and the `ReaderContext` of the open.

A reader's `sniff(source)` and `open(source, ctx)` get the file (or folder) as the byte layer found it
when the open began: its path (local or URL), its first bytes, whether it is a folder, and the identity
(device, inode, size, mtime) taken then. A reader reads the source through `source.file_map()` or
`source.open_file()`, which refuse a file that is no longer that one (FileChangedError): a file renamed
over the path after its head chose the reader is never listed in its place.

No thread-local carries context in `ckptview.core.read`: a reader's `open(source, ctx)` gets the cancel
token, the work budget of its source (`ctx.budget_for(source)`: every loop over what the file declares
charges it), the progress callback, the remote session of the open in progress (the shards of an index join
it, so one transfer counts them all) with the options it reads with (`RemoteOptions`) and whether it runs
inside an index's open (a shard that is itself an index is refused, not recursed into). A nested open (an
index's shards, a training folder's parts) goes through `ctx.open_child(path)`, or `ctx.open_children`
for many at once (remote ones concurrently): the same open that began it (`open_checkpoint`, which binds itself
to the context it hands the readers), with a context derived from its own (`in_index`, `with_session`).
So the readers never import the entry point that imports them (netron's readers open nested entries
through their context the same way).

Reads of tensor values get their read-ahead the same way: a walk makes a `files.ReadAhead` and hands it
to the value reads (`values.iter_chunks(info, ahead=...)`); see `ckptview.core.read.bytes.files`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, BinaryIO, Protocol

from ckptview.core.budget import Budget
from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.bytes.files import FileIdentity, FileMap
from ckptview.core.read.bytes.fs import LOCAL, FileSystem
from ckptview.core.read.bytes.remote.fan_out import fan_out
from ckptview.core.read.bytes.remote.options import DEFAULT as DEFAULT_REMOTE
from ckptview.core.read.bytes.remote.options import RemoteOptions

if TYPE_CHECKING:
    from ckptview.core.checkpoint import Checkpoint
    from ckptview.core.read.bytes.remote import Session

__all__ = ["DEFAULT", "Opener", "ReaderContext", "Source"]


class Opener(Protocol):
    """`open_checkpoint`'s signature: what a context opens a nested checkpoint with."""

    def __call__(self, path: str, ctx: ReaderContext | None = None, /) -> Checkpoint: ...


@dataclass(frozen=True)
class Source:
    """What a reader reads, as the byte layer found it when the open began. Immutable.

    Built once per open by `open_checkpoint`; a nested open builds its own (an index's shards through
    `open_checkpoint`, a training folder's DCP parts with `Source.folder`). Readers read the source
    only through these methods.
    """

    path: str
    """A local path or a URL (as shown: no credentials), what the byte layer opens."""
    head: bytes = field(default=b"", repr=False)
    """The file's first bytes (b"" for a folder)."""
    is_dir: bool = False
    """True for a folder (sharded, distributed, a training step)."""
    identity: FileIdentity | None = None
    """The file's identity when the open began; None for a URL (its validator is checked instead), a
    folder, or a source nobody stat'ed (a sniff outside an open)."""
    identities: Mapping[str, FileIdentity] | None = field(default=None, repr=False)
    """A local folder's checkpoint files and their identities when the open began (keyed by
    `fs.join(path, name)`), or None when not taken."""
    fs: FileSystem = field(default=LOCAL, repr=False)
    """Where its files are (`LOCAL`, or the remote session of the open): chosen once, when the open began;
    what lies beside the source (shards, parts, side files) is asked of it too."""

    @classmethod
    def folder(cls, path: str, identities: Mapping[str, FileIdentity] | None = None,
               fs: FileSystem = LOCAL) -> Source:
        """A folder as a source (its files' identities when known)."""
        return cls(path, b"", True, None, identities, fs)

    def file_map(self) -> FileMap:
        """The source file's FileMap, refused (FileChangedError) when it is no longer the file opened."""
        return self.fs.file_map(self.path, self.identity)

    def open_file(self) -> BinaryIO:
        """The source file opened for reading (never blocking), refused when it is no longer the file opened."""
        return self.fs.open_regular(self.path, self.identity)

    @property
    def size(self) -> int:
        """The file's size when the open began (asked of the byte layer when no identity was taken)."""
        return self.identity.size if self.identity is not None else self.fs.getsize(self.path)

    @property
    def stored(self) -> int:
        """The bytes the source holds, which pay for the work it may cause: a file's size; a local folder's
        checkpoint files' sizes summed (0 when they were not listed: the budget's floor)."""
        if not self.is_dir:
            return self.size
        return sum(identity.size for identity in (self.identities or {}).values())

    def child_identity(self, path: str) -> FileIdentity | None:
        """The identity, when the open began, of `path` (a file directly in this local folder), or None."""
        if not self.identities or self.fs.remote:
            return None
        if os.path.dirname(os.path.abspath(path)) != os.path.abspath(self.path):
            return None
        return self.identities.get(os.path.join(self.path, os.path.basename(path)))


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
    remote: RemoteOptions = DEFAULT_REMOTE
    """What the user allowed for remote reads (`--download`, `--deadline`, ...): the session of a URL's open
    reads with it. The entry point (cli.py, the window) builds it once."""
    opener: Opener | None = field(default=None, compare=False, repr=False)
    """The open this context belongs to (`open_checkpoint` sets itself here); `open_child` calls it."""
    budget: Budget | None = field(default=None, compare=False, repr=False)
    """The work budget of the source being read: `open_checkpoint` makes one per source (file or folder) from
    the bytes it stores; what a reader reads for that source (its records, the parts of a folder) charges it,
    a nested open (`open_child`) gets its own."""

    def budget_for(self, source: Source) -> Budget:
        """The work budget of `source`: the open's, or one of its stored bytes for a reader run on its own."""
        if self.budget is not None:
            return self.budget
        return Budget.for_stored(source.stored, "the file", cancel=self.cancel)

    def with_budget(self, budget: Budget) -> ReaderContext:
        """This context reading a source whose work `budget` pays for."""
        return self if self.budget is budget else replace(self, budget=budget)

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

    def open_child(self, path: str) -> Checkpoint:
        """Open `path` (a shard, a part of a folder) as the open this context belongs to, in this context."""
        if self.opener is None:
            raise RuntimeError("this context belongs to no open: readers are run by open_checkpoint")
        return self.opener(path, self)

    def open_children(self, paths: list[str], what: str) -> Iterator[Checkpoint | CheckpointError]:
        """`open_child` of each path, in order: each one's checkpoint or the CheckpointError it raised.

        Remote ones are opened at once, at most `remote.concurrency` in flight (a folder of 163 shards
        lists in a handful of round trips, not 163), each reporting `"N of M <what> read"` as it lands; the
        cancel token stops them all, the requests in flight cut. Local ones are opened one after another as
        they are taken (their cost is the parse, not a wait: a caller that stops at an error opens no more).
        Errors other than CheckpointError (Cancelled) propagate.
        """
        if self.session is None or len(paths) <= 1:
            for path in paths:
                try:
                    yield self.open_child(path)
                except CheckpointError as exc:
                    yield exc
            return
        yield from self._open_at_once(paths, what)

    def _open_at_once(self, paths: list[str], what: str) -> list[Checkpoint | CheckpointError]:
        session = self.session
        assert session is not None
        # Each child reads with this context but reports nothing itself: the pool reports for them all,
        # on the calling thread (a window's progress is not called from several threads at once).
        quiet = replace(self, progress=None)
        total = len(paths)

        def step(done: int) -> None:
            self.report(Progress(done, total, f"{done:,} of {total:,} {what} read"))

        outcomes = fan_out(paths, quiet.open_child, session.options.concurrency, self.cancel, step,
                           session.abandon)
        out: list[Checkpoint | CheckpointError] = []
        for outcome in outcomes:
            if outcome.error is None:
                assert outcome.value is not None
                out.append(outcome.value)
            elif isinstance(outcome.error, CheckpointError):
                out.append(outcome.error)
            else:
                raise outcome.error
        return out

    def opened_by(self, opener: Opener) -> ReaderContext:
        """This context, its nested opens going through `opener`."""
        return self if self.opener is opener else replace(self, opener=opener)

    def in_index(self) -> ReaderContext:
        """This context for the shards of an index."""
        return self if self.inside_index else replace(self, inside_index=True)

    def with_session(self, session: Session) -> ReaderContext:
        """This context reading through `session` (the open of a URL)."""
        return self if self.session is session else replace(self, session=session)


DEFAULT = ReaderContext()

"""A file as a stream of pickles, read one after another with the safe VM.

`torch.load(weights_only=False)` of a non-zip file runs up to five pickles in a row (magic number,
protocol version, sys info, the object, the storage keys), and `pickle.load` in a loop runs as many as
follow each other. A pickle's opcodes take effect as they are read, so even a pickle that fails halfway
has run what came before the failure. Judging a file by its first pickle would miss the payload in the
next one: `PickleStream` reads them all and keeps the union of every global they name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckptview.core.budget import Budget, BudgetExceeded
from ckptview.core.checkpoint import Checkpoint
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.bytes.files import FileMap
from ckptview.core.read.pickle.torch_globals import EMULATORS, is_safe_global, resolve_constant
from ckptview.core.read.pickle.torch_tree import make_checkpoint
from ckptview.core.read.pickle.vm import SafeUnpickler, StubObject

PLAIN_FORMAT = "pickle"  # the format of a checkpoint that is a stream of plain pickles (formats/plain_pickle.py)


def inert_persistent_id(pid: Any) -> StubObject:
    """A persistent id in a pickle that no reader resolves: recorded, so reading goes on past it."""
    return StubObject("persistent id", (pid,))


class PickleStream:
    """The pickles of one buffer in order, with the union of every global they reference; their work charged
    to one budget (an honest stream holds one pickle or five, legacy torch.save: each pickle begun is charged,
    so a file of a million tiny pickles stops at what its bytes pay for)."""

    def __init__(self, data: bytes | memoryview, pos: int = 0, emulate: bool = True, budget: Budget | None = None
                 ) -> None:
        self.data = memoryview(data)
        self.budget = budget if budget is not None else Budget.for_stored(len(self.data), "the pickles")
        # emulate=False: every global stays an inert stub, torch's rebuild functions too (a census of
        # globals needs no tensors, and a persistent id it does not resolve cannot rebuild one).
        self.emulators = EMULATORS if emulate else None
        self.pos = pos
        self.count = 0  # whole pickles read
        self._globals: dict[str, None] = {}

    @property
    def globals(self) -> list[str]:
        """Every global referenced so far, in order of first reference."""
        return list(self._globals)

    @property
    def unsafe(self) -> list[str]:
        """The referenced globals outside the safe set."""
        return [g for g in self._globals if not is_safe_global(g)]

    def at_end(self) -> bool:
        """True when no byte follows the last pickle read."""
        return self.pos >= len(self.data)

    def read(self, what: str, persistent_load: Callable[[Any], Any] | None = None) -> Any:
        """The next pickle's inert object; a failure is raised with the unsafe globals it already named."""
        vm = SafeUnpickler(self.data, pos=self.pos, emulators=self.emulators, persistent_load=persistent_load,
                           resolve_global=resolve_constant if self.emulators else None, what=what, budget=self.budget)
        try:
            obj = vm.load()
        except BudgetExceeded as exc:
            self._globals.update(vm.globals_seen)  # what ran before it ran out still ran
            raise exc.noting(self.unsafe_note()) from None
        except CheckpointFormatError as exc:
            self._globals.update(vm.globals_seen)  # what ran before the failure still ran
            raise self.error(str(exc)) from None
        self._globals.update(vm.globals_seen)
        self.pos = vm.pos
        self.count += 1
        return obj

    def read_rest(self, what: str) -> int:
        """Read every further pickle to the end; returns how many trailing bytes are not a whole pickle."""
        while not self.at_end():  # each pickle begun is charged (vm.PICKLE_COST)
            try:
                self.read(what, inert_persistent_id)
            except BudgetExceeded:
                raise  # refused, not trailing bytes
            except CheckpointFormatError:
                return len(self.data) - self.pos
        return 0

    def error(self, message: str) -> CheckpointFormatError:
        """`message` as an error that also names the unsafe globals the stream referenced before it."""
        return CheckpointFormatError(message + self.unsafe_note())

    def unsafe_note(self) -> str:
        """"; before that point it references globals outside the safe set ...", or "" when none."""
        unsafe = self.unsafe
        if not unsafe:
            return ""
        return "; before that point it references globals outside the safe set (nothing was run): " + ", ".join(unsafe)


def stream_checkpoint(path: str, fmap: FileMap, stream: PickleStream, first: Any) -> Checkpoint:
    """A Checkpoint over the first pickle of `stream`, after reading every pickle that follows it."""
    trailing = stream.read_rest("pickle")
    size = fmap.size
    ckpt = make_checkpoint(path, PLAIN_FORMAT, size, first, stream.globals, stream.budget, pickles=stream.count,
                           files=[fmap])
    if stream.count > 1:
        ckpt.warnings.append(f"the file is a stream of {stream.count} pickles (torch.load or pickle.load "
                             f"would run them one after another): the tree shows the first, the globals "
                             f"of all {stream.count} are listed")
    if trailing:
        # Like torch.load, the leading bytes decide the format: a pickle followed by a zip (a
        # polyglot) is read as the pickle. Say so, so the appended part is not silently hidden.
        tail = fmap.read(size - trailing, 4)
        what = " (a zip archive)" if tail.startswith(b"PK") else ""
        ckpt.warnings.append(f"file continues after the pickle ends: {trailing} more bytes{what} are not a "
                             "pickle and were not read")
    return ckpt

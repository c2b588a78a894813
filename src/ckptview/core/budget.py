"""One budget for all the work a file can cause, paid for by the bytes it holds.

A checkpoint is data from someone else, and a few kilobytes can describe hours of work: a list doubled thirty
times, a record that inflates a thousandfold, ten million edges into one node, a config that declares twenty
thousand layers. So no reader, parser, evaluator, graph builder, layout or figure keeps a cap of its own on
how *often* something happens; each charges one `Budget` per unit of real work it does (a byte inflated or
parsed, a value touched, a node or edge emitted, a name copied, a frame entered), and the budget is derived
from the bytes the file stores: `PER_BYTE` units for each, never fewer than `FLOOR` (so a tiny honest file
is never refused). Running out raises `BudgetExceeded`, one line naming what was too large and from how many
bytes, never an internal error.

Nesting is charged too: every recursive walk enters a `frame()`, and the frames of all walks of one budget
are summed against `MAX_FRAMES`, which the interpreter's stack holds with room to spare (a walk may take a
few Python frames per level). Walks whose depth follows the input use explicit stacks instead.

A budget also carries the job's cancel token: a loop that charges is a loop that Cancel reaches.
docs/limits.md lists the numbers.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ckptview.core.errors import CheckpointFormatError
from ckptview.core.jobs import CancelToken
from ckptview.core.units import human_bytes

__all__ = ["FLOOR", "JSON_VALUE", "MAX_FRAMES", "NESTED_FLOOR", "OPEN_COST", "PER_BYTE", "SOURCE_TOKEN", "Budget", "BudgetExceeded",
           "json_units", "source_units"]

PER_BYTE = 64
"""Units of work each stored byte pays for (a value touched, a byte parsed, a node or edge emitted)."""
FLOOR = 4_000_000
"""Units any file may use, however small it is."""
MAX_FRAMES = 200
"""Frames of recursive walks, summed over every walk charging one budget (the interpreter's default stack
holds 1,000 Python frames; a walk takes up to four per level)."""
CHECK_EVERY = 4096
"""Units charged between two looks at the cancel token."""
OPEN_COST = 4096
"""Units a file opened inside another open (a shard, a part of a folder) costs the enclosing open: a folder of
countless tiny files stops at what its bytes pay for (about a thousand files at the floor)."""
NESTED_FLOOR = 1 << 16
"""The floor of a nested open's own budget (its bytes pay for the rest): a tiny file in a folder is read
whole (a pickle of a few bytes costs ~10,000 units), never at the floor of a file opened on its own."""

# What a unit is: at most about 16 bytes of memory held, or a microsecond of CPU. So `PER_BYTE` units a byte
# keep a file under 1 MB below 1 GiB and a minute of CPU, whatever it declares. A parser whose cost per
# byte depends on the bytes is charged by what they make it build, counted before it runs (in C, cheaply):
SOURCE_TOKEN = 64
"""Units a token of Python source costs `ast.parse` (measured: up to ~900 bytes held per token of `a;a;a;...`;
TorchScript code as torch writes it, ~365 bytes a token and ~0.2 tokens a byte)."""
JSON_VALUE = 6
"""Units a JSON value costs `json.loads` (each value but the first follows one of `,` `:` `[` `{`; a value is
at most ~90 bytes held: `[{"a":0},...]`), plus one unit per 16 bytes for what strings hold."""
_TOKEN = re.compile(rb"[A-Za-z0-9_]+|[^A-Za-z0-9_\s]")


class BudgetExceeded(CheckpointFormatError):
    """A file asks for more work than its bytes pay for. One line for a person; the fields for a front end."""

    def __init__(self, subject: str, what: str, limit: int, stored: int, *, nesting: bool = False,
                 note: str = "") -> None:
        self.subject, self.what, self.limit, self.stored, self.nesting = subject, what, limit, stored, nesting
        self.note = note
        if nesting:  # `limit` is MAX_FRAMES: levels, not units
            text = f"{subject} nests deeper than {limit} levels in all (down to {what}), deeper than any reader walks: refused"
        else:
            text = f"{subject} would take more than {limit:,} units of work ({what}) from {human_bytes(stored)}: refused"
        super().__init__(text + note)

    def noting(self, note: str) -> BudgetExceeded:
        """The same refusal with `note` after it (what a reader found before it ran out)."""
        return BudgetExceeded(self.subject, self.what, self.limit, self.stored, nesting=self.nesting,
                              note=self.note + note)


@dataclass
class Budget:
    """The work one file (or one job over it) may still cause. Used by one thread at a time, but for
    `charge_shared` (the files of a folder opened at once on several threads, each paying for its open)."""

    subject: str
    """What is being read, as a person calls it ("the TorchScript code", "the program's model.json")."""
    stored: int
    """The bytes that pay for the work."""
    limit: int
    """Units of work allowed in all."""
    cancel: CancelToken | None = None
    """The job's cancel token, looked at every `CHECK_EVERY` units."""
    spent: int = 0
    depth: int = 0
    _next_check: int = field(default=CHECK_EVERY, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def for_stored(cls, stored: int, subject: str, *, cancel: CancelToken | None = None,
                   per_byte: int = PER_BYTE, floor: int = FLOOR) -> Budget:
        """The budget `stored` bytes pay for: `per_byte` units each, at least `floor`."""
        return cls(subject, max(0, stored), max(floor, max(0, stored) * per_byte), cancel)

    @property
    def remaining(self) -> int:
        """Units still allowed."""
        return max(0, self.limit - self.spent)

    def charge(self, units: int = 1, what: str = "steps") -> None:
        """Pay for `units` of work; `what` names it in the refusal. Raises BudgetExceeded past the limit and
        Cancelled when the job was cancelled."""
        self.spent += units
        if self.spent > self.limit:
            raise BudgetExceeded(self.subject, what, self.limit, self.stored)
        if self.spent >= self._next_check:
            self._next_check = self.spent + CHECK_EVERY
            if self.cancel is not None:
                self.cancel.check()

    def charge_shared(self, units: int, what: str) -> None:
        """`charge`, from one of several threads charging this budget at once (nested opens run concurrently)."""
        with self._lock:
            self.charge(units, what)

    def affords(self, units: int) -> bool:
        """Whether `units` more could be charged (to choose a cheaper way before starting, not to skip a charge)."""
        return self.spent + units <= self.limit

    @contextmanager
    def frame(self, what: str = "a level") -> Iterator[None]:
        """One level of a recursive walk: charged, and summed with every other walk's levels. `what` names the
        level ("a call", "an expression") in the refusal."""
        self.enter(what)
        try:
            yield
        finally:
            self.depth -= 1

    def enter(self, what: str = "a level", units: int = 1) -> None:
        """`frame()` without the context manager, for a walk's hot path: charges `units` for the level; pair
        every call with `leave()` (in a `finally`), whether it returned or raised."""
        if self.depth >= MAX_FRAMES:
            raise BudgetExceeded(self.subject, what, MAX_FRAMES, self.stored, nesting=True)
        self.charge(units, what)
        self.depth += 1  # only once entered: a refused level is not left

    def leave(self) -> None:
        """The end of a level `enter()` began."""
        self.depth -= 1


def json_units(data: bytes | bytearray) -> int:
    """What parsing `data` as JSON may cost (`JSON_VALUE` a value, a unit per 16 bytes)."""
    values = data.count(b",") + data.count(b":") + data.count(b"[") + data.count(b"{") + 1
    return values * JSON_VALUE + len(data) // 16


def source_units(data: bytes | bytearray) -> int:
    """What parsing `data` as Python source may cost (`SOURCE_TOKEN` a token: a name, a number or a symbol)."""
    return _TOKEN.subn(b"", data)[1] * SOURCE_TOKEN + len(data) // 16

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

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ckptview.core.errors import CheckpointFormatError
from ckptview.core.jobs import CancelToken
from ckptview.core.units import human_bytes

__all__ = ["FLOOR", "MAX_FRAMES", "PER_BYTE", "Budget", "BudgetExceeded"]

PER_BYTE = 64
"""Units of work each stored byte pays for (a value touched, a byte parsed, a node or edge emitted)."""
FLOOR = 4_000_000
"""Units any file may use, however small it is."""
MAX_FRAMES = 200
"""Frames of recursive walks, summed over every walk charging one budget (the interpreter's default stack
holds 1,000 Python frames; a walk takes up to four per level)."""
CHECK_EVERY = 4096
"""Units charged between two looks at the cancel token."""


class BudgetExceeded(CheckpointFormatError):
    """A file asks for more work than its bytes pay for. One line for a person; the fields for a front end."""

    def __init__(self, subject: str, what: str, limit: int, stored: int) -> None:
        self.subject, self.what, self.limit, self.stored = subject, what, limit, stored
        super().__init__(f"{subject} would take more than {limit:,} units of work ({what}) from "
                         f"{human_bytes(stored)}: refused")


@dataclass
class Budget:
    """The work one file (or one job over it) may still cause. Used by one thread at a time."""

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

    def affords(self, units: int) -> bool:
        """Whether `units` more could be charged (to choose a cheaper way before starting, not to skip a charge)."""
        return self.spent + units <= self.limit

    @contextmanager
    def frame(self, what: str = "nesting") -> Iterator[None]:
        """One level of a recursive walk: charged, and summed with every other walk's levels."""
        self.depth += 1
        try:
            if self.depth > MAX_FRAMES:
                raise BudgetExceeded(self.subject, f"{what} deeper than {MAX_FRAMES} levels", self.limit, self.stored)
            self.charge(1, what)
            yield
        finally:
            self.depth -= 1

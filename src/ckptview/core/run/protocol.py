"""The JSON-lines messages between the parent and the run worker, and the bounds the parent keeps (no torch).

The parent writes one request object to the worker's stdin. The worker answers on its own result stream
with `{"event": "phase", "phase": ...}` lines as it goes, then one `{"event": "result", "ok": ...}` line:
on success the op's payload (for a run, `RunResult.to_json()`), on failure `error`, `kind` and what was
reported so far (`load`, `inputs`, `traceback`); an error that says what fixes it (`core.message`) also
carries its `reason` and `hints` (`[[fix, *args], ...]`). `parse_message` reads one such line back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.message import Fix, Hint
from ckptview.core.message import Message as Said
from ckptview.core.run.json_checks import MAX_TEXT
from ckptview.core.run.result import PartialRun

# What the parent keeps of the worker's output, whatever the worker writes.
MAX_EVENT_LINE = 64 << 20  # one JSON line (the result holds every output's statistics)
MAX_EVENTS = 1024
MAX_PHASE = 100  # characters of a phase name
MAX_STDERR_LINE = 2000
MAX_HINTS = 4  # fixes one failure names
STDERR_TAIL = 40
_CHUNK = 1 << 16

# Failure kinds: refused|exception|oom|crash|timeout|cancelled|input|device|protocol|changed|weights.
Emit = Callable[[dict[str, Any]], None]


class WorkerError(Exception):
    """A failure inside the worker with a message for a person and a kind for the parent."""

    def __init__(self, message: str, kind: str = "exception") -> None:
        super().__init__(message)
        self.message, self.kind = message, kind


class Job:
    """The worker's state for one request: the phase reached and the report so far (sent even on failure)."""

    def __init__(self, request: dict[str, Any], emit: Emit) -> None:
        self.request = request
        self.emit = emit
        self.phase = "starting"
        self.report: dict[str, Any] = {}

    def enter(self, phase: str) -> None:
        """Record and announce the phase the job is in."""
        self.phase = phase
        self.emit(PhaseEvent(phase).to_json())


@dataclass(frozen=True)
class PhaseEvent:
    """The worker has entered a phase (importing torch, loading, forward pass, ...)."""

    phase: str

    def to_json(self) -> dict[str, Any]:
        """The message as JSON-able data."""
        return {"event": "phase", "phase": self.phase}


@dataclass(frozen=True)
class ResultMessage:
    """The worker's last message: the op's payload, or the failure with what was reported before it."""

    ok: bool
    payload: dict[str, Any] = field(default_factory=dict)  # success: the op's result; failure: partial report
    error: str = ""
    kind: str = ""

    def to_json(self) -> dict[str, Any]:
        """The message as JSON-able data (payload keys inline, as the contract has always had them)."""
        if self.ok:
            return {"event": "result", "ok": True, **self.payload}
        said = {"reason": self.error.reason, "hints": [[h.fix.value, *h.args] for h in self.error.hints]} if (
            isinstance(self.error, Said)) else {}
        return {"event": "result", "ok": False, "error": self.error, "kind": self.kind, **said, **self.payload}

    def partial(self) -> PartialRun:
        """A failure's report so far (load report, inputs, traceback)."""
        return PartialRun.from_json(self.payload)


Message = PhaseEvent | ResultMessage


def one_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message, at most 300 characters."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else "(no message)"


def error_kind(exc: BaseException) -> str:
    """'oom' for an out-of-memory error of any device, else 'exception'."""
    name = type(exc).__name__
    if name == "OutOfMemoryError" or "out of memory" in str(exc).lower():
        return "oom"
    return "exception"


def parse_message(raw: bytes | str) -> Message | None:
    """One line from the worker as a message; None for anything that is not one (user noise, bad JSON)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("event") == "result":
        payload = {k: v for k, v in data.items() if k not in ("event", "ok", "error", "kind", "reason", "hints")}
        if data.get("ok") is True:
            return ResultMessage(True, payload)
        error, kind = data.get("error"), data.get("kind")
        return ResultMessage(False, payload, _said(data) or (error[:MAX_TEXT] if isinstance(error, str)
                                                             else "the worker failed"),
                             kind[:40] if isinstance(kind, str) else "exception")
    if isinstance(data.get("phase"), str):
        return PhaseEvent(data["phase"][:MAX_PHASE])
    return None


def _said(data: dict[str, Any]) -> Said | None:
    """A failure's reason and hints as a Message; None when the worker sent none, or anything malformed."""
    reason, hints = data.get("reason"), data.get("hints")
    if not isinstance(reason, str) or not isinstance(hints, list) or not 0 < len(hints) <= MAX_HINTS:
        return None
    fixes = {fix.value: fix for fix in Fix}
    said = []
    for hint in hints:
        if (not isinstance(hint, list) or not hint or len(hint) > 3 or hint[0] not in fixes
                or not all(isinstance(arg, str) for arg in hint)):
            return None
        said.append(Hint(fixes[hint[0]], tuple(arg[:MAX_TEXT] for arg in hint[1:])))
    return Said(reason[:MAX_TEXT], *said)


def encode(message: dict[str, Any]) -> str:
    """One JSON line (without the newline); values JSON cannot hold become their str()."""
    return json.dumps(message, default=str)


def bounded_lines(stream: Any, max_line: int) -> Iterator[tuple[bytes, bool]]:
    """(line, cut) for each line of a binary stream, keeping at most `max_line` bytes of each.

    The rest of an over-long line is read and dropped in chunks, so a worker printing a 1 GiB line costs
    the parent `max_line` bytes, not a gigabyte.
    """
    kept: list[bytes] = []
    size, cut = 0, False
    while True:
        chunk = stream.readline(_CHUNK)
        if not chunk:
            if kept or cut:
                yield b"".join(kept), cut
            return
        ended = chunk.endswith(b"\n")
        if ended:
            chunk = chunk[:-1]
        room = max_line - size
        if room > 0:
            kept.append(chunk[:room])
            size += min(len(chunk), room)
        if len(chunk) > room:
            cut = True
        if ended:
            yield b"".join(kept), cut
            kept, size, cut = [], 0, False


__all__ = ["MAX_EVENTS", "MAX_EVENT_LINE", "MAX_STDERR_LINE", "STDERR_TAIL", "Emit", "Job", "Message",
           "PhaseEvent", "ResultMessage", "WorkerError", "bounded_lines", "encode",
           "error_kind", "one_line", "parse_message"]

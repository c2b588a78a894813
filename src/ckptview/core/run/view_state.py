"""What the window's Run panel shows and allows, without Qt: the state `RunPanel` renders.

One object holds where the panel is (`Phase`: idle, reading a URL's config.json, starting, running, done,
failed, cancelled), what the checkpoint is as a model (`ModelLine`: its source kind, the architecture a
library names or why none, what trusting it would run), the devices offered, the consent given per file,
and the last result or error. The panel words and draws it; tests drive it bare.

Run may start only when nothing is in flight (`can_start`): a run, or the reading of a URL's config.json,
whose answer decides what Run does. A run ends done (a result), failed (an error) or cancelled; an error
shown while a run is in flight (a model file that does not parse) is remembered without ending the run.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.message import message_of
from ckptview.core.read.bytes.location import locate
from ckptview.core.run import request as runner
from ckptview.core.run.architectures import Architecture, ArchitectureRefused, missing_library, recognize
from ckptview.core.run.devices import DeviceInfo
from ckptview.core.run.result import RunResult
from ckptview.core.run.state_dict import state_dict_tensors

# Before the worker has listed the machine's devices, these two always exist.
DEFAULT_DEVICES = [DeviceInfo("cpu", "cpu", True, description="CPU"),
                   DeviceInfo("meta", "meta", True, description="shape-only dry run: no memory, no values")]
# Sources that need model code (or an architecture a library names) besides the file.
NEEDS_CODE = (runner.STATE_DICT, runner.PICKLE, runner.LIGHTNING)


class Phase(enum.Enum):
    """Where the panel is."""

    IDLE = "idle"  # nothing run yet (or the URL's config.json has been read): Run may start
    RECOGNIZING = "recognizing"  # a URL's config.json is being read: Run waits for its answer
    STARTING = "starting"  # the worker process is starting
    RUNNING = "running"  # the worker reported progress
    DONE = "done"  # a result
    FAILED = "failed"  # an error: the run failed, or could not start
    CANCELLED = "cancelled"  # the user stopped the run


BUSY = frozenset({Phase.RECOGNIZING, Phase.STARTING, Phase.RUNNING})


class Line(enum.Enum):
    """Which Model line the panel shows."""

    NO_CHECKPOINT = "no checkpoint"
    UNREADABLE = "unreadable"  # the file's kind could not be told: `detail` says why
    PENDING = "pending"  # a URL's config.json is being read: `detail` says so
    BUNDLED = "bundled"  # ckptview's own example MLP
    ARCHITECTURE = "architecture"  # a state dict whose architecture an installed library builds
    REFUSED = "refused"  # a state dict whose folder names no architecture ckptview builds: `detail` says why
    SOURCE = "source"  # the file's kind alone (TorchScript, .pt2, state dict, pickle, Lightning)


@dataclass(frozen=True)
class ModelLine:
    """What the Model line says, apart from its words: which line, its detail, and the code trusting runs."""

    line: Line
    kind: str = ""  # the source kind (runner.TORCHSCRIPT, ...)
    detail: str = ""
    programs: tuple[str, ...] = ()  # code from the file that loading runs (graph archives, libraries)
    findings: tuple[str, ...] = ()  # other code its pickles name (runs only when trusted)


@dataclass
class RunViewState:
    """The Run panel's state (see the module's docstring)."""

    path: str = ""
    phase: Phase = Phase.IDLE
    source: runner.SourceInfo | None = None
    source_error: str = ""  # why the file's kind could not be told
    arch: Architecture | None = None  # a state dict's architecture, named by its config.json
    refused: str = ""  # why a state dict's folder names no architecture ckptview builds
    pending: str = ""  # what is being read to name the architecture
    devices: list[DeviceInfo] = field(default_factory=lambda: list(DEFAULT_DEVICES))
    trusted: dict[str, list[str]] = field(default_factory=dict)  # path -> the findings the user accepted
    result: RunResult | None = None
    error: str = ""  # the last error shown, one line

    # -- the source ----------------------------------------------------------------------------------------
    def classified(self, source: runner.SourceInfo | None, error: str = "") -> None:
        """The file's kind was told (or `error` says why not)."""
        self.source, self.source_error = source, error

    def named(self, arch: Architecture | None, refused: str = "") -> None:
        """The architecture was looked for: found, or `refused` says why none runs."""
        self.arch, self.refused, self.pending = arch, refused, ""
        if self.phase is Phase.RECOGNIZING:
            self.phase = Phase.IDLE

    def name_local(self, checkpoint: Any = None) -> None:
        """Name the architecture a local state dict's config.json names (read as data; `checkpoint`, the tab's
        opened one, saves reading its metadata again), or why none runs; a URL's is fetched (`fetches_config`)."""
        if self.source is None or self.source.kind != runner.STATE_DICT or not self.path or locate(self.path).is_remote:
            self.named(None)
            return
        try:
            arch = recognize(self.path, state_dict_tensors(self.path, checkpoint))  # metadata only
            missing = missing_library(arch) if arch is not None else ""
            if missing:
                self.named(None, missing)
            else:
                self.named(arch)
        except ArchitectureRefused as exc:
            self.named(None, message_of(exc))  # a Message: each front end words its fixes

    def fetches_config(self) -> bool:
        """A URL's state dict: its config.json is fetched (in a worker) to name its architecture."""
        return self.source is not None and self.source.kind == runner.STATE_DICT and locate(self.path).is_remote

    def needs_code(self) -> bool:
        """The source needs model code beside the file (the Model code and Arguments fields apply)."""
        return self.source is not None and self.source.kind in NEEDS_CODE

    def model_line(self) -> ModelLine:
        """What the Model line says: the source, the architecture (or why none), the code trusting runs."""
        if not self.path:
            return ModelLine(Line.NO_CHECKPOINT)
        source = self.source
        if source is None:
            return ModelLine(Line.UNREADABLE, detail=self.source_error)
        if self.pending:
            line, detail = Line.PENDING, self.pending
        elif self.arch is not None:
            line = Line.BUNDLED if self.arch.library == "ckptview" else Line.ARCHITECTURE
            detail = self.arch.describe()
        elif self.refused:
            line, detail = Line.REFUSED, self.refused
        else:
            line, detail = Line.SOURCE, ""
        programs = tuple(source.programs) if source.kind != runner.LIGHTNING else ()
        findings = tuple(f for f in source.findings if f not in source.programs) \
            if source.kind not in (runner.PICKLE, runner.LIGHTNING) else ()
        return ModelLine(line, source.kind, detail, programs, findings)

    # -- devices -------------------------------------------------------------------------------------------
    def offer(self, devices: Sequence[DeviceInfo], current: str | None) -> str:
        """Offer `devices`; the one to select: `current` while it is available, else the first available."""
        self.devices = list(devices)
        names = [d.name for d in self.devices if d.available]
        return current if current in names else names[0] if names else "cpu"

    def available(self, name: str) -> bool:
        """`name` is offered and can be used."""
        return any(d.name == name and d.available for d in self.devices)

    # -- consent -------------------------------------------------------------------------------------------
    def consent_wanted(self, files: Sequence[tuple[str | None, list[str]]]) -> list[tuple[str, list[str]]]:
        """The files (path, findings) whose findings the user has not accepted yet, in order."""
        return [(path, found) for path, found in files if path and found and self.trusted.get(path) != found]

    def consented(self, files: Sequence[tuple[str, list[str]]]) -> None:
        """The user accepted these files' findings."""
        self.trusted.update(dict(files))

    # -- the phase -----------------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """A run, or the reading of a URL's config.json, is in flight."""
        return self.phase in BUSY

    def running(self) -> bool:
        """A run is in flight."""
        return self.phase in (Phase.STARTING, Phase.RUNNING)

    def can_start(self) -> bool:
        """Run may start: nothing is in flight."""
        return not self.busy

    def recognizing(self, pending: str) -> bool:
        """A URL's config.json is being read (`pending` says so); False when something is in flight."""
        if self.busy:
            return False
        self.phase, self.pending = Phase.RECOGNIZING, pending
        return True

    def starting(self) -> bool:
        """A run starts: the last result is dropped; False when something is in flight."""
        if self.busy:
            return False
        self.phase, self.result, self.error = Phase.STARTING, None, ""
        return True

    def progressed(self) -> None:
        """The worker reported progress."""
        if self.phase is Phase.STARTING:
            self.phase = Phase.RUNNING

    def finished(self, result: RunResult) -> None:
        """The run returned a result."""
        self.phase, self.result, self.error = Phase.DONE, result, ""

    def failed(self, message: str) -> None:
        """The run failed: `message` says why."""
        self.phase, self.error = Phase.FAILED, message

    def refused_start(self, message: str) -> None:
        """Run could not start, or a chosen model file was refused: the error is shown, nothing in flight
        changes."""
        self.error = message
        if not self.busy:
            self.phase = Phase.FAILED

    def cancelled(self, message: str) -> None:
        """The user stopped the run (`message` says so)."""
        self.phase, self.error = Phase.CANCELLED, message

    def ended(self) -> None:
        """The run's job is over; one that ended without a word (dropped) leaves the panel idle."""
        if self.running():
            self.phase = Phase.IDLE

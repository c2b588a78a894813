"""The run worker as a process, from the parent's side: start it isolated, feed it, read it, kill it.

`execute` starts `python -I` in a private temporary folder with one request on stdin, reads the worker's
JSON-lines messages (`core.run_protocol`) from its stdout with bounded memory, and turns a crash, a hang
past the timeout or a cancel into a one-line `RunError`. The worker gets its own process group, and killing
the job kills that group. No torch here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Generator, Iterable
from typing import Any, Protocol

from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import Progress
from ckptview.core.run.child import OFFLINE_ENV, child_command, scratch_folder, start_child
from ckptview.core.run.protocol import (
    MAX_EVENT_LINE,
    MAX_EVENTS,
    MAX_STDERR_LINE,
    STDERR_TAIL,
    PhaseEvent,
    ResultMessage,
    bounded_lines,
    parse_message,
)
from ckptview.core.run.result import LoadReport, PartialRun, RunResult

RESULT_GRACE = 5.0  # seconds a worker may take to exit after sending its result


class RunError(CheckpointError):
    """The job failed; `kind` is one of refused|exception|oom|crash|timeout|cancelled|input|device|protocol|
    changed|weights."""

    def __init__(self, message: str, kind: str = "exception", result: RunResult | PartialRun | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        # What the worker reported: the whole result when the run finished but its weights failed the check,
        # else what it had reported before failing (load report, inputs, traceback); empty when nothing.
        self.result: RunResult | PartialRun = result if result is not None else PartialRun()

    @property
    def load(self) -> LoadReport | None:
        """The load report, when the worker got that far."""
        return self.result.load

    @property
    def traceback(self) -> str | None:
        """The worker's traceback of an exception in model code, when there was one."""
        return self.result.traceback if isinstance(self.result, PartialRun) else None


class Cancellable(Protocol):
    """Anything with a `cancelled` flag (core.jobs.CancelToken)."""

    @property
    def cancelled(self) -> bool: ...


# Run by `python -I -c`: no current directory, PYTHONPATH or user site on sys.path. ckptview is imported from
# the folder the parent's own ckptview was imported from (argv[1]), not looked up on sys.path.
# The child's module (argv[2]) is imported from there and its `entry()` run; its own arguments follow.
WORKER = "ckptview.core.worker.entry"  # the forward pass's worker


def worker_command() -> list[str]:
    """The command line that starts an isolated forward-pass worker with this interpreter."""
    return child_command(WORKER)


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}  # -I ignores them; be plain
    env["PYTHONUNBUFFERED"] = "1"
    env.update(OFFLINE_ENV)  # a library build fetches nothing: the Hub libraries read these when imported
    return env


class WorkerJob:
    """One running worker: feed it a request, collect its events, kill it (and its children) on demand.

    It runs in a private temporary folder (its working directory, where the load gate keeps its copies),
    removed when the job is killed or reaped.
    """

    def __init__(self, request: dict[str, Any]) -> None:
        kwargs: dict[str, Any] = {}
        if os.name == "posix":
            kwargs["start_new_session"] = True  # its own process group: kill() reaches user subprocesses
        else:
            kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
        self.workdir = scratch_folder("run")  # mode 0700, named for this process (core/run/child.py)
        self.started = time.monotonic()
        try:
            # Its lifeline: it dies with this process, and takes its folder along (core/worker/lifeline.py).
            self.child = start_child(WORKER, cwd=self.workdir, env=_worker_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
        except OSError:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        self.proc = self.child.proc
        self.events: deque[PhaseEvent] = deque(maxlen=MAX_EVENTS)
        self.result: ResultMessage | None = None
        self.result_at = 0.0
        self.phase = "starting"
        self.protocol_error = ""
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for thread in self._threads:
            thread.start()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request).encode())
            self.proc.stdin.close()
        except OSError:
            pass  # the worker died at once; its exit status tells why

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:  # closed when the worker's output ends: a pipe must not outlive its job
            self._read_events()

    def _read_events(self) -> None:
        assert self.proc.stdout is not None
        for raw, cut in bounded_lines(self.proc.stdout, MAX_EVENT_LINE):
            if cut:
                self.protocol_error = f"the worker sent a message over {MAX_EVENT_LINE >> 20} MiB"
                continue
            message = parse_message(raw)
            with self._lock:
                if isinstance(message, ResultMessage):
                    self.result = message
                    self.result_at = self.elapsed()
                elif isinstance(message, PhaseEvent):
                    self.phase = message.phase
                    self.events.append(message)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:
            for raw, cut in bounded_lines(self.proc.stderr, MAX_STDERR_LINE):
                line = raw.decode("utf-8", "replace").rstrip() + (" [...]" if cut else "")
                if line:
                    self.stderr_tail.append(line)

    def pop_events(self) -> list[PhaseEvent]:
        """Phase events received since the last call."""
        with self._lock:
            out = list(self.events)
            self.events.clear()
        return out

    def poll(self) -> int | None:
        """The exit status once the worker has ended (and its output is read), else None."""
        code = self.proc.poll()
        if code is None:
            return None
        for thread in self._threads:
            thread.join(timeout=5)
        return code

    def kill(self) -> None:
        """Kill the worker and everything it started; device memory goes with the process."""
        if self.proc.poll() is None:
            try:
                if os.name == "posix":
                    os.killpg(self.proc.pid, signal.SIGKILL)
                else:
                    self.proc.kill()
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for thread in self._threads:
            thread.join(timeout=2)
        self.child.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def elapsed(self) -> float:
        """Seconds since the worker was started."""
        return time.monotonic() - self.started


_PHASE_WORDS = {"starting": "start-up", "importing torch": "start-up (importing torch)",
                "model code": "the model code", "inputs": "making the inputs", "forward pass": "the forward pass",
                "warm-up": "the warm-up runs", "timing": "the timed runs", "compare": "the second checkpoint's run"}


def phase_words(phase: str) -> str:
    """A worker phase as words for a message ('forward pass' -> 'the forward pass')."""
    return _PHASE_WORDS.get(phase, phase)


def _death_message(code: int, phase: str, stderr_tail: Iterable[str]) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        how = f"was killed by {name}" + (" (segmentation fault)" if name == "SIGSEGV" else "")
    else:
        how = f"exited with status {code}"
    last = next((line for line in reversed(list(stderr_tail))
                 if line.strip() and not line.startswith(("Fatal Python error", "  File", "Current thread",
                                                           "Thread 0x", "Extension modules"))), "")
    tail = f" (last output: {last.strip()[:200]})" if last else ""
    return f"the worker process {how} during {phase_words(phase)}{tail}"


def execute(request: dict[str, Any], timeout: float, token: Cancellable | None = None,
            poll_interval: float = 0.05) -> Generator[Progress, None, dict[str, Any]]:
    """Run one worker request; yields a Progress per phase, returns its result or raises RunError."""
    job = WorkerJob(request)
    step = 0
    try:
        while True:
            for event in job.pop_events():
                step += 1
                yield Progress(step, 0, event.phase)
            code = job.poll()
            if code is not None:
                break
            if job.result is not None and job.elapsed() - job.result_at > RESULT_GRACE:
                job.kill()  # it answered but does not exit: the answer stands
                code = 0
                break
            if token is not None and token.cancelled:
                job.kill()
                raise RunError(f"cancelled during {phase_words(job.phase)}; the worker was stopped", kind="cancelled")
            if job.elapsed() > timeout:
                phase = job.phase
                job.kill()
                raise RunError(f"timed out after {timeout:g} s during {phase_words(phase)}; the worker was stopped",
                               kind="timeout")
            time.sleep(poll_interval)
    finally:
        job.kill()  # no-op when it ended; never leave a worker behind (GeneratorExit included)
    message = job.result
    if message is None and job.protocol_error:
        raise RunError(job.protocol_error, kind="protocol")
    if message is None:
        raise RunError(_death_message(code, job.phase, job.stderr_tail), kind="crash")
    if not message.ok:
        raise RunError(message.error, kind=message.kind, result=message.partial())
    return message.payload

"""Load a checkpoint onto a device and run a forward pass, in a worker process started for the job.

The parent side: it decides where the model comes from (without torch and without running anything from
the file), starts `python -m ckptview.core.run_worker` with a JSON request on stdin, reads the worker's
JSON lines (phase events, then one result) from its stdout, and turns a crash, a hang past the timeout or a
cancel into a one-line `RunError`. The worker's own stdout is its stderr, so prints in user code cannot
corrupt the result stream. The worker gets its own process group, and killing the job kills that group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections import deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import Progress
from ckptview.core.run_inputs import InputSpec

# Source kinds, in order of how much trust they need.
TORCHSCRIPT, EXPORT, STATE_DICT, PICKLE = "torchscript", "export", "state_dict", "pickle"
# Keys under which training checkpoints keep the model's weights (Lightning, common scripts, HF trainers).
STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model_state", "model", "module", "net", "network",
                   "weights", "params", "ema_state_dict")
# Wrapper prefixes: DataParallel/DDP, torch.compile, Lightning/HF wrappers.
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "model.")
# Path components of a pickled nn.Module's own state that a state_dict() key leaves out.
_MODULE_INTERNALS = ("_modules", "_parameters", "_buffers")
DEFAULT_TIMEOUT = 300.0
RESULT_GRACE = 5.0  # seconds a worker may take to exit after sending its result


class RunError(CheckpointError):
    """The job failed; `kind` is one of refused|exception|oom|crash|timeout|cancelled|input|device|protocol."""

    def __init__(self, message: str, kind: str = "exception", result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        # What the worker reported before failing (load report, traceback), when anything.
        self.result = result or {}


class _Cancellable(Protocol):
    @property
    def cancelled(self) -> bool: ...


@dataclass
class RunRequest:
    """Everything the worker needs; `to_json` is what travels on its stdin."""

    path: str
    device: str = "cpu"
    model: str | None = None  # "package.module:factory" or "path/to/file.py:ClassName"
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    trust: bool = False
    inputs: list[InputSpec] | None = None  # None: read from the graph, or guessed from the first layer
    input_file: str | None = None  # .npy / .npz values (overrides `inputs`)
    seed: int = 0
    runs: int = 10
    warmup: int = 2
    compare_path: str | None = None  # "run with another checkpoint": same input, second weights
    first_values: int = 8
    cwd: str | None = None  # where the worker runs (module specs and pickled classes import from there)
    timeout: float = DEFAULT_TIMEOUT

    def to_json(self) -> dict[str, Any]:
        """The request as JSON-able data."""
        data = asdict(self)
        data["inputs"] = None if self.inputs is None else [s.to_json() for s in self.inputs]
        for key in ("path", "input_file", "compare_path", "cwd"):
            if data[key]:
                data[key] = os.path.abspath(data[key])
        if data["model"] and ".py:" in data["model"] and not os.path.isabs(data["model"]):
            data["model"] = os.path.abspath(data["model"])
        return data


# ---------------------------------------------------------------------------------------------------
# Where the model comes from (no torch, nothing from the file runs)


@dataclass
class SourceInfo:
    """What kind of model a file holds and what trusting it would import."""

    kind: str
    unsafe_globals: list[str] = field(default_factory=list)
    format: str = ""


def sniff_archive(path: str) -> str | None:
    """TORCHSCRIPT or EXPORT when `path` is a zip carrying a graph, else None (reads the zip directory)."""
    if not zipfile.is_zipfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return None
    tails = {name.split("/", 1)[-1] for name in names}
    if "archive_format" in tails or "serialized_exported_program.json" in tails or any(
            t.startswith("models/") and t.endswith(".json") for t in tails):
        return EXPORT
    if "constants.pkl" in tails and any(t.startswith("code/") for t in tails):
        return TORCHSCRIPT
    return None


def classify_source(path: str, model: str | None = None, checkpoint: Any = None) -> SourceInfo:
    """Decide how the worker will build the model: graph archive, state dict + code, or a full pickle.

    `checkpoint`, when the caller already opened `path`, saves reading its metadata again.
    """
    if checkpoint is not None:  # its reader already told the formats apart: no second look at the file
        kind = {"torchscript": TORCHSCRIPT, "torch-export": EXPORT}.get(checkpoint.format)
    else:
        kind = sniff_archive(path) if os.path.isfile(path) else None
    if kind is not None:
        return SourceInfo(kind, format=kind)
    own = checkpoint is None
    if own:
        from ckptview.core import open_checkpoint

        checkpoint = open_checkpoint(path)
    try:
        unsafe = list(checkpoint.unsafe_globals)
        if model:
            return SourceInfo(STATE_DICT, unsafe, checkpoint.format)
        return SourceInfo(PICKLE if unsafe else STATE_DICT, unsafe, checkpoint.format)
    finally:
        if own:
            checkpoint.close()


def check_trust(source: SourceInfo, trust: bool, has_model: bool) -> None:
    """Refuse (RunError 'refused') what needs consent or code the user has not given."""
    if source.kind == PICKLE and not trust:
        names = ", ".join(source.unsafe_globals[:6]) + (" ..." if len(source.unsafe_globals) > 6 else "")
        raise RunError(f"refusing to run a full-model pickle without --trust: loading it imports and runs "
                       f"{names}", kind="refused")
    if source.kind == STATE_DICT and not has_model:
        raise RunError("this file is a state dict (weights only): give the model code with "
                       "--model package.module:factory or --model path/to/file.py:ClassName", kind="refused")


def find_state_dict(checkpoint: Any) -> tuple[str, dict[str, Any]]:
    """(key it was found under or '', {state_dict key: TensorInfo}) of a checkpoint's model weights."""
    base = checkpoint.root
    for key in STATE_DICT_KEYS:
        child = next((c for c in base.children if c.key == key and c.kind in ("dict", "object")), None)
        if child is not None and any(n.kind == "tensor" for n in child.walk()):
            base = child
            break
    depth = len(base.path)
    found: dict[str, Any] = {}
    for entry in checkpoint.tensors():
        if entry.path[:depth] != base.path:
            continue
        parts = [str(p) for p in entry.path[depth:] if p not in _MODULE_INTERNALS]
        found[".".join(parts)] = entry.info
    return (base.name if base is not checkpoint.root else ""), found


def strip_prefixes(keys: Iterable[str], model_keys: Iterable[str],
                   prefixes: tuple[str, ...] = WRAPPER_PREFIXES) -> tuple[dict[str, str], list[str]]:
    """Map checkpoint keys to model keys by peeling wrapper prefixes, keeping the peel that matches most.

    Returns ({checkpoint key: model key}, prefixes stripped in order). `module._orig_mod.x` peels twice;
    a model whose own keys start with `model.` keeps them (peeling would match fewer keys).
    """
    model_set = set(model_keys)
    mapping = {k: k for k in keys}
    best, best_seq, best_score = mapping, [], _overlap(mapping.values(), model_set)
    seq: list[str] = []
    for _ in range(8):  # wrappers nest a few levels at most
        counts = {p: sum(1 for v in mapping.values() if v.startswith(p)) for p in prefixes}
        prefix = max(counts, key=lambda p: counts[p])
        if counts[prefix] == 0:
            break
        mapping = {k: v.removeprefix(prefix) for k, v in mapping.items()}
        seq = [*seq, prefix]
        score = _overlap(mapping.values(), model_set)
        if score > best_score:
            best, best_seq, best_score = mapping, seq, score
    return best, best_seq


def _overlap(keys: Iterable[str], model_set: set[str]) -> int:
    return sum(1 for k in keys if k in model_set)


def suggest_inputs(path: str, checkpoint: Any = None) -> list[InputSpec] | None:
    """A guess at the input for a state dict: batch 2 of the first 2-D weight's in-features (no torch)."""
    own = checkpoint is None
    if own:
        from ckptview.core import open_checkpoint

        try:
            checkpoint = open_checkpoint(path)
        except CheckpointError:
            return None
    try:
        _, tensors = find_state_dict(checkpoint)
        for name, info in tensors.items():
            if name.endswith("weight") and len(info.shape) == 2 and "embed" not in name:
                return [InputSpec(shape=(2, int(info.shape[1])))]
        return None
    finally:
        if own:
            checkpoint.close()


# ---------------------------------------------------------------------------------------------------
# The worker process


def worker_command() -> list[str]:
    """The command line that starts a worker with this interpreter."""
    return [sys.executable, "-m", "ckptview.core.run_worker"]


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # The worker must import this very ckptview, installed or not.
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONFAULTHANDLER", "1")  # a segfault leaves a trace on stderr for the log
    return env


class WorkerJob:
    """One running worker: feed it a request, collect its events, kill it (and its children) on demand."""

    def __init__(self, request: dict[str, Any], cwd: str | None = None) -> None:
        kwargs: dict[str, Any] = {}
        if os.name == "posix":
            kwargs["start_new_session"] = True  # its own process group: kill() reaches user subprocesses
        else:
            kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=cwd, env=_worker_env(), **kwargs)
        self.events: deque[dict[str, Any]] = deque()
        self.result: dict[str, Any] | None = None
        self.result_at = 0.0
        self.phase = "starting"
        self.stderr_tail: deque[str] = deque(maxlen=40)
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
        for raw in self.proc.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            with self._lock:
                if event.get("event") == "result":
                    self.result = event
                    self.result_at = self.elapsed()
                else:
                    if event.get("phase"):
                        self.phase = event["phase"]
                    self.events.append(event)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self.stderr_tail.append(line)

    def pop_events(self) -> list[dict[str, Any]]:
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


def execute(request: dict[str, Any], timeout: float, token: _Cancellable | None = None,
            cwd: str | None = None, poll_interval: float = 0.05) -> Generator[Progress, None, dict[str, Any]]:
    """Run one worker request; yields a Progress per phase, returns its result or raises RunError."""
    job = WorkerJob(request, cwd=cwd)
    step = 0
    try:
        while True:
            for event in job.pop_events():
                step += 1
                yield Progress(step, 0, event.get("phase", ""))
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
    result = job.result
    if result is None:
        raise RunError(_death_message(code, job.phase, job.stderr_tail), kind="crash")
    if not result.get("ok"):
        raise RunError(result.get("error", "the worker failed"), kind=result.get("kind", "exception"),
                       result=result)
    result.pop("event", None)
    result.pop("ok", None)
    return result


def _drain(gen: Generator[Progress, None, dict[str, Any]],
           on_progress: Callable[[Progress], None] | None) -> dict[str, Any]:
    while True:
        try:
            progress = next(gen)
        except StopIteration as stop:
            return stop.value
        if on_progress is not None:
            on_progress(progress)


def run_iter(request: RunRequest, token: _Cancellable | None = None
             ) -> Generator[Progress, None, dict[str, Any]]:
    """The forward-pass job as a core generator (for GUI workers): yields phases, returns the result."""
    if not os.path.exists(request.path):
        raise RunError(f"no such file: {request.path}", kind="input")
    source = classify_source(request.path, request.model)
    check_trust(source, request.trust, bool(request.model))
    payload = request.to_json()
    payload["op"] = "run"
    payload["source"] = source.kind
    result = yield from execute(payload, request.timeout, token, cwd=request.cwd)
    return result


def run(request: RunRequest, token: _Cancellable | None = None,
        on_progress: Callable[[Progress], None] | None = None) -> dict[str, Any]:
    """Load and run in a worker; the result dict (see README) or RunError with a one-line message."""
    return _drain(run_iter(request, token), on_progress)


def probe_devices(timeout: float = 60.0, token: _Cancellable | None = None) -> list[Any]:
    """`list_devices()` measured in a worker, so CUDA contexts and driver faults stay out of this process."""
    from ckptview.core.devices import DeviceInfo

    result = _drain(execute({"op": "devices"}, timeout, token), None)
    return [DeviceInfo.from_json(d) for d in result["devices"]]


def inspect_inputs(path: str, timeout: float = 60.0, token: _Cancellable | None = None
                   ) -> list[InputSpec] | None:
    """The input signature a TorchScript/.pt2 graph declares (loaded in a worker), else a guess, else None."""
    kind = sniff_archive(path) if os.path.isfile(path) else None
    if kind is None:
        return suggest_inputs(path)
    result = _drain(execute({"op": "inspect", "path": os.path.abspath(path), "source": kind}, timeout, token),
                    None)
    specs = result.get("inputs")
    return None if not specs else [InputSpec.from_json(s) for s in specs]

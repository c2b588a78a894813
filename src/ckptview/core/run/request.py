"""Load a checkpoint onto a device and run a forward pass, in a worker process started for the job.

The parent side: it decides where the model comes from (without torch and without running anything from
the file), refuses what needs consent the user has not given, runs the request in a worker process
(`core.run_process`), and checks the typed result (`core.run_result`): weights that did not load become
warnings, or an error when none loaded. The worker's own stdout is its stderr, so prints in user code
cannot corrupt the result stream.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, field
from typing import Any

from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import Progress, drain
from ckptview.core.message import Fix, Hint, Message, message_of
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.pickle.census import census
from ckptview.core.run.architectures import ArchitectureRefused, recognize_checkpoint
from ckptview.core.run.devices import DeviceInfo
from ckptview.core.run.fetch import fetch
from ckptview.core.run.input_specs import InputSpec, program_inputs
from ckptview.core.run.json_checks import ProtocolError
from ckptview.core.run.lightning import LightningCheckpoint, LightningRefused, recognize_lightning
from ckptview.core.run.process import Cancellable, RunError, execute
from ckptview.core.run.result import RunResult
from ckptview.core.run.state_dict import suggest_inputs
from ckptview.core.run.weights import check_weights, weight_warnings

# Source kinds, in order of how much trust they need.
TORCHSCRIPT, EXPORT, STATE_DICT, PICKLE = "torchscript", "export", "state_dict", "pickle"
# A state dict whose architecture an installed library knows (config.json, or keys and shapes): no code needed.
LIBRARY = "library"
# A Lightning .ckpt: the LightningModule its file names (consent) or the user gives, built from hyper_parameters.
LIGHTNING = "lightning"
DEFAULT_TIMEOUT = 300.0


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
    trust_compare: bool = False  # the second checkpoint's own consent (--trust-compare)
    # The findings the user was shown and accepted (the consent dialog); None: those found when the run starts
    # (--trust). The worker refuses a file that shows anything beyond them.
    trusted_findings: list[str] | None = None
    compare_trusted_findings: list[str] | None = None
    strict: bool = False  # missing, unexpected, mismatched or unplaced weights fail the run
    # A weight of the model not loaded from the file fails the run unless the user asks for a partial load;
    # then every line of the result says so (`RunResult.partial`).
    allow_missing: bool = False
    first_values: int = 8
    # The caller's folder (default: the current directory). The worker never runs there and never puts it on
    # sys.path: only the top-level module a `package.module:factory` spec names, and the modules whose classes
    # a trusted pickle names, are looked up here, after the installed packages.
    cwd: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    def to_json(self) -> dict[str, Any]:
        """The request as JSON-able data."""
        data = asdict(self)
        data["inputs"] = None if self.inputs is None else [s.to_json() for s in self.inputs]
        data["cwd"] = self.cwd or os.getcwd()
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
    """What kind of model a file holds, what trusting it would import, and what consent must cover."""

    kind: str
    unsafe_globals: list[str] = field(default_factory=list)
    format: str = ""
    findings: list[str] = field(default_factory=list)  # what torch would run (census findings); []: no consent
    programs: list[str] = field(default_factory=list)  # the findings that are code from the file
    lightning: LightningCheckpoint | None = None  # a Lightning .ckpt's class path and hyper-parameters


GRAPH_FORMATS = {"torchscript": TORCHSCRIPT, "torch-export": EXPORT}
PROGRAM_WORDS = {TORCHSCRIPT: "its TorchScript code", EXPORT: "its exported program"}


def classify_source(path: str, model: str | None = None, checkpoint: Any = None) -> SourceInfo:
    """Decide how the worker will build the model: graph archive, state dict + code, or a full pickle.

    The reader registry tells the formats apart (`checkpoint`, when the caller already opened `path`, saves
    reading its metadata again). Sources torch loads carry the census findings; a graph always needs consent.
    """
    own = checkpoint is None
    if own:
        checkpoint = open_checkpoint(path)
    try:
        kind = GRAPH_FORMATS.get(checkpoint.format)
        unsafe = model_unsafe_globals(checkpoint)
        if kind is None:
            lightning = _lightning(checkpoint, path)
            if lightning is not None:  # the class the file names is code it chooses: consent, unless --model
                named = [lightning.class_path] if lightning.class_path and not model else []
                return SourceInfo(LIGHTNING, unsafe, checkpoint.format, named, list(named), lightning)
            if model or not unsafe:
                return SourceInfo(STATE_DICT, unsafe, checkpoint.format)
            kind = PICKLE
        found = _census(path, torchscript=kind == TORCHSCRIPT)
        unsafe += [g for g in found.unsafe if g not in unsafe]
        programs = list(found.programs) or ([PROGRAM_WORDS[kind]] if kind in PROGRAM_WORDS else [])
        findings = programs + [f for f in found.findings() if f not in programs]
        return SourceInfo(kind, unsafe, checkpoint.format, findings, programs)
    finally:
        if own:
            checkpoint.close()


def model_unsafe_globals(checkpoint: Any) -> list[str]:
    """The unsafe globals of the model's weights: in a training folder, those of its model entry alone (its
    `training_args.bin` is a full pickle torch never loads for a forward pass); elsewhere, the file's."""
    entry = checkpoint.metadata.get("model_entry") if checkpoint.format == "training-folder" else None
    by_entry = checkpoint.metadata.get("unsafe_by_entry") if entry is not None else None
    if isinstance(by_entry, dict) and entry in by_entry:
        return list(by_entry[entry])
    return list(checkpoint.unsafe_globals)


def _lightning(checkpoint: Any, path: str) -> LightningCheckpoint | None:
    try:
        return recognize_lightning(checkpoint, path)
    except LightningRefused as exc:
        raise RunError(str(exc), kind="refused") from None


def _census(path: str, torchscript: bool = False) -> Any:
    try:
        return census(path, torchscript=torchscript or None)
    except OSError as exc:
        raise RunError(f"cannot read {path}: {exc.strerror or exc}", kind="input") from None


_KIND_WORDS = {TORCHSCRIPT: "TorchScript archive", EXPORT: ".pt2 program", PICKLE: "full-model pickle"}


def check_trust(source: SourceInfo, trust: bool, has_model: bool) -> None:
    """Refuse (RunError 'refused') what needs consent or code the user has not given."""
    if source.lightning is not None:
        if not source.lightning.class_path and not has_model:
            raise RunError(source.lightning.no_class_line(), kind="refused")
        if source.findings and not trust:
            raise RunError(source.lightning.consent_line(), kind="refused")
        return
    if source.kind == STATE_DICT and not has_model:
        raise RunError(Message("this file is a state dict (weights only) and no installed library names its "
                               "architecture (no config.json beside it)", Hint(Fix.MODEL)), kind="refused")
    if source.findings and not trust:
        if source.kind == PICKLE and not source.programs:
            raise RunError(Message(f"refusing to run a full-model pickle nobody trusted: loading it imports and runs "
                                   f"{_names(source.findings)}", Hint(Fix.TRUST)), kind="refused")
        raise RunError(Message(f"refusing to load this {_KIND_WORDS[source.kind]} nobody trusted: "
                               f"{_what_runs(source)}", Hint(Fix.TRUST)), kind="refused")


def _what_runs(source: SourceInfo) -> str:
    """One line: the programs loading the file runs, then what its pickles import and run."""
    rest = [f for f in source.findings if f not in source.programs]
    return "; ".join([*([f"loading it runs code from the file: {_names(source.programs)}"] if source.programs
                        else []),
                      *([f"torch would unpickle records that import and run {_names(rest)}"] if rest else [])])


def check_compare_trust(compare: SourceInfo | None, trust_compare: bool) -> None:
    """Refuse a second checkpoint that torch would load and that needs its own consent (`trust_compare`)."""
    if compare is not None and compare.findings and not trust_compare:
        verb = "runs" if compare.programs else "imports and runs"
        raise RunError(Message(f"refusing to load the second checkpoint nobody trusted: loading it {verb} "
                               f"{_names(compare.findings)}", Hint(Fix.TRUST_COMPARE)), kind="refused")


def _names(found: list[str]) -> str:
    return ", ".join(found[:6]) + (" ..." if len(found) > 6 else "")


def compare_source(main: SourceInfo, path: str | None) -> SourceInfo | None:
    """What the worker does with the second checkpoint: None when it is read by the safe reader only."""
    if not path or main.kind in (STATE_DICT, LIBRARY, LIGHTNING):
        return None  # its weights go through the same gated state-dict loader as the main file's
    if not os.path.exists(path):
        raise RunError(f"no such file: {path}", kind="input")
    try:
        source = classify_source(path)
    except CheckpointError as exc:
        raise RunError(f"second checkpoint: {exc}", kind="input") from None
    if main.kind in (TORCHSCRIPT, EXPORT) and source.kind not in (TORCHSCRIPT, EXPORT):
        raise RunError("the second checkpoint is not a TorchScript or .pt2 archive", kind="input")
    if source.kind == STATE_DICT:  # a full-pickle run loads the second file with torch.load as well
        found = _census(path)
        source.findings, source.programs = found.findings(), list(found.programs)
    return source


def run_iter(request: RunRequest, token: Cancellable | None = None, remote: RemoteOptions | None = None
             ) -> Generator[Progress, None, RunResult]:
    """The forward-pass job as a core generator (for GUI workers): yields phases, returns the result.

    A URL (PATH or the compare file) is downloaded first into a private folder removed afterwards (a model
    folder: its config, tokenizer and weights): the worker loads local files, and checks them like any
    other before torch sees them; `remote` is what the user allowed for those reads (`--download`, ...).
    """
    urls = [p for p in (request.path, request.compare_path) if p and locate(p).is_remote]
    if not urls:
        return (yield from _run_local(request, token))
    with tempfile.TemporaryDirectory(prefix="ckptview-fetch-") as folder:
        local = {}
        for i, url in enumerate(urls):
            local[url] = yield from fetch(url, os.path.join(folder, str(i)), token, remote)
        request = dataclasses.replace(request, path=local.get(request.path, request.path),
                                      compare_path=local.get(request.compare_path or "", request.compare_path))
        return (yield from _run_local(request, token))


def _run_local(request: RunRequest, token: Cancellable | None) -> Generator[Progress, None, RunResult]:
    if not os.path.exists(request.path):
        raise RunError(f"no such file: {request.path}", kind="input")
    source = classify_source(request.path, request.model)
    try:  # a state dict with no code: the architecture its installed library names (config.json)
        arch = recognize_checkpoint(request.path) if source.kind == STATE_DICT and not request.model else None
    except ArchitectureRefused as exc:  # code shipped with the weights, or the library is missing
        raise RunError(message_of(exc), kind="refused") from None
    if arch is not None:
        source.kind = LIBRARY
    check_trust(source, request.trust, bool(request.model))
    second = compare_source(source, request.compare_path)
    check_compare_trust(second, request.trust_compare)
    payload = request.to_json()
    payload["op"] = "run"
    payload["source"] = source.kind
    # What the user accepted, file by file; the worker's gate refuses anything beyond it.
    main_consent = request.trusted_findings if request.trusted_findings is not None else source.findings
    second_consent = (request.compare_trusted_findings if request.compare_trusted_findings is not None
                      else second.findings if second is not None else [])
    payload["consent"] = {"main": main_consent if request.trust else None,
                          "compare": second_consent if request.trust_compare else None}
    if arch is not None:
        payload.update(arch.payload())
    if source.lightning is not None:
        payload["lightning"] = source.lightning.payload()
    data = yield from execute(payload, request.timeout, token)
    try:
        result = RunResult.from_json(data)
    except ProtocolError as exc:
        raise RunError(f"the worker sent a malformed result: {exc}", kind="protocol") from None
    result.warnings = weight_warnings(result.load, result.device)
    if result.compare is not None:
        result.warnings += [f"second checkpoint: {w}" for w in weight_warnings(result.compare.load, result.device)]
    check_weights(result, source.kind, request.strict, request.allow_missing)
    if arch is not None:
        result.architecture = arch.to_json()
        if arch.dequantized:  # a quantized folder: say whose weights ran, and how
            result.warnings.insert(0, f"the weights are {', '.join(arch.dequantized)}, dequantized by ckptview (equal "
                                      f"to the library's own dequantization) and run unquantized on {result.device}")
    return result



def run(request: RunRequest, token: Cancellable | None = None,
        on_progress: Callable[[Progress], None] | None = None, remote: RemoteOptions | None = None) -> RunResult:
    """Load and run in a worker; the typed result (see README) or RunError with a one-line message."""
    return drain(run_iter(request, token, remote), on_progress)


def probe_devices(timeout: float = 60.0, token: Cancellable | None = None) -> list[Any]:
    """`list_devices()` measured in a worker, so CUDA contexts and driver faults stay out of this process."""
    result = drain(execute({"op": "devices"}, timeout, token))
    return [DeviceInfo.from_json(d) for d in result["devices"]]


def inspect_inputs(path: str) -> list[InputSpec] | None:
    """The input signature as ckptview reads it, for the run panel: nothing is loaded by torch, nothing runs.

    A .pt2's user inputs come from its program JSON; TorchScript code declares no shapes: None (the run reads
    them from the graph, after consent); a state dict: a guess from its first layer. No worker is started."""
    if locate(path).is_remote:
        return None  # not worth reading a remote file before the user asks for a run: the input shape is typed
    try:
        checkpoint = open_checkpoint(path)
    except CheckpointError:
        return None
    try:
        if checkpoint.format == "torch-export":
            return program_inputs(checkpoint.metadata.get("signature"))
        if checkpoint.format == "torchscript":
            return None
        return suggest_inputs(path, checkpoint)
    finally:
        checkpoint.close()

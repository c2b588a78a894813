"""The forward-pass worker process: `python -m ckptview.core.worker.entry`, a JSON request on stdin.

It writes the messages of `core.run_protocol` (phase events, then one result) as JSON lines to the stdout
it was started with. Its file descriptor 1 is pointed at stderr first, so whatever user code prints cannot
corrupt that stream. This is the only process where ckptview runs model code, and the only one where a
full-model pickle is unpickled (after the user's explicit --trust). The work itself lives in
`loading` (weights; `lightning` for a LightningModule), `forward` (inputs, timed runs, outputs) and `compare`;
`load_model` here picks the loader by the model's source.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any

from ckptview.core.message import message_of
from ckptview.core.run.devices import DeviceError, find_device
from ckptview.core.run.protocol import Job, ResultMessage, WorkerError, encode, error_kind, one_line
from ckptview.core.run.result import Latency, LoadReport, RunResult
from ckptview.core.worker.compare import compare_checkpoint
from ckptview.core.worker.device_probe import list_devices
from ckptview.core.worker.forward import (
    describe_outputs,
    forward_call,
    make_inputs,
    peak_memory,
    reset_peak,
    time_runs,
)
from ckptview.core.worker.graph import graph_job, keys_job
from ckptview.core.worker.library import next_tokens
from ckptview.core.worker.lifeline import leave
from ckptview.core.worker.lightning import load_lightning_model
from ckptview.core.worker.loading import (
    load_graph,
    load_trusted_pickle,
    load_weights,
    module_report,
    note_memory_after_load,
    place_module,
)
from ckptview.core.worker.model_code import allow_caller_imports, build_user_model
from ckptview.core.worker.pretrained import load_library_model


def load_model(job: Job, path: str, device: str) -> tuple[Any, LoadReport]:
    """The model on `device` and the load report, by source kind."""
    source = job.request.get("source")
    if source in ("torchscript", "export"):
        model = load_graph(job, source, path, device, "main")
        return model, module_report(model, device)
    if source == "pickle":
        if not job.request.get("trust"):
            raise WorkerError("refusing to unpickle a full model without trust", kind="refused")
        model = load_trusted_pickle(job, path, device, "main")
        return model, module_report(model, device)
    if source == "state_dict":
        job.enter("model code")
        model = build_user_model(job.request["model"], job.request.get("model_kwargs") or {},
                                 job.request.get("cwd"))
        job.enter("loading")
        model = place_module(model, device)
        report = load_weights(model, path, device)
        return model, report
    if source == "library":
        return load_library_model(job, path, device)
    if source == "lightning":
        return load_lightning_model(job, path, device)
    raise WorkerError(f"unknown model source '{source}'", kind="protocol")


def entry() -> None:
    """The worker process's entry point (see runner.worker_command): run `main`, then leave at once."""
    status = main()
    sys.stderr.flush()
    # Skip interpreter teardown: threads left running by model code or a slow device shutdown must not
    # keep the process alive after the result is written; its scratch folder goes with it (lifeline).
    leave(status)


def main() -> int:
    """Read the request, do the job, write the result; never raise."""
    import json

    result_fd = os.dup(1)
    os.dup2(2, 1)  # user prints (fd 1 and sys.stdout) now go to stderr
    out = os.fdopen(result_fd, "w", buffering=1, encoding="utf-8")

    def emit(obj: dict[str, Any]) -> None:
        out.write(encode(obj) + "\n")
        out.flush()

    job = Job({}, emit)
    try:
        job.request = json.loads(sys.stdin.read() or "{}")
        if not isinstance(job.request, dict):
            raise WorkerError("the request is not a JSON object", kind="protocol")
        message = ResultMessage(True, handle(job))
    except WorkerError as exc:
        message = ResultMessage(False, _report(job), message_of(exc), exc.kind)
    except BaseException as exc:  # noqa: BLE001 - anything from user code becomes one line
        message = ResultMessage(False, {"traceback": traceback.format_exc(limit=20), **_report(job)},
                                f"{_phase_words(job.phase)}: {type(exc).__name__}: {one_line(exc)}",
                                error_kind(exc))
    emit(message.to_json())
    out.flush()
    return 0


def _report(job: Job) -> dict[str, Any]:
    """What the job reported before failing, as JSON (records turned into their JSON form)."""
    return {k: (v.to_json() if hasattr(v, "to_json") else [i.to_json() for i in v] if isinstance(v, list) else v)
            for k, v in job.report.items()}


def _phase_words(phase: str) -> str:
    return {"model code": "in the model code", "forward pass": "in the forward pass",
            "loading": "while loading", "warm-up": "in the forward pass (warm-up)",
            "timing": "in the forward pass (timed runs)", "compare": "while running the second checkpoint",
            "inputs": "while making the inputs"}.get(phase, f"during {phase}")


def handle(job: Job) -> dict[str, Any]:
    """Dispatch one request by its `op`; the payload of the result message."""
    op = job.request.get("op", "run")
    job.enter("importing torch")
    import torch  # noqa: F401 - imported here so the time shows as its own phase

    if op == "devices":
        return {"devices": [d.to_json() for d in list_devices()]}
    if op == "run":
        return run_job(job).to_json()
    if op == "graph":  # a library's architecture traced on meta: no file is named, none is read
        return graph_job(job)
    if op == "keys":  # which checkpoint key names the library's loading converts: names only, no file
        return keys_job(job)
    raise WorkerError(f"unknown request '{op}'", kind="protocol")


def run_job(job: Job) -> RunResult:
    """Load the model on the device, make the inputs, run, time, and describe the outputs."""
    import torch

    req = job.request
    started = time.perf_counter()
    device = _check_device(req.get("device", "cpu"))
    allow_caller_imports(req)
    reset_peak(device)
    job.enter("loading")
    t0 = time.perf_counter()
    model, load = load_model(job, req["path"], device)
    load.seconds = time.perf_counter() - t0
    note_memory_after_load(load, device)
    job.report["load"] = load
    job.report["load_seconds"] = load.seconds

    job.enter("inputs")
    inputs, input_report, by_name = make_inputs(req, model, device)
    job.report["inputs"] = input_report
    module, model = model, forward_call(model, by_name,
                                        library_on_meta=device == "meta" and req.get("source") == "library")

    first_n = int(req.get("first_values", 8))
    warmup = int(req.get("warmup", 2))
    with torch.no_grad():
        job.enter("forward pass")
        output = model(*inputs)
        outputs, others = describe_outputs(output, first_n)
        job.enter("warm-up")
        for _ in range(max(0, warmup - 1)):
            model(*inputs)
        job.enter("timing")
        times = time_runs(model, inputs, device, max(1, int(req.get("runs", 10))))
        compare = None
        if req.get("compare_path"):
            job.enter("compare")
            compare = compare_checkpoint(job, model, output, inputs, device, first_n)
        tokens = None
        arch = req.get("architecture") or {}
        if req.get("source") == "library" and str(arch.get("class", "")).endswith("ForCausalLM"):
            job.enter("next tokens")
            tokens = next_tokens(module, str(arch.get("folder") or ""), device)
    peak, peak_kind = peak_memory(device)
    return RunResult(device=device, source=req.get("source"), load_seconds=load.seconds, load=load,
                     inputs=input_report, outputs=outputs, other_outputs=others,
                     latency_ms=Latency.from_times(times, warmup), peak_memory_bytes=peak,
                     peak_memory_kind=peak_kind, torch_version=torch.__version__,
                     worker_seconds=time.perf_counter() - started, compare=compare, next_tokens=tokens,
                     architecture=job.report.get("architecture"))


def _check_device(name: str) -> str:
    try:
        return find_device(name, list_devices()).name
    except DeviceError as exc:
        raise WorkerError(str(exc), kind="device") from None


if __name__ == "__main__":
    entry()

"""The graph of your own model code (`graph PATH --model module.py:Class`), traced in the run's worker.

The code the user names runs as `run --model` runs it: in the isolated worker process, imported by the same
loader (`core/worker/model_code.py`), with the caller's folder answering only the module the spec names. The
checkpoint is never loaded: the worker builds the class (on `meta` where it allows it), feeds inputs of the
shapes given or guessed from the first layer (as a run guesses them) and traces it (`torch.export`, else
`torch.fx`); the parent places the traced graph on the checkpoint's key names (`library.place`: wrapper
prefixes peeled, tied weights found). Nothing is cached: the code can change between two calls.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.errors import Cancelled
from ckptview.core.graph.library import TIMEOUT, Traced, place
from ckptview.core.graph.model import GraphDataError
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.run.input_specs import InputSpec
from ckptview.core.run.process import RunError, execute
from ckptview.core.run.state_dict import state_dict_entries, suggest_inputs

SOURCE = "model-code"


def code_request(checkpoint: Checkpoint, spec: str, kwargs: dict[str, Any] | None = None,
                 inputs: list[InputSpec] | None = None, cwd: str | None = None) -> dict[str, Any]:
    """The worker's `graph` request for model code: the spec (a file spec made absolute, as a run's), its
    keyword arguments, the inputs (None: guessed from the first layer) and the checkpoint's key names."""
    if ".py:" in spec and not os.path.isabs(spec):
        spec = os.path.abspath(spec)
    _, entries = state_dict_entries(checkpoint)
    if inputs is None:
        inputs = suggest_inputs(checkpoint.path, checkpoint)
    return {"op": "graph", "model": spec, "model_kwargs": dict(kwargs or {}), "cwd": os.path.abspath(cwd or os.getcwd()),
            "inputs": None if inputs is None else [s.to_json() for s in inputs], "keys": list(entries)}


def shown_spec(spec: str) -> str:
    """A spec as the graph's source names it: a file's name, not its folder (`mlp.py:MLP`)."""
    target, sep, attr = spec.rpartition(":")
    return f"{os.path.basename(target)}{sep}{attr}" if target.endswith(".py") else spec


def code_graph(checkpoint: Checkpoint, spec: str, kwargs: dict[str, Any] | None = None,
               inputs: list[InputSpec] | None = None, token: CancelToken | None = None, cwd: str | None = None,
               timeout: float = TIMEOUT) -> Generator[Progress, None, Any]:
    """The graph of the model `spec` builds, traced in the worker and placed on the checkpoint's keys."""
    request = code_request(checkpoint, spec, kwargs, inputs, cwd)
    yield Progress(0, 0, "starting the worker to trace your model code")
    try:
        payload = yield from execute(request, timeout, token)
    except RunError as exc:
        if exc.kind == "cancelled":
            raise Cancelled(str(exc)) from None
        raise
    try:
        traced = Traced.from_json(payload)
    except GraphDataError as exc:
        raise RunError(f"the worker sent a malformed graph: {exc}", kind="protocol") from None
    return place(traced, checkpoint, f"{SOURCE}:{shown_spec(spec)}")

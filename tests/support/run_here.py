"""The run worker's own code, run in this process: the matrix of library models checks loading, inputs and
outputs for dozens of folders, where a worker process each (importing torch and the library again) would cost
minutes. Process isolation itself (crashes, hangs, stdout, consent) is tested with real workers elsewhere."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from ckptview.core.jobs import Progress
from ckptview.core.run import request as run_request
from ckptview.core.run.process import RunError
from ckptview.core.run.protocol import Job, WorkerError, encode
from ckptview.core.run.result import PartialRun
from ckptview.core.worker import entry
from ckptview.core.worker.entry import _report, handle
from ckptview.core.worker.forward import describe_outputs, flatten_outputs


def execute_here(payload: dict[str, Any], timeout: float, token: Any = None
                 ) -> Generator[Progress, None, dict[str, Any]]:
    """What `process.execute` returns for `payload`, computed by the worker's `handle` in this process, in a
    private working folder (the load gate's copies go there), the request and result through JSON."""
    del timeout, token
    job = Job(json.loads(encode(payload)), emit=lambda event: None)
    previous, finders = os.getcwd(), sys.meta_path[:]
    with tempfile.TemporaryDirectory(prefix="ckptview-here-") as folder:
        os.chdir(folder)
        try:
            data = handle(job)
        except WorkerError as exc:
            raise RunError(str(exc), kind=exc.kind, result=PartialRun.from_json(json.loads(encode(_report(job))))
                           ) from None
        finally:
            os.chdir(previous)
            sys.meta_path[:] = finders  # the caller's folder answered imports for that run only
    yield Progress(1, 1, "done")
    result: dict[str, Any] = json.loads(encode(data))
    return result


class Outputs:
    """The tensors of the last forward pass the worker described, by their flattened names."""

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}


@contextlib.contextmanager
def worker_here() -> Iterator[Outputs]:
    """Within the block, runs go to `execute_here` instead of a worker process; the outputs of each run's
    forward pass are kept whole (the result holds their statistics and first values only)."""
    seen = Outputs()

    def recording(output: Any, first_n: int) -> Any:
        seen.last = dict(flatten_outputs(output))
        return describe_outputs(output, first_n)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_request, "execute", execute_here)
        patch.setattr(entry, "describe_outputs", recording)
        # A worker's stderr is its own (kept for a crash's last words); here it would be the test's.
        try:
            from transformers.utils import logging as hf_logging
        except ImportError:
            yield seen
            return
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        try:
            yield seen
        finally:
            hf_logging.set_verbosity(verbosity)
            hf_logging.enable_progress_bar()

"""How a command fails: one line on stderr and, under `--json`, one object on stdout (docs/cli.md).

`{"error": {"kind": str, "message": str}}`: `kind` is a stable machine word per class of error (what a
script branches on), `message` the line a person reads on stderr, without its `ckptview: ` prefix. The
core raises typed errors with a message; this module is where the command line names their kinds.
"""

from __future__ import annotations

import json
import sys

from ckptview.core.text import printable

__all__ = ["CLASSES", "KINDS", "RUN_ERROR", "CommandFailure", "error_kind", "report"]

# Every kind a failure may have, with what it means (docs/cli.md lists them; a test holds the two equal).
KINDS = {
    "usage": "the command line is wrong: a missing or bad argument, an option of another command",
    "not_found": "no file or folder at the path",
    "not_a_checkpoint": "the file or folder is in no format ckptview reads",
    "folder_of_checkpoints": "a folder that is no checkpoint but holds several (the message says what to run)",
    "not_a_series": "a series needs at least two checkpoints, and the paths hold one",
    "format": "the file claims a known format but is malformed, truncated or inconsistent",
    "unsafe": "the file asks for something the safe reader refuses, or code nobody trusted",
    "limit": "the file asks for more work than its bytes pay for, or is past one of the limits (docs/limits.md)",
    "tensor_data": "a tensor's values cannot be read",
    "changed": "the file changed on disk while it was read",
    "remote": "a URL cannot be reached or read",
    "permission": "the file cannot be read (permissions)",
    "io": "the operating system failed a read or a write",
    "device": "the device asked for cannot be used",
    "export": "the export cannot be written",
    "exists": "the export's output exists already",
    "cancelled": "interrupted (Ctrl+C) or cancelled",
    "oom": "a forward pass ran out of memory",
    "crash": "the forward pass's worker process died",
    "timeout": "the forward pass took longer than its --timeout",
    "exception": "the model raised an exception in the forward pass",
    "weights": "the model's weights are not all in the file (a forward pass)",
    "protocol": "the worker process answered something it should not",
    "failed": "another failure about a file",
    "internal": "a bug of ckptview (please report it)",
}

# RunError's own kinds that are one of the classes above (the others are kinds of their own).
_RUN_KINDS = {"refused": "unsafe", "input": "usage", "changed": "changed", "cancelled": "cancelled",
              "device": "device"}

# Most specific first: the first class in an error's MRO found here names its kind. By dotted name, so that
# naming the kinds loads no feature (`info` must not import the forward pass's modules to word a failure);
# a test holds every name to a class that exists.
CLASSES = {
    "ckptview.core.errors.NoSuchFile": "not_found",
    "ckptview.core.errors.FolderOfCheckpoints": "folder_of_checkpoints",
    "ckptview.core.errors.NotACheckpointError": "not_a_checkpoint",
    "ckptview.core.errors.UnsafePickleError": "unsafe",
    "ckptview.core.budget.BudgetExceeded": "limit",
    "ckptview.core.graph.limits.GraphRefused": "limit",
    "ckptview.core.errors.CheckpointFormatError": "format",
    "ckptview.core.errors.TensorDataError": "tensor_data",
    "ckptview.core.errors.FileChangedError": "changed",
    "ckptview.core.errors.RemoteError": "remote",
    "ckptview.core.run.devices.DeviceError": "device",
    "ckptview.core.export.plan.ExportExistsError": "exists",
    "ckptview.core.export.plan.ExportError": "export",
    "ckptview.core.worker.load_gate.LoadRefused": "unsafe",
    "ckptview.core.errors.CheckpointError": "failed",
    "ckptview.core.errors.Cancelled": "cancelled",
    "builtins.KeyboardInterrupt": "cancelled",
    "builtins.FileNotFoundError": "not_found",
    "builtins.IsADirectoryError": "not_a_checkpoint",
    "builtins.NotADirectoryError": "not_found",
    "builtins.PermissionError": "permission",
    "builtins.OSError": "io",
}
RUN_ERROR = "ckptview.core.run.process.RunError"


class CommandFailure(Exception):
    """A command's own failure (a bad option value, nothing to do): `message` for a person, `kind` from
    KINDS, the exit `status`."""

    def __init__(self, message: str, kind: str = "usage", status: int = 2) -> None:
        super().__init__(message)
        assert kind in KINDS, kind
        self.kind, self.status = kind, status


def error_kind(exc: BaseException) -> str:
    """The machine word for `exc` (a key of KINDS)."""
    if isinstance(exc, CommandFailure):
        return exc.kind
    for cls in type(exc).__mro__:
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name == RUN_ERROR:  # a forward pass's failure says which in its own `kind`
            run_kind = str(getattr(exc, "kind", ""))
            return _RUN_KINDS.get(run_kind, run_kind if run_kind in KINDS else "failed")
        kind = CLASSES.get(name)
        if kind is not None:
            return kind
    return "internal"


def report(kind: str, message: str, json_out: bool, line: str | None = None) -> None:
    """One failure: `line` (default `ckptview: MESSAGE`, escaped) on stderr and, when `json_out`, the
    error object on stdout. `message` is as it will be read by a script (JSON escapes what it must)."""
    print(line if line is not None else f"ckptview: {printable(message)}", file=sys.stderr)
    if json_out:
        try:
            sys.stdout.write(json.dumps({"error": {"kind": kind, "message": message}}) + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):  # a reader that went away, a closed stdout: nothing to tell
            pass

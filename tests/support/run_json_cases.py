"""`ckptview run --json` on a small MLP in several set-ups, reduced to what must never change.

`python -m tests.support.run_json_cases OUT.json` records the expectation (it was recorded with the code before run
results became typed); `tests/core/run/test_result.py` runs the same cases and compares. The skeleton keeps every
key in its order, every string and integer, and the type of every float (times and statistics vary by
machine); paths become `<tmp>`, and what depends on the machine (memory, torch version) becomes its type.
"""

from __future__ import annotations

import io
import json
import pathlib
import sys
import textwrap
import warnings
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

CODE = textwrap.dedent('''
    from torch import nn

    class MLP(nn.Module):
        def __init__(self, width=16):
            super().__init__()
            self.hidden = nn.Linear(20, width)
            self.act = nn.ReLU()
            self.output = nn.Linear(width, 10)

        def forward(self, x):
            return self.output(self.act(self.hidden(x)))

    class Wider(MLP):
        """The checkpoint's hidden layer does not fit; `extra` is not in it."""
        def __init__(self):
            super().__init__(width=32)
            self.extra = nn.Linear(2, 2)

    class Renamed(nn.Module):
        """None of the checkpoint's keys fit: nothing loads."""
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(20, 10)

        def forward(self, x):
            return self.body(x)

    class Pair(MLP):
        """Nested outputs: a dict with a tensor, a tuple of a tensor and an int."""
        def forward(self, x):
            y = super().forward(x)
            return {"logits": y, "aux": (y.sum(dim=1), 7)}
''')
MACHINE_KEYS = {"peak_memory_bytes", "peak_memory_kind", "torch_version", "cuda_allocated", "cuda_reserved",
                "mps_allocated"}


def make_files(folder: pathlib.Path) -> dict[str, str]:
    """The model code, two state dicts of the MLP (one as a training checkpoint), a TorchScript, an .npy."""
    import importlib.util

    import numpy as np
    import torch

    code = folder / "mlp_code.py"
    code.write_text(CODE)
    spec = importlib.util.spec_from_file_location("mlp_code_for_json", code)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    mlp, other = module.MLP().eval(), module.MLP().eval()
    torch.save(mlp.state_dict(), folder / "sd.pt")
    torch.save({"epoch": 1, "model_state_dict": {f"module.{k}": v for k, v in other.state_dict().items()}},
               folder / "train.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(mlp, torch.randn(2, 20)), str(folder / "ts.pt"))
    np.save(folder / "x.npy", np.linspace(-1, 1, 40, dtype=np.float32).reshape(2, 20))
    return {"code": str(code), "sd": str(folder / "sd.pt"), "train": str(folder / "train.pt"),
            "ts": str(folder / "ts.pt"), "npy": str(folder / "x.npy")}


def cases(f: dict[str, str]) -> dict[str, list[str]]:
    """Name -> `ckptview run` arguments (each run prints --json)."""
    model = ["--model", f"{f['code']}:MLP"]
    return {
        "state_dict_compare": ["run", f["sd"], *model, "--input-shape", "3,20", "--runs", "2",
                               "--compare", f["train"]],
        "meta_compare": ["run", f["sd"], *model, "--device", "meta", "--runs", "1", "--compare", f["train"]],
        "partial_load": ["run", f["sd"], "--model", f"{f['code']}:Wider", "--input-shape", "2,20@float32=uniform:-1:1",
                         "--allow-missing", "--runs", "1"],
        "no_weights": ["run", f["sd"], "--model", f"{f['code']}:Renamed", "--input-shape", "2,20", "--runs", "1"],
        "nested_outputs": ["run", f["sd"], "--model", f"{f['code']}:Pair", "--input-file", f["npy"],
                           "--runs", "1"],
        "torchscript_graph": ["run", f["ts"], "--runs", "1", "--compare", f["ts"], "--trust", "--trust-compare"],
    }


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `ckptview ARGS --json` in this process."""
    from ckptview import cli

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = cli.main([*args, "--json"])
    return status, out.getvalue(), err.getvalue()


def skeleton(value: Any, tmp: str, key: str = "") -> Any:
    """What of a result must stay the same: keys in order, strings and integers, the types of floats."""
    if key in MACHINE_KEYS:
        return type(value).__name__
    if isinstance(value, dict):
        return [[k, skeleton(v, tmp, k)] for k, v in value.items()]
    if isinstance(value, list):
        return [skeleton(v, tmp) for v in value]
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return value.replace(tmp, "<tmp>")
    return value


def outcome(args: list[str], folder: pathlib.Path) -> dict[str, Any]:
    """A case's exit status, stderr and the skeleton of its JSON (None when it printed none)."""
    status, text, err = run_cli(args)
    return {"status": status, "stderr": err.replace(str(folder), "<tmp>"),
            "skeleton": skeleton(json.loads(text), str(folder)) if text else None}


def record(folder: pathlib.Path) -> dict[str, Any]:
    """Every case's outcome."""
    files = make_files(folder)
    return {name: outcome(args, folder) for name, args in cases(files).items()}


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        recorded = record(pathlib.Path(tmp))
    pathlib.Path(sys.argv[1]).write_text(json.dumps(recorded, indent=1) + "\n")

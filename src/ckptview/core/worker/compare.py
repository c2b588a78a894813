"""Run with another checkpoint (in the worker): the same inputs through the second weights, and the differences."""

from __future__ import annotations

from typing import Any

from ckptview.core.read.open import open_checkpoint
from ckptview.core.run.protocol import Job, WorkerError
from ckptview.core.run.result import CompareResult, OutputDiff
from ckptview.core.worker.forward import describe_outputs, flatten_outputs, same_call, stat_dtype
from ckptview.core.worker.loading import load_graph, load_trusted_pickle, load_weights, module_report
from ckptview.core.worker.pretrained import load_library_model


def compare_checkpoint(job: Job, model: Any, output: Any, inputs: list[Any], device: str,
                       first_n: int) -> CompareResult:
    """Same inputs through the same architecture with the second checkpoint's weights; output differences."""
    import torch

    req = job.request
    path = req["compare_path"]
    source = req.get("source")
    if source == "library":  # the second folder loaded as its library loads it (its key conversions too)
        module, load = load_library_model(job, path, device)
        second = same_call(model, module)
    elif source in ("state_dict", "lightning"):
        second = model  # the same architecture (called by keyword where the first run was)
        load = load_weights(getattr(model, "module", model), path, device)
    elif source in ("torchscript", "export"):
        checkpoint = open_checkpoint(path)
        kind = {"torchscript": "torchscript", "torch-export": "export"}.get(checkpoint.format)
        checkpoint.close()
        if kind is None:
            raise WorkerError("the second checkpoint is not a TorchScript or .pt2 archive", kind="input")
        second = load_graph(job, kind, path, device, "compare")
        load = module_report(second, device)
    else:
        second = load_trusted_pickle(job, path, device, "compare")
        load = module_report(second, device)
    before = {name: t.detach().clone() for name, t in flatten_outputs(output) if isinstance(t, torch.Tensor)}
    other = second(*inputs)
    diffs = []
    for name, t in flatten_outputs(other):
        if not isinstance(t, torch.Tensor) or name not in before:
            continue
        a = before[name]
        if a.shape != t.shape:
            entry = OutputDiff(name, list(t.shape), False, note=f"shape {list(a.shape)} vs {list(t.shape)}")
        elif device == "meta":
            entry = OutputDiff(name, list(t.shape), None, note="meta: no values")
        else:
            diff = (a.to(stat_dtype(a)) - t.to(stat_dtype(t))).abs()
            diff = diff[torch.isfinite(diff)]
            entry = OutputDiff(name, list(t.shape), bool(torch.equal(a, t)),
                               max_abs_diff=float(diff.max()) if diff.numel() else 0.0,
                               mean_abs_diff=float(diff.mean()) if diff.numel() else 0.0)
        diffs.append(entry)
    out_stats, _ = describe_outputs(other, first_n)
    return CompareResult(path, load, out_stats, diffs)


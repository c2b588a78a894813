"""What the parent says of weights that did not load as they should: a failure, unless the user asked for a
partial load (then said on every line of the result), and warnings for what the file holds beyond the model."""

from __future__ import annotations

import dataclasses

from ckptview.core.message import Fix, Hint, Message
from ckptview.core.run.process import RunError
from ckptview.core.run.result import LoadReport, RunResult
from ckptview.core.units import plural

# Source kinds whose weights come from the checkpoint into a model built without them (runner's names).
_LOADS_WEIGHTS = ("state_dict", "library", "lightning")

MAX_NAMED = 5


def _first(names: list[str]) -> str:
    more = f" ... and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    return ", ".join(names[:MAX_NAMED]) + more


def not_loaded(load: LoadReport) -> list[str]:
    """The model's weights that did not come from the file: missing (not tied to a loaded twin), of another
    shape, or not placed on the device."""
    return [*load.missing, *load.mismatched, *(u.name for u in load.unplaced)]


def weight_warnings(load: LoadReport, device: str) -> list[str]:
    """One line per kind of weight that did not load as it should: its count and the first names."""
    out = []
    if load.missing:
        out.append(f"{len(load.missing)} missing keys (in the model, not in the checkpoint; left at their "
                   f"initial values): {_first(load.missing)}")
    if load.unexpected:
        out.append(f"{len(load.unexpected)} unexpected keys (in the checkpoint, not in the model; not "
                   f"loaded): {_first(load.unexpected)}")
    if load.mismatched:
        shapes = load.mismatched_shapes
        named = [f"{k} (checkpoint {shapes[k].checkpoint}, model {shapes[k].model})" if k in shapes else k
                 for k in load.mismatched]
        out.append(f"{plural(len(named), 'key')} with mismatched shapes (not loaded): {_first(named)}")
    if load.unplaced:
        named = [f"{u.name} ({u.reason})" for u in load.unplaced]
        out.append(f"{plural(len(named), 'tensor')} could not be placed on {device} (not loaded): {_first(named)}")
    return out


def check_weights(result: RunResult, kind: str, strict: bool, allow_missing: bool = False) -> None:
    """RunError 'weights' when a model's weight did not load from the file (unless `allow_missing`: then
    `result.partial` names them), when a state dict loaded no tensor, or (strict) when anything did not load."""
    if kind not in _LOADS_WEIGHTS:
        return  # graphs and pickled modules carry their own weights
    load = result.load
    if not load.tensors:
        total = len(load.unexpected) + len(load.mismatched) + len(load.unplaced)
        raise RunError(f"no weights loaded: none of the checkpoint's {plural(total, 'tensor')} fit the model "
                       f"({'; '.join(result.warnings) or 'the checkpoint holds no tensors'})",
                       kind="weights", result=result)
    if strict and result.warnings:
        raise RunError(f"strict load: {'; '.join(result.warnings)}", kind="weights", result=result)
    missing = not_loaded(load)
    if missing and not allow_missing:
        why = "; ".join(weight_warnings(dataclasses.replace(load, unexpected=[]), result.device))
        raise RunError(Message(f"{len(missing)} weight{'s' if len(missing) != 1 else ''} of the model not loaded "
                               f"from the file, so the outputs would be those of random values: {why}",
                               Hint(Fix.ALLOW_MISSING)), kind="weights", result=result)
    result.partial = missing or None

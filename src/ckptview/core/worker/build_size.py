"""In the worker: a library's build held against the checkpoint it is for, on the meta device, before it is
built anywhere at the size its config declares.

`core/run/declared_sizes.py` says why and checks the config as data in the parent; this is the check on what the
library actually builds. While :func:`bounded` is active, torch's global registration hooks count every
parameter, buffer and submodule a module registers, and their elements, as they are registered: past
`Listing.max_registered` or `Listing.max_elements` the hook raises, the build stops there (a config declaring
20,000 layers stops after a few hundred registrations, not after 20,000 layers) and the job is refused in one
line. The hook raises a `BaseException`, so a library that catches `Exception` around a build cannot swallow
it; a refusal it swallowed anyway is seen after the build (`Tally.over`).

:func:`held_against` builds on `meta` (no memory, whatever the sizes), then matches the built model's tensors with
the file's by shape (`Listing.max_unmatched`: renamed and merged layouts a library converts while loading, and
a partial file, still pass); only a model that passes is built again on the real device, by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ckptview.core.run.declared_sizes import Listing
from ckptview.core.run.protocol import WorkerError
from ckptview.core.units import plural


class _TooLarge(BaseException):
    """Raised inside the library's build by a registration hook: not an Exception, so no library swallows it."""


@dataclass
class Tally:
    """What one build registered so far."""

    registered: int = 0
    elements: int = 0
    over: str = ""  # what went past the listing's limits ("" while within)


def _numel(value: Any) -> int:
    try:
        return int(value.numel())
    except Exception:  # noqa: BLE001 - a lazy (uninitialized) parameter has no size yet: nothing allocated
        return 0


@contextmanager
def bounded(listing: Listing, what: str) -> Iterator[Tally]:
    """Count what the build registers; WorkerError 'refused' (one line) at the first registration past the
    limits `listing` sets."""
    from torch.nn.modules import module as torch_module

    tally = Tally()

    def count(units: int, elements: int) -> None:
        if tally.over:
            raise _TooLarge
        tally.registered += units
        tally.elements += elements
        if tally.registered > listing.max_registered:
            tally.over = f"more than {plural(listing.max_registered, 'parameter')}, buffers and modules"
        elif tally.elements > listing.max_elements:
            tally.over = f"more than {plural(listing.max_elements, 'element')} of parameters and buffers"
        if tally.over:
            raise _TooLarge

    def on_tensor(_module: Any, _name: str, value: Any) -> None:
        if value is not None:
            count(1, _numel(value))

    def on_module(_module: Any, _name: str, value: Any) -> None:
        if value is not None:
            count(1, 0)

    handles = [torch_module.register_module_parameter_registration_hook(on_tensor),
               torch_module.register_module_buffer_registration_hook(on_tensor),
               torch_module.register_module_module_registration_hook(on_module)]
    try:
        yield tally
    except _TooLarge:
        pass
    finally:
        for handle in handles:
            handle.remove()
    if tally.over:
        raise WorkerError(f"{what}: the config declares a larger model than the checkpoint holds (building it on "
                          f"the meta device passed {tally.over}, for a checkpoint of {listing.describe()}); not "
                          "built", kind="refused")


def check_built(model: Any, listing: Listing, what: str) -> None:
    """WorkerError 'refused' when more of the built model's elements than `listing.max_unmatched` have no
    tensor of their shape in the checkpoint (each of the file's tensors matches one of the model's)."""
    if not listing.shapes:
        return  # the listing has too many distinct shapes to hand over: the counts above held the build
    left = dict(listing.shapes)
    seen: set[int] = set()
    total = unmatched = tensors = 0
    for value in model.state_dict(keep_vars=True).values():
        if id(value) in seen:
            continue  # a tied weight is one tensor
        seen.add(id(value))
        tensors += 1
        shape = tuple(int(s) for s in value.shape)
        size = _numel(value)
        total += size
        if left.get(shape, 0) > 0:
            left[shape] -= 1
        else:
            unmatched += size
    if unmatched > listing.max_unmatched:
        raise WorkerError(f"{what}: the config declares a model of {plural(tensors, 'tensor')} and {plural(total, 'element')}, "
                          f"{unmatched:,} of them in tensors whose shape the checkpoint ({listing.describe()}) "
                          "does not have; not built", kind="refused")


def held_against(build: Callable[[str], Any], listing: Listing | None, what: str) -> Any:
    """`build("meta")` bounded by `listing` and checked against it; the meta model (None without a listing:
    nothing to hold the build against, and nothing built)."""
    if listing is None:
        return None
    with bounded(listing, what):
        model = build("meta")
    check_built(model, listing, what)
    return model

"""Running a model: device listing, the load gate (what torch may load), and the isolated worker."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.run.devices import DeviceInfo, parse_device
    from ckptview.core.run.process import RunError
    from ckptview.core.run.request import RunRequest, classify_source, probe_devices, run, run_iter
    from ckptview.core.run.result import RunResult

__all__ = ["DeviceInfo", "RunError", "RunRequest", "RunResult", "classify_source", "parse_device", "probe_devices", "run", "run_iter"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "devices": ["DeviceInfo", "parse_device"],
    "process": ["RunError"],
    "request": ["RunRequest", "classify_source", "probe_devices", "run", "run_iter"],
    "result": ["RunResult"],
})

"""Running a model: device listing, the load gate (what torch may load), and the isolated worker."""

from __future__ import annotations

from ckptview.core.run.devices import DeviceInfo, parse_device
from ckptview.core.run.process import RunError
from ckptview.core.run.request import RunRequest, classify_source, probe_devices, run, run_iter
from ckptview.core.run.result import RunResult

__all__ = ["DeviceInfo", "RunError", "RunRequest", "RunResult", "classify_source", "parse_device", "probe_devices", "run", "run_iter"]

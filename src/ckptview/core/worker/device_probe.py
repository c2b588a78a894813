"""List the devices a forward pass can run on (cpu, cuda:N, mps, xla, meta) and why one is unavailable.

torch (and torch_xla) are imported inside the functions. Every probe takes the torch module as an
argument so the cuda/mps/xla branches run in tests on a CPU-only machine with a stand-in module.
Probing CUDA creates a CUDA context; the window therefore probes in the worker process
(`core.run.request.probe_devices`). What a device is, for the parent, is `core.run.devices`.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Callable
from typing import Any

from ckptview.core.run.devices import DeviceInfo


def list_devices(torch_module: Any = None, import_xla: Callable[[], Any] | None = None) -> list[DeviceInfo]:
    """Every device kind, available ones with details, unavailable ones with the reason."""
    if torch_module is None:
        import torch as torch_module
    devices = [_cpu(torch_module)]
    devices += _guard("cuda", lambda: _cuda(torch_module))
    devices += _guard("mps", lambda: _mps(torch_module))
    devices += _guard("xla", lambda: _xla(import_xla or _import_xla))
    devices.append(DeviceInfo("meta", "meta", True, description="shape-only dry run: no memory, no values"))
    return devices


def _guard(kind: str, probe: Callable[[], list[DeviceInfo]]) -> list[DeviceInfo]:
    """Run one probe; a driver or runtime error makes the kind unavailable instead of failing the list."""
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001 - any driver failure is a reason, not a crash
        return [DeviceInfo(kind, kind, False, reason=f"driver error: {_one_line(exc)}")]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _cpu(torch: Any) -> DeviceInfo:
    threads = torch.get_num_threads()
    cpu_name = platform.processor() or platform.machine() or "CPU"
    total = None
    with contextlib.suppress(ValueError, OSError, AttributeError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return DeviceInfo("cpu", "cpu", True, description=f"{cpu_name}, {threads} threads", total_memory=total)


def _cuda(torch: Any) -> list[DeviceInfo]:
    version = getattr(torch, "__version__", "?")
    if not torch.backends.cuda.is_built():
        return [DeviceInfo("cuda", "cuda", False, reason=f"this torch build has no CUDA (torch {version})")]
    count = torch.cuda.device_count()
    if not torch.cuda.is_available():
        reason = "no CUDA device found" if count == 0 else "CUDA is present but not usable"
        try:
            torch.cuda.init()  # raises with the driver's own words when the driver is the problem
        except Exception as exc:  # noqa: BLE001
            reason = f"driver error: {_one_line(exc)}" if count else f"no CUDA device found ({_one_line(exc)})"
        return [DeviceInfo("cuda", "cuda", False, reason=reason)]
    out = []
    for index in range(count):
        name = f"cuda:{index}"
        try:
            props = torch.cuda.get_device_properties(index)
            free, total = torch.cuda.mem_get_info(index)
        except Exception as exc:  # noqa: BLE001 - one broken GPU must not hide the others
            out.append(DeviceInfo(name, "cuda", False, reason=f"driver error: {_one_line(exc)}"))
            continue
        out.append(DeviceInfo(name, "cuda", True, description=props.name,
                              capability=f"{props.major}.{props.minor}",
                              total_memory=int(total), free_memory=int(free)))
    if not out:
        out.append(DeviceInfo("cuda", "cuda", False, reason="no CUDA device found"))
    return out


def _mps(torch: Any) -> list[DeviceInfo]:
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_built():
        return [DeviceInfo("mps", "mps", False, reason="this torch build has no MPS (Apple silicon, macOS only)")]
    if not mps.is_available():
        return [DeviceInfo("mps", "mps", False, reason="no MPS device (needs macOS 12.3+ on Apple silicon)")]
    total = None
    with contextlib.suppress(Exception):  # older torch: memory unknown
        total = int(torch.mps.recommended_max_memory())
    return [DeviceInfo("mps", "mps", True, description="Apple Metal (MPS)", total_memory=total)]


def _import_xla() -> Any:
    import torch_xla.core.xla_model as xm

    return xm


def _xla(import_xla: Callable[[], Any]) -> list[DeviceInfo]:
    try:
        xm = import_xla()
    except ImportError:
        return [DeviceInfo("xla", "xla", False, reason="torch_xla is not installed")]
    names = list(xm.get_xla_supported_devices() or [])
    if not names:
        return [DeviceInfo("xla", "xla", False, reason="torch_xla found no TPU/XLA device")]
    out = []
    for index, raw in enumerate(names):
        hw = str(raw).split(":")[0]
        out.append(DeviceInfo(f"xla:{index}", "xla", True, description=f"XLA ({hw})"))
    return out

"""List the devices a forward pass can run on (cpu, cuda:N, mps, xla, meta) and why one is unavailable.

torch (and torch_xla) are imported inside the functions. Every probe takes the torch module as an
argument so the cuda/mps/xla branches run in tests on a CPU-only machine with a stand-in module.
Probing CUDA creates a CUDA context; the GUI therefore probes in the worker process (`runner.probe_devices`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ckptview.core.errors import CheckpointError

KINDS = ("cpu", "cuda", "mps", "xla", "meta")
_DEVICE_RE = re.compile(r"^(cpu|cuda|mps|xla|meta)(?::(\d+))?$")


class DeviceError(CheckpointError):
    """A device string is malformed or names a device this machine does not have."""


@dataclass
class DeviceInfo:
    """One device: its torch name, whether it can be used, and why not when it cannot."""

    name: str
    kind: str
    available: bool
    reason: str = ""
    description: str = ""
    capability: str | None = None
    total_memory: int | None = None
    free_memory: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The `ckptview devices --json` object."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceInfo:
        """Inverse of `to_json` (the worker sends devices as JSON)."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def parse_device(text: str) -> str:
    """Normalise a device string ('cuda' -> 'cuda:0'); DeviceError when it is not one ckptview knows."""
    text = text.strip().lower()
    match = _DEVICE_RE.match(text)
    if not match:
        raise DeviceError(f"unknown device '{text}' (use cpu, cuda:N, mps, xla:N or meta)")
    kind, index = match.groups()
    if kind in ("cpu", "meta", "mps"):
        if index not in (None, "0"):
            raise DeviceError(f"device '{text}': {kind} has no index")
        return kind
    return f"{kind}:{index or 0}"


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


def find_device(name: str, devices: list[DeviceInfo]) -> DeviceInfo:
    """The entry for `name`; DeviceError naming the reason when it is missing or unavailable."""
    name = parse_device(name)
    for dev in devices:
        if dev.name == name:
            if not dev.available:
                raise DeviceError(f"device {name} is not available: {dev.reason}")
            return dev
    kind = name.split(":")[0]
    others = [d for d in devices if d.kind == kind]
    if others and not others[0].available:
        raise DeviceError(f"device {name} is not available: {others[0].reason}")
    present = ", ".join(d.name for d in others if d.available) or "none"
    raise DeviceError(f"device {name} is not available: this machine has {kind} devices: {present}")


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


def format_table(devices: list[DeviceInfo]) -> str:
    """Human-readable listing for `ckptview devices`."""
    lines = []
    for dev in devices:
        if not dev.available:
            lines.append(f"{dev.name:<8} unavailable: {dev.reason}")
            continue
        parts = [dev.description] if dev.description else []
        if dev.capability:
            parts.append(f"capability {dev.capability}")
        if dev.total_memory:
            mem = f"{_gib(dev.total_memory)} total"
            if dev.free_memory is not None:
                mem = f"{_gib(dev.free_memory)} free of {mem}"
            parts.append(mem)
        lines.append(f"{dev.name:<8} " + ", ".join(parts))
    return "\n".join(lines)


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"

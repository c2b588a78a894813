"""The devices a forward pass can run on, as the parent knows them: names, the listing the worker sends,
and the choice of one (no torch here: `core.worker.device_probe` probes them in the worker process)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from ckptview.core.errors import CheckpointError
from ckptview.core.units import gib

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
            mem = f"{gib(dev.total_memory)} total"
            if dev.free_memory is not None:
                mem = f"{gib(dev.free_memory)} free of {mem}"
            parts.append(mem)
        lines.append(f"{dev.name:<8} " + ", ".join(parts))
    return "\n".join(lines)

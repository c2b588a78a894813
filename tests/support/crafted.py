"""Hostile archives made from real torch output: a record replaced by a pickle whose payload leaves a marker."""

from __future__ import annotations

import json
import os
import pickle
import shlex
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn


class Payload:
    """Unpickling it runs `os.system("touch MARKER")`: proof that code from the file ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {shlex.quote(self.marker)}",))


def payload_pickle(marker: str) -> bytes:
    """A bare pickle of `Payload` (what torch.load reads as a legacy stream, pickle.loads as one object)."""
    return pickle.dumps(Payload(marker), protocol=2)


class WithConstant(nn.Module):
    """A linear layer plus a lifted tensor constant: an exported program with weights and constants."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.offset = torch.ones(3)  # not a buffer: torch.export stores it as a constant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.offset


def rewrite_zip(src: str, dst: str, replace: dict[str, Callable[[bytes], bytes]],
                add: dict[str, bytes] | None = None) -> str:
    """Copy a torch zip, passing the records named (relative to its root folder) through `replace`."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        root = zin.infolist()[0].filename.split("/", 1)[0]
        for info in zin.infolist():
            data = zin.read(info)
            tail = info.filename.split("/", 1)[1]
            change = replace.get(tail) or next((f for k, f in replace.items()  # "*.suffix": every such record
                                                if k.startswith("*") and tail.endswith(k[1:])), None)
            if change is not None:
                data = change(data)
            zout.writestr(info.filename, data)
        for tail, data in (add or {}).items():
            zout.writestr(f"{root}/{tail}", data)
    return dst


def first_entry_pickled(data: bytes) -> bytes:
    """A .pt2 payload config whose first entry says its record is pickled (`use_pickle`)."""
    config = json.loads(data)
    next(iter(config["config"].values()))["use_pickle"] = True
    return json.dumps(config).encode()


def crafted_pt2(folder: Path, record: str, marker: str) -> str:
    """A real .pt2 whose `record` ('weight', 'constant', 'sample', 'opaque') is a payload pickle."""
    base = str(folder / "base.pt2")
    if not os.path.exists(base):
        torch.export.save(torch.export.export(WithConstant().eval(), (torch.randn(2, 4),)), base)
    payload = payload_pickle(marker)
    replace: dict[str, Callable[[bytes], bytes]] = {
        "weight": {"data/weights/model_weights_config.json": first_entry_pickled,
                   "data/weights/weight_0": lambda _: payload},
        "constant": {"data/constants/model_constants_config.json": first_entry_pickled,
                     "data/constants/tensor_0": lambda _: payload},
        "sample": {"data/sample_inputs/model.pt": lambda _: payload},
        "opaque": {"data/constants/model_constants_config.json": _opaque_config},
    }[record]
    add = {"data/constants/opaque_obj_0": payload} if record == "opaque" else None
    return rewrite_zip(base, str(folder / f"evil_{record}.pt2"), replace, add)


def _opaque_config(data: bytes) -> bytes:
    config = json.loads(data)
    entry = next(iter(config["config"].values()))
    entry["path_name"] = "opaque_obj_0"
    return json.dumps(config).encode()


def crafted_torchscript(folder: Path, record: str, marker: str) -> str:
    """A real TorchScript archive whose `record` ('constants.pkl', '*.debug_pkl', ...) is a payload pickle."""
    base = str(folder / "base_ts.pt")
    if not os.path.exists(base):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.save(torch.jit.trace(nn.Linear(4, 3).eval(), torch.randn(2, 4)), base)
    return rewrite_zip(base, str(folder / f"evil_{record.strip('*.').replace('/', '_')}.pt"),
                       {record: lambda _: payload_pickle(marker)})

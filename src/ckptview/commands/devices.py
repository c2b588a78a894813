"""`ckptview devices [--json]`: the devices a forward pass can run on, and why others cannot."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from ckptview.core.run.devices import format_table
from ckptview.core.run.request import probe_devices
from ckptview.core.text import printable


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `devices` subcommand."""
    p = sub.add_parser("devices", help="list cpu, cuda:N, mps, xla and meta devices (with why not)")
    p.add_argument("--json", action="store_true", help="print a JSON list of device objects")


def run(args: argparse.Namespace) -> int:
    """Print the device list; exit 0 (cpu and meta are always there). The devices are probed in the worker
    process, as the window probes them: torch and the drivers never load in this one."""
    devices = probe_devices()
    if args.json:
        print(json.dumps([d.to_json() for d in devices], indent=2))
    else:
        # Descriptions and reasons come from drivers and libraries: escaped like any text we print.
        shown = [replace(d, name=printable(d.name), reason=printable(d.reason), description=printable(d.description),
                         capability=None if d.capability is None else printable(d.capability)) for d in devices]
        print(format_table(shown))
    return 0

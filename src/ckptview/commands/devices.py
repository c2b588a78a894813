"""`ckptview devices [--json]`: the devices a forward pass can run on, and why others cannot."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `devices` subcommand."""
    p = sub.add_parser("devices", help="list cpu, cuda:N, mps, xla and meta devices (with why not)")
    p.add_argument("--json", action="store_true", help="print a JSON list of device objects")


def run(args: argparse.Namespace) -> int:
    """Print the device list; exit 0 (cpu and meta are always there)."""
    from ckptview.core.devices import format_table, list_devices

    devices = list_devices()
    if args.json:
        print(json.dumps([d.to_json() for d in devices], indent=2))
    else:
        print(format_table(devices))
    return 0

"""`--scheduler` and `--workers` of the commands whose work covers a whole checkpoint (`info --stats`,
`info --spectral`, `diff`, `export`): where that work runs (see docs/guide/distributed.md)."""

from __future__ import annotations

import argparse

from ckptview.core.sweep.runner import Placement


def add_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """--scheduler and --workers, `what` naming the work they place."""
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help=f"{what} on this Dask cluster: each worker opens the file or URL itself (a local path "
                        "must be on a file system every worker shares)")
    p.add_argument("--workers", type=worker_count, default=None, metavar="N",
                   help=f"{what} in N local worker processes (default: one per GiB to read, at most one per "
                        "core; 1: in this process)")


def placement(args: argparse.Namespace) -> Placement:
    """Where the command's whole-checkpoint work runs, as the command line says."""
    return Placement(getattr(args, "scheduler", None), getattr(args, "workers", None))


def worker_count(text: str) -> int:
    """`--workers N`'s type: a whole number, 1 or more (`series` takes it too)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {text!r}")
    return value

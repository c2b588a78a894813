"""The executor, cache and watch options of `ckptview series` (see docs/guide/series-live.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ckptview.commands.cluster_options import worker_count
from ckptview.core.jobs import drain
from ckptview.core.series.cache import SeriesCache
from ckptview.core.series.live import LiveRun
from ckptview.core.series.model import SeriesProgress, SeriesResult
from ckptview.core.series.watch import watch_run
from ckptview.core.text import printable
from ckptview.core.units import plural


def add_arguments(p: argparse.ArgumentParser) -> None:
    """--watch, --interval, --scheduler, --workers, --no-cache, --clear-cache."""
    p.add_argument("--watch", action="store_true",
                   help="follow the run: report checkpoints as they are written, changed or deleted, until "
                        "Ctrl+C (with --json: one JSON object per line)")
    p.add_argument("--interval", type=_positive, default=10.0, metavar="SECONDS",
                   help="with --watch: how often a remote folder (s3://, hf://, https://) is listed again "
                        "(default 10)")
    p.add_argument("--settle", type=_positive, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="read the checkpoints on this Dask cluster (each worker reads its files directly)")
    p.add_argument("--workers", type=worker_count, default=None, metavar="N",
                   help="local worker processes (default: one per GiB to read, at most one per core: "
                        "small runs are read in this process; 1 reads in this process)")
    p.add_argument("--no-cache", action="store_true", help="read every checkpoint again, and keep nothing")
    p.add_argument("--clear-cache", action="store_true",
                   help="forget every checkpoint's figures kept in the cache, then exit (no PATH needed)")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, not {text!r}")
    return value


def _cache(args: argparse.Namespace) -> Any:
    if args.no_cache:
        return None
    return SeriesCache()


def _live_run(args: argparse.Namespace) -> Any:
    return LiveRun(args.paths, cache=_cache(args), workers=args.workers, scheduler=args.scheduler,
                   chunk_elems=max(1, args.chunk_elems), stall_threshold=args.stall_threshold,
                   explode_factor=args.explode_factor, spectral=getattr(args, "spectral", False),
                   remote=args.remote)


def clear_cache() -> int:
    """`ckptview series --clear-cache`."""
    cache = SeriesCache()
    held = cache.clear()
    cache.close()
    print(f"cleared the series cache ({plural(held, 'checkpoint')}): {printable(cache.path)}")
    return 0


def read_run(args: argparse.Namespace) -> SeriesResult:
    """The whole run, through the cache and the executor, with progress on a terminal's stderr."""
    run = _live_run(args)
    run.discover()
    try:
        result: SeriesResult = drain(run.update(), _Progress().show)
        return result
    finally:
        _Progress.clear()
        run.close()
        if run.cache is not None:
            _cache_warnings(run.cache)
            run.cache.close()


def _cache_warnings(cache: Any) -> None:
    """The cache's lines for people (a broken database started again), one each, on stderr."""
    for line in cache.take_warnings():
        print(f"ckptview: {printable(line)}", file=sys.stderr)


def watch(args: argparse.Namespace) -> int:
    """`ckptview series PATH... --watch [--json]`: report changes until interrupted."""
    run = _live_run(args)
    progress = _Progress()
    try:
        for item in watch_run(run, interval=args.interval, settle=args.settle):
            if isinstance(item, SeriesProgress):
                progress.show(item)
                continue
            _Progress.clear()
            if run.cache is not None:
                _cache_warnings(run.cache)
            for event in item:
                sys.stdout.write((json.dumps(event, allow_nan=False) if args.json else _line(event)) + "\n")
            sys.stdout.flush()
    finally:
        _Progress.clear()
        if run.cache is not None:
            run.cache.close()
    return 0


def _line(event: dict[str, Any]) -> str:
    ck = event["checkpoint"]
    where = f"step {ck['step']}" if ck.get("step") is not None else f"#{ck.get('index')}"
    detail = f"unreadable: {ck['error']}" if ck.get("error") else \
        f"{_count_of(len(event['tensors']), 'tensor')}, {_count_of(len(event['findings']), 'finding')}"
    if ck.get("unsafe_globals"):  # as the table's line under the checkpoint's row
        detail += "; UNSAFE GLOBALS (referenced, not run): " + ", ".join(ck["unsafe_globals"])
    return printable(f"{event['event']:<8} {where:<12} {ck['path']}  ({detail})")


def _count_of(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


class _Progress:
    """`read 3.2 of 9.6 GB` on stderr, rewritten in place, only when stderr is a terminal."""

    shown = False
    last = -1.0

    def show(self, p: SeriesProgress) -> None:
        if not sys.stderr.isatty():
            return
        now = time.monotonic()
        if now - self.last < 0.1 and p.fraction < 1:
            return
        self.last = now
        pct = int(100 * p.fraction)
        sys.stderr.write(f"\rckptview: reading checkpoints {pct:3d}% {printable(p.message)[:50]:<50}")
        sys.stderr.flush()
        _Progress.shown = True

    @staticmethod
    def clear() -> None:
        if _Progress.shown and sys.stderr.isatty():
            sys.stderr.write("\r" + " " * 80 + "\r")
            sys.stderr.flush()
        _Progress.shown = False

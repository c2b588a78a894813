"""`ckptview export PATH --out OUT [--key NAME ...] [--format npy|npz|safetensors]`: write tensors out."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

from ckptview.core.read.open import open_checkpoint
from ckptview.core.text import printable
from ckptview.core.units import human_bytes, plural
from ckptview.core.write.export import FORMATS, ExportResult, plan_export, run_export, select_tensors


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `export` subcommand."""
    p = sub.add_parser(
        "export", help="export tensors to .npy files, an .npz or a .safetensors file",
        description="Format: --format, else from OUT: *.npz, *.safetensors, *.npy (one tensor); "
                    "anything else (an existing folder, a trailing '/', no suffix) is a folder of .npy files.")
    p.add_argument("path", help="checkpoint file or folder, or a URL (https://, hf://, s3://)")
    p.add_argument("--out", required=True, help="output folder (npy) or file (.npz, .safetensors, .npy)")
    p.add_argument("--key", action="append", metavar="NAME",
                   help="tensor name or glob as `ckptview info` lists them (repeatable; default: all)")
    p.add_argument("--format", choices=FORMATS, help="output format (default: from OUT)")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.add_argument("--exact-dtypes", action="store_true",
                   help="keep bfloat16/float8 bits (ml_dtypes types) instead of converting to float32")


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwinds like Ctrl-C so the export removes its temporary files."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """While active, SIGTERM and SIGHUP raise Terminated (as SIGINT raises KeyboardInterrupt)."""
    def handler(signum: int, _frame: object) -> None:
        for other in previous:  # a second signal must not interrupt the cleanup this one starts
            signal.signal(other, signal.SIG_IGN)
        raise Terminated(signum)

    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is None or threading.current_thread() is not threading.main_thread():
            continue
        previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def run(args: argparse.Namespace) -> int:
    """Export, print name -> file for each tensor and the notes; 0 on success."""
    try:
        with _terminate_cleanly():
            result = _export(args)
    except Terminated as stop:
        name = signal.Signals(stop.signum).name
        print(f"ckptview: export stopped by {name}; its temporary files were removed", file=sys.stderr)
        return 128 + stop.signum
    print_result(result)
    return 0


def _export(args: argparse.Namespace) -> ExportResult:
    ckpt = open_checkpoint(args.path)
    try:
        plan = plan_export(select_tensors(ckpt, args.key), args.out, args.format, exact_dtypes=args.exact_dtypes)
        job = run_export(plan, force=args.force)
        show = sys.stderr.isatty()
        try:
            while True:
                progress = next(job)
                if show:
                    sys.stderr.write(f"\r{progress.fraction:6.1%} {printable(progress.message)[:60]:<60}")
        except StopIteration as stop:
            return stop.value
        finally:
            job.close()  # on Ctrl-C or SIGTERM: removes the temporary files now, not at garbage collection
            if show:
                sys.stderr.write("\r" + " " * 68 + "\r")
    finally:
        ckpt.close()


def print_result(result: ExportResult) -> None:
    """What was written: a summary line, one `name -> file` line per tensor, then the notes (stderr)."""
    print(f"wrote {plural(len(result.files), 'tensor')} ({human_bytes(result.bytes_written)}) "
          f"as {result.format} to {printable(result.out)}")
    base = result.out if os.path.isdir(result.out) else None
    for name, target in result.files.items():
        shown = os.path.relpath(target, base) if base else target
        print(f"  {printable(name)} -> {printable(shown)}")
    if result.manifest:
        print(f"manifest: {printable(result.manifest)}")
    for note in result.notes:
        print(f"note: {printable(note)}", file=sys.stderr)

"""`ckptview export PATH --out OUT [--key NAME ...] [--format npy|npz|safetensors]`: write tensors out."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

from ckptview.commands import cluster_options
from ckptview.commands.opening import open_given
from ckptview.commands.wording import cli_words
from ckptview.core.export.plan import FORMATS, ExportResult, plan_export, select_tensors
from ckptview.core.jobs import Progress, drain
from ckptview.core.sweep.writing import export_placed
from ckptview.core.text import printable
from ckptview.core.units import human_bytes, plural


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
    p.add_argument("--dequantize", choices=("float32", "bf16"), metavar="{float32,bf16}",
                   help="write a quantized checkpoint's weights dequantized, as float32 or bf16 (default: its "
                        "stored parts, bit for bit)")
    p.add_argument("--exact-dtypes", action="store_true",
                   help="keep bfloat16/float8 bits (ml_dtypes types) instead of converting to float32")
    p.add_argument("--expand-repeats", action="store_true",
                   help="write tensors that repeat their storage (stride 0, overlapping strides) expanded, "
                        "every element they declare (refused without it: see docs/limits.md)")
    cluster_options.add_arguments(p, "read and write the tensors (OUT must be on a file system they share)")


class Terminated(BaseException):
    """A terminating signal arrived: unwinds like Ctrl-C so the export removes its temporary files."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# Signals whose default action ends the process and that a program may catch. SIGINT is Python's own
# (KeyboardInterrupt); synchronous faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS) are
# not ours to catch. SIGPIPE and SIGXFSZ start ignored in Python and are caught only where a parent or the
# program set them back to their default; a signal someone else handles (a profiler's timer) is left alone.
_TERMINATING = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF",
                "SIGXCPU", "SIGXFSZ", "SIGPIPE", "SIGIO", "SIGPOLL", "SIGPWR", "SIGSTKFLT")


def terminating_signals() -> list[int]:
    """The catchable signals that would end this process now (default action), real-time ones included."""
    nums = {int(getattr(signal, name)) for name in _TERMINATING if hasattr(signal, name)}
    if hasattr(signal, "SIGRTMIN"):
        nums.update(range(int(signal.SIGRTMIN), int(signal.SIGRTMAX) + 1))
    return sorted(n for n in nums if signal.getsignal(n) == signal.SIG_DFL)


def signal_name(signum: int) -> str:
    """SIGTERM, SIGRTMIN+3, ... for `signum`."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        rtmin = getattr(signal, "SIGRTMIN", None)
        return f"SIGRTMIN+{signum - rtmin}" if rtmin is not None and signum > rtmin else f"signal {signum}"


@contextlib.contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """While active, every terminating signal raises Terminated (as SIGINT raises KeyboardInterrupt)."""
    def handler(signum: int, _frame: object) -> None:
        for other in previous:  # a second signal must not interrupt the cleanup this one starts
            signal.signal(other, signal.SIG_IGN)
        raise Terminated(signum)

    previous: dict[int, signal._HANDLER] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in terminating_signals():
            try:
                previous[signum] = signal.signal(signum, handler)
            except (OSError, ValueError):  # one the platform will not let Python handle
                continue
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
        print(f"ckptview: export stopped by {signal_name(stop.signum)}; its temporary files were removed",
              file=sys.stderr)
        return 128 + stop.signum
    print_result(result)
    return 0


def _export(args: argparse.Namespace) -> ExportResult:
    ckpt = open_given(args.path, args.remote)
    try:
        dequantize = getattr(args, "dequantize", None)
        plan = plan_export(select_tensors(ckpt, args.key, dequantize=dequantize is not None), args.out, args.format,
                           exact_dtypes=args.exact_dtypes, expand_repeats=args.expand_repeats,
                           dequantized_dtype="bfloat16" if dequantize == "bf16" else "float32")
        job = export_placed(ckpt, args.path, args.remote, plan, cluster_options.placement(args), force=args.force)
        show = sys.stderr.isatty()

        def shown(progress: Progress) -> None:
            sys.stderr.write(f"\r{progress.fraction:6.1%} {printable(progress.message)[:60]:<60}")

        try:
            return drain(job, shown if show else None)
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
    prefix = os.path.join(base, "") if base else None
    lines = []
    for name, target in result.files.items():
        if prefix is None:
            shown = target
        elif target.startswith(prefix) and os.sep not in target[len(prefix):]:
            shown = target[len(prefix):]  # a file in the folder: its name (relpath costs 50 us a tensor)
        else:
            shown = os.path.relpath(target, base)
        lines.append(f"  {printable(name)} -> {printable(shown)}\n")
        if len(lines) >= 4096:  # written in batches: a print per tensor of 200,000
            sys.stdout.write("".join(lines))
            lines.clear()
    sys.stdout.write("".join(lines))
    if result.manifest:
        print(f"manifest: {printable(result.manifest)}")
    for note in result.notes:
        print(f"note: {printable(cli_words(note))}", file=sys.stderr)

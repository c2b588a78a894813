"""`ckptview series PATH... [--json]`: a training run's checkpoints as a timeline (exit 0, or 2 on unreadable)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ckptview.commands import series_options as series_live
from ckptview.commands.failures import CommandFailure
from ckptview.core.series.findings import is_loss, is_rate
from ckptview.core.series.model import SeriesResult, TensorSeries
from ckptview.core.series.timeline import SERIES_CHUNK_ELEMS
from ckptview.core.text import printable
from ckptview.core.units import MISSING, figure, percent, plural

MAX_ERROR_LINES = 20


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `series` subcommand."""
    p = sub.add_parser("series", help="a training run's checkpoints as a timeline",
                       description="Figures of every tensor over a run's checkpoints (norm, mean, std, max |x|, "
                                   "NaN/Inf, update ratio, fraction changed) and what stands out. PATH is a "
                                   "run folder, or several checkpoints/globs. Exit status 0, or 2 when a "
                                   "checkpoint or tensor could not be read.")
    p.add_argument("paths", nargs="*", metavar="PATH", help="a run folder, checkpoints, or globs")
    p.add_argument("--json", action="store_true", help="print one JSON object (stable contract)")
    p.add_argument("--stall-threshold", type=_non_negative, default=0.0, metavar="RATIO",
                   help="a tensor whose update ratio stays below RATIO to the end of the run has stalled "
                        "(default 0: only tensors that do not change at all)")
    p.add_argument("--explode-factor", type=_factor, default=10.0, metavar="FACTOR",
                   help="a norm that grows more than FACTOR times between two checkpoints exploded (default 10)")
    p.add_argument("--spectral", action="store_true",
                   help="also the power-law alpha and stable rank of every 2-D weight in every checkpoint, "
                        "and where a layer's alpha leaves [2, 6] (slower: one spectrum per weight)")
    p.add_argument("--chunk-elems", type=int, default=SERIES_CHUNK_ELEMS, help=argparse.SUPPRESS)
    series_live.add_arguments(p)


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {text!r}")
    return value


def _factor(text: str) -> float:
    value = _non_negative(text)
    if value <= 1:
        raise argparse.ArgumentTypeError(f"must be greater than 1, not {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    """Run `ckptview series`; returns the exit status."""
    if args.clear_cache:
        return series_live.clear_cache()
    if not args.paths:
        raise CommandFailure("series: give a run folder, checkpoints or globs (PATH)")
    if args.watch:
        return series_live.watch(args)
    result = series_live.read_run(args)
    if len(result.checkpoints) == 1:  # no change to follow: not a "timeline" of one step
        only = result.checkpoints[0].path
        raise CommandFailure(f"series: a training run needs at least two checkpoints, and {', '.join(args.paths)} "
                             f"holds one: {only} (`ckptview info {only}` lists it)", kind="not_a_series")
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print_report(result)
    errors = [f for f in result.findings if f.kind == "unreadable"]
    for finding in errors[:MAX_ERROR_LINES]:
        where = f"{finding.checkpoint}: {finding.tensor}: " if finding.tensor else f"{finding.checkpoint}: "
        print(f"ckptview: {printable(where + finding.detail)}", file=sys.stderr)
    if len(errors) > MAX_ERROR_LINES:
        print(f"ckptview: ... and {len(errors) - MAX_ERROR_LINES} more unreadable", file=sys.stderr)
    return 2 if errors else 0


def print_report(result: SeriesResult) -> None:
    """The human-readable timeline: checkpoints, per-tensor figures first -> last, findings."""
    out = sys.stdout
    sources = ", ".join(result.order_sources) or MISSING
    by = {"step": "step", "epoch": "epoch", "name": "the numbers in their names"}[result.order_by]
    out.write(f"{plural(len(result.checkpoints), 'checkpoint')}, ordered by {by} (found in: {printable(sources)})\n")
    out.write(f"{'#':>3} {'step':>8} {'epoch':>7}  {'format':<12} path\n")
    for i, ref in enumerate(result.checkpoints):
        pos = ref.position
        note = f"  [unreadable: {ref.error}]" if ref.error else ""
        out.write(f"{i:>3} {_opt(pos.step):>8} {_opt(pos.epoch):>7}  {ref.format or MISSING:<12} "
                  f"{printable(ref.path)}{printable(note)}\n")
        if ref.unsafe_globals:
            out.write(f"{'':>3} UNSAFE GLOBALS (referenced, not run): "
                      + ", ".join(map(printable, ref.unsafe_globals)) + "\n")
    rows = list(result.tensors.values())
    if rows:
        width = min(max(len(printable(t.name)) for t in rows), 60)
        out.write(f"\n{'tensor':<{width}}  {'shape':<14} {'norm first':>11} {'norm last':>11} "
                  f"{'max upd':>10} {'last upd':>10} {'changed':>8}  nan/inf (last)"
                  + ("  alpha (last)  stable rank (last)" if result.spectral else "") + "\n")
        for t in rows:
            out.write(_tensor_row(t, width) + (_spectral_cells(t) if result.spectral else "") + "\n")
    _write_scalars(out, result)
    out.write(f"\n{plural(len(result.findings), 'finding')}\n")
    for f in result.findings:
        known = f.index < len(result.checkpoints)
        where = result.label(f.index) if known else "?"
        # A finding about a whole checkpoint names its file.
        subject = f.tensor if f.tensor is not None else (
            result.checkpoints[f.index].file_name if known else f.checkpoint)
        out.write(f"  {printable(where):<12} {f.kind:<14} {printable(subject)}: {printable(f.detail)}\n")


def _write_scalars(out: Any, result: SeriesResult) -> None:
    """What the run logged: each curve's first and last value (losses and learning rates first), the best
    checkpoint, the logger's hyper-parameters and the log files that could not be read."""
    curves = sorted(result.scalar_curves(), key=lambda c: (0 if is_loss(c.name) else 1 if is_rate(c.name) else 2))
    if curves:
        width = min(max(len(printable(c.name)) for c in curves), 40)
        out.write(f"\n{plural(len(curves), 'logged scalar')} (first -> last)\n")
        for c in curves:
            name = printable(c.name)
            name = name if len(name) <= width else name[:width - 3] + "..."
            first = c.steps[0] if c.steps and c.steps[0] is not None else None
            last = c.steps[-1] if c.steps and c.steps[-1] is not None else None
            where = f"steps {first}-{last}" if first is not None and last is not None else ""
            out.write(f"  {name:<{width}}  {figure(c.values[0]):>10} -> {figure(c.values[-1]):<10} "
                      f"{plural(len(c), 'point'):>10}  {where:<16} {printable(c.source)}\n")
    best = result.best_checkpoint()
    if best is not None:
        found, index = best
        which = result.checkpoints[index].file_name if index is not None else (found.path or MISSING)
        metric = f"{found.metric} " if found.metric else ""
        out.write(f"best checkpoint: {printable(which)} ({printable(metric)}{figure(found.value)}; "
                  f"{printable(found.source)})\n")
    log = result.log
    if log is not None and log.hyper_parameters:
        shown = ", ".join(f"{n}={v}" for n, v, _ in log.hyper_parameters[:12])
        more = f", ... {len(log.hyper_parameters) - 12} more" if len(log.hyper_parameters) > 12 else ""
        out.write(f"hyper-parameters ({printable(log.hyper_parameters[0][2])}): {printable(shown + more)}\n")
    for f in log.files if log is not None else []:
        if f.error:
            out.write(f"log file {printable(f.path)}: {printable(f.error)}\n")


def _tensor_row(t: TensorSeries, width: int) -> str:
    name = printable(t.name)
    name = name if len(name) <= width else "..." + name[-(width - 3):]
    norms = [v for v in t.figure("norm") if v is not None]
    ratios = [v for v in t.update_ratio if v is not None]
    changed = [v for v in t.frac_changed if v is not None]
    read = [s for s in t.stats if s is not None]
    # Values, not checkpoints: the NaN and Inf counts of the last checkpoint read ("0/0" when only earlier
    # ones held some; their findings say where they were first).
    last = read[-1] if read else None
    counts = f"{last.nan}/{last.posinf + last.neginf}" if last is not None else MISSING
    nonfinite = counts if any(s.nan or s.posinf or s.neginf for s in read) else MISSING
    shape = "[" + ",".join(map(str, t.shape or ())) + "]"
    return (f"{name:<{width}}  {shape:<14} {figure(norms[0] if norms else None):>11} "
            f"{_norm(last) if last is not None else MISSING:>11} {figure(max(ratios) if ratios else None):>10} "
            f"{figure(ratios[-1] if ratios else None):>10} {percent(changed[-1] if changed else None):>8}  "
            f"{nonfinite}")


def _spectral_cells(t: TensorSeries) -> str:
    """The last alpha and stable rank fitted (`MISSING` for what is not a 2-D weight), under the header's columns."""
    alpha = next((v for v in reversed(t.spectral("alpha")) if v is not None), None)
    rank = next((v for v in reversed(t.spectral("stable_rank")) if v is not None), None)
    return f"  {figure(alpha):>12}  {figure(rank):>18}"


def _norm(stats: Any) -> str:
    """The L2 norm of the finite values, or "no finite" when the tensor holds none (not 0: it is not zeroed)."""
    if stats.numel and stats.nan + stats.posinf + stats.neginf == stats.numel:
        return "no finite"
    return figure(stats.l2)


def _opt(x: Any) -> str:
    return MISSING if x is None else str(x)

"""`ckptview diff A B [--json]`: compare two checkpoints tensor by tensor (exit 0 same, 1 differ, 2 error)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ckptview.commands import cluster_options, keep_until_exit
from ckptview.commands.failures import CommandFailure
from ckptview.commands.info import write_json, write_json_stream
from ckptview.commands.opening import open_given
from ckptview.core.compare.align import parse_mapping
from ckptview.core.compare.diff import DIFF_CHUNK_ELEMS, DiffResult, plan_diff
from ckptview.core.compare.gguf_view import side_views
from ckptview.core.compare.values import iter_text
from ckptview.core.gc_policy import paused_gc
from ckptview.core.inspect.training import short_fact_keys
from ckptview.core.jobs import drain
from ckptview.core.sweep.pairs import compare_placed
from ckptview.core.text import printable
from ckptview.core.units import figure, percent, plural, shape_str

# Table order: what changed first, the identical rows last (and only with --all).
_ORDER = {"changed": 0, "dtype_mismatch": 1, "shape_mismatch": 2, "only_a": 3, "only_b": 4, "error": 5,
          "identical": 6}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `diff` subcommand."""
    p = sub.add_parser("diff", help="compare two checkpoints tensor by tensor",
                       description="Compare two checkpoints. Exit status 0 when every tensor is identical, "
                                   "1 when something differs, 2 on error.")
    p.add_argument("a", help="first checkpoint (A): a path or a URL")
    p.add_argument("b", help="second checkpoint (B): a path or a URL")
    p.add_argument("--json", action="store_true", help="print one JSON object (stable contract)")
    p.add_argument("--strip-a", metavar="PREFIX", default=None,
                   help="prefix to remove from A's names instead of the detected one ('' removes nothing)")
    p.add_argument("--strip-b", metavar="PREFIX", default=None, help="the same for B")
    p.add_argument("--map", metavar="A_PREFIX=B_PREFIX", action="append", default=[],
                   help="match A's names starting with A_PREFIX to B's starting with B_PREFIX "
                        "(after stripping; repeatable, first match wins)")
    p.add_argument("--all", action="store_true",
                   help="list identical tensors and every value that differs too, and let entries outside the "
                        "model weights (optimizer state, sample inputs, step counters) count in the exit status")
    p.add_argument("--chunk-elems", type=int, default=DIFF_CHUNK_ELEMS, help=argparse.SUPPRESS)
    cluster_options.add_arguments(p, "compare the values")


def run(args: argparse.Namespace) -> int:
    """Run `ckptview diff`; returns the exit status."""
    # As `info`: reading, aligning and comparing build millions of young objects and no garbage cycles;
    # a collector pass between two steps would walk them all (1.8 s of a 100,000-tensor diff).
    with paused_gc():
        return _diff(args)


def _diff(args: argparse.Namespace) -> int:
    try:
        mapping = parse_mapping(args.map)
    except ValueError as exc:
        raise CommandFailure(str(exc)) from None
    a = open_given(args.a, args.remote)
    try:
        b = open_given(args.b, args.remote)
        try:
            # Planned here from metadata; the values compared here, or on workers that open both files.
            result = plan_diff(a, b, args.strip_a, args.strip_b, mapping, side_views(a, b))
            drain(compare_placed(result, args.a, args.b, args.remote, cluster_options.placement(args),
                                 args.strip_a, args.strip_b, mapping, chunk_elems=args.chunk_elems))
        finally:
            b.close()
            keep_until_exit(b)
    finally:
        a.close()
        keep_until_exit(a)
    if args.json:
        if sys.stdout.isatty():
            write_json(result.to_json())  # indented for a person
        else:  # scripts: the C encoder's compact text, a batch of rows at a time
            write_json_stream(result.json_items())
            sys.stdout.write("\n")
    else:
        print_table(result, show_identical=args.all)
    return exit_status(result, include_other=args.all)


def exit_status(result: DiffResult, include_other: bool = False) -> int:
    """diff(1)'s convention over the model weights (every entry with ``include_other``): 0 identical,
    1 differ, 2 when a tensor could not be read."""
    rows = result.tensors if include_other else result.weights
    if any(t.status == "error" for t in rows):
        return 2
    return 0 if all(t.status == "identical" for t in rows) else 1


def print_table(result: DiffResult, show_identical: bool = False) -> None:
    """The human-readable comparison; every text from the files goes through `printable()`."""
    out = sys.stdout
    al = result.alignment
    out.write(f"A {printable(result.path_a)}\nB {printable(result.path_b)}\n")
    if al.strip_a or al.strip_b:
        out.write(f"stripped: A {printable(al.strip_a or '(nothing)')}, B {printable(al.strip_b or '(nothing)')}\n")
    for pa, pb in al.mapping:
        out.write(f"mapped: A {printable(pa)}* -> B {printable(pb)}*\n")
    _write_values(out, result, show_identical)
    _write_rows(out, result.weights, show_identical)
    summary = result.summary()
    overall = result.overall_rel_l2()
    out.write(f"\n{plural(len(result.weights), 'model weight')}: {_counts(summary) or 'none'}")
    if overall is not None:
        out.write(f"; overall relative change {figure(overall)} "
                  f"(over the {plural(len(result.parameters), 'parameter tensor')})")
    out.write("\n")
    buffers = result.buffers
    if buffers:
        out.write(f"{plural(len(buffers), 'buffer')} (running statistics, integer counters; not in the overall "
                  f"figure): {_counts(result.summary(buffers))}")
        changed = result.overall_rel_l2(buffers)
        if changed is not None:
            out.write(f"; floating-point buffers' relative change {figure(changed)}")
        out.write("\n")
    hidden = summary.get("identical", 0) if not show_identical else 0
    if hidden:
        out.write(f"({plural(hidden, 'identical tensor')} not listed; --all lists them)\n")
    other = result.other
    if other:
        out.write("\nOther entries (optimizer state, sample inputs, step counters: "
                  + ("counted in the exit status with --all)\n" if show_identical else "not in the exit status)\n"))
        _write_rows(out, other, show_identical)
        other_counts = result.summary(other)
        text = ", ".join(f"{other_counts[s]} {s}" for s in sorted(other_counts, key=lambda s: _ORDER.get(s, 9)))
        out.write(f"\n{plural(len(other), 'other entry', 'other entries')}: {text}")
        changed = result.overall_rel_l2(other)
        if changed is not None:
            out.write(f"; their relative change {figure(changed)}")
        out.write("\n")
    _write_quantization(out, result)
    for side, names in (("A", al.not_compared_a), ("B", al.not_compared_b)):
        if names:
            out.write(f"{plural(len(names), 'tensor')} outside the model weights of {side} not compared "
                      f"(the other file has none): {', '.join(map(printable, names[:5]))}{' ...' if len(names) > 5 else ''}\n")


def _write_values(out: Any, result: DiffResult, show_all: bool) -> None:
    """The values beside the tensors that differ: training facts and hyper-parameters (everything with
    --all), the rest counted."""
    if not result.values:
        return
    shown = [v for v in result.values if show_all or v.rank < 2]
    out.write(f"\n{plural(len(result.values), 'value')} beside the tensors differ\n")
    if shown:
        names = [printable(n) for n in short_fact_keys([v.name for v in shown])]  # Lightning's callback keys cut
        width = min(max(len(n) for n in names), 60)
        for v, name in zip(shown, names, strict=True):
            name = name if len(name) <= width else "..." + name[-(width - 3):]
            a, b = (printable(t) for t in iter_text(v))
            out.write(f"  {name:<{width}}  {a} -> {b}\n")
    hidden = len(result.values) - len(shown)
    if hidden:
        out.write(f"  ({plural(hidden, 'other value')} (loop counters, paths, ...) not listed; --all lists them)\n")


QUANT_ROWS = 20  # weights listed under "what quantization cost" (--json lists them all)


def _write_quantization(out: Any, result: DiffResult) -> None:
    """What quantization cost: the headline over every quantized weight, then the worst ones."""
    cost = result.quantization_cost()
    if cost is None:
        return
    out.write(f"\nWhat quantization cost ({printable('; '.join(cost['schemes']))}): "
              f"{plural(cost['compared'], 'quantized weight')} compared")
    if cost["rel_error"] is not None:
        out.write(f", relative error {figure(cost['rel_error'])}, SQNR {figure(cost['sqnr_db'])} dB, "
                  f"max |error| {figure(cost['max_abs_error'])}, cosine {figure(cost['cosine'])}")
    out.write("\n")
    worst = cost["worst"][:QUANT_ROWS]
    if not worst:
        return
    names = [printable(w["name"]) for w in worst]
    width = min(max(len(n) for n in names), 60)
    out.write(f"{'worst first':<{width}}  {'rel_error':>10} {'SQNR dB':>8} {'max_abs':>10} {'cosine':>10}  scheme\n")
    for w, name in zip(worst, names, strict=True):
        name = name if len(name) <= width else "..." + name[-(width - 3):]
        out.write(f"{name:<{width}}  {figure(w['rel_error']):>10} {figure(w['sqnr_db']):>8} "
                  f"{figure(w['max_abs_error']):>10} {figure(w['cosine']):>10}  {printable(w['scheme'] or '')}\n")
    if len(cost["worst"]) > QUANT_ROWS:
        out.write(f"... and {len(cost['worst']) - QUANT_ROWS} more (--json lists them all)\n")


def _write_rows(out: Any, rows: list[Any], show_identical: bool) -> None:
    rows = sorted(rows, key=lambda t: (_ORDER.get(t.status, 9), -(t.rel_l2 or 0.0)))
    listed = [t for t in rows if show_identical or t.status != "identical"]
    if not listed:
        return
    names = [printable(t.label or t.name) for t in listed]
    width = min(max(len(n) for n in names), 60)
    out.write(f"\n{'name':<{width}}  {'status':<14} {'rel_l2':>10} {'max_abs':>10} {'cosine':>10} "
              f"{'changed':>8}  detail\n")
    for t, name in zip(listed, names, strict=True):
        name = name if len(name) <= width else "..." + name[-(width - 3):]
        out.write(f"{name:<{width}}  {t.status:<14} {figure(t.rel_l2):>10} {figure(t.max_abs_diff):>10} "
                  f"{figure(t.cosine):>10} {percent(t.frac_changed):>8}  {printable(_detail(t))}\n")


def _counts(summary: dict[str, int]) -> str:
    return ", ".join(f"{summary[s]} {s}" for s in sorted(summary, key=lambda s: _ORDER.get(s, 9)))


def _detail(t: Any) -> str:
    if t.tied_to:
        return f"tied copy, compared with {t.tied_to}"
    if t.status in ("shape_mismatch",):
        return f"{shape_str(t.shape_a)} vs {shape_str(t.shape_b)}"
    if t.status == "dtype_mismatch":
        return f"{t.dtype_a} vs {t.dtype_b}"
    if t.status == "only_a":
        return f"{t.dtype_a} {shape_str(t.shape_a)}"
    if t.status == "only_b":
        return f"{t.dtype_b} {shape_str(t.shape_b)}"
    if t.status == "error":
        return t.error or ""
    if t.nonfinite_changed:
        return f"{t.nonfinite_changed} NaN/Inf positions differ"
    return ""

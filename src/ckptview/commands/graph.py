"""`ckptview graph PATH [--json | --dot] [--model module.py:Class] [--compare OTHER]`: the model's graph, read as
data (nothing from the file runs; the model code `--model` names runs in the worker, as `run --model`'s)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from ckptview.commands.opening import open_given
from ckptview.commands.wording import cli_words
from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint
from ckptview.core.compare import diff_checkpoints
from ckptview.core.graph import ModelGraph, graph_source, read_graph, to_dot
from ckptview.core.graph.blocks import architecture, blocks_json
from ckptview.core.graph.collapse import Hierarchy
from ckptview.core.graph.compare import ADDED, REMOVED, SHAPE, GraphComparison, compare_graphs
from ckptview.core.graph.overlay import CHANGE, colour_hex, format_number, pair_figures, scale_of
from ckptview.core.graph.user_code import code_graph
from ckptview.core.jobs import Progress, drain
from ckptview.core.run.input_specs import InputSpecError, parse_input_specs
from ckptview.core.run.process import RunError
from ckptview.core.text import printable
from ckptview.core.units import plural

SHOWN_OPS = 20  # ops listed by count in the summary
SHOWN_UNREAD = 20
SHOWN_CHANGES = 10  # nodes listed by relative change with --compare
OUTLINES = {ADDED: "#1a7f37", REMOVED: "#cf222e", SHAPE: "#bc4c00"}  # DOT outlines of a comparison's nodes


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `graph` subcommand."""
    p = sub.add_parser("graph", help="the model's graph: a .pt2's program, TorchScript's code, the architecture an "
                                     "installed library names (traced on meta), your model code's, or one inferred "
                                     "from key names and shapes")
    p.add_argument("path", help="checkpoint file or folder, or a URL (https://, hf://, s3://)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object (stable contract, docs/cli.md)")
    out.add_argument("--dot", action="store_true", help="print Graphviz DOT text (clusters by module path, edges "
                                                        "with shapes, nodes coloured by --compare's change)")
    p.add_argument("--model", metavar="SPEC", help="trace your model code: path/file.py:Class or package.module:factory "
                                                   "(run in the worker as `run --model` runs it; the checkpoint is "
                                                   "never loaded, its key names are placed on the graph)")
    p.add_argument("--model-kwargs", metavar="JSON", default="{}", help="keyword arguments for the --model factory")
    p.add_argument("--input-shape", metavar="S", help="inputs of --model, as `run` takes them (default: guessed "
                                                      "from the first layer)")
    p.add_argument("--compare", metavar="OTHER", help="a second checkpoint: nodes added, removed and changed in "
                                                      "shape, and each node's relative change ||B-A||/||A||")


def _model_args(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    try:
        kwargs = json.loads(args.model_kwargs or "{}")
    except ValueError as exc:
        raise RunError(f"--model-kwargs is not JSON: {exc}", kind="input") from None
    if not isinstance(kwargs, dict):
        raise RunError("--model-kwargs must be a JSON object", kind="input")
    try:
        inputs = parse_input_specs(args.input_shape, None, None) if args.input_shape else None
    except InputSpecError as exc:
        raise RunError(f"--input-shape: {exc}", kind="input") from None
    return kwargs, inputs


def _graph_of(checkpoint: Checkpoint, args: argparse.Namespace, tell: Callable[[Progress], None] | None) -> ModelGraph:
    if args.model:
        kwargs, inputs = _model_args(args)
        graph: ModelGraph = drain(code_graph(checkpoint, args.model, kwargs, inputs), tell)
        return graph
    return read_graph(checkpoint, on_progress=tell)


def run(args: argparse.Namespace) -> int:
    """Read the graph and print it; a bad file is one line on stderr and a non-zero status (cli.main)."""
    checkpoint = open_given(args.path, args.remote)
    other: Checkpoint | None = None
    comparison: GraphComparison | None = None
    try:
        kind, arch, _ = graph_source(checkpoint)
        tracing = bool(args.model) or arch is not None
        tell = _progress if sys.stderr.isatty() and tracing else None
        if tell is not None:  # a minute of silence otherwise; scripts (no terminal) get the output alone
            what = args.model or (arch.describe() if arch else kind)
            print(f"ckptview: tracing {printable(what)} in a worker ...", file=sys.stderr)
        graph = _graph_of(checkpoint, args, tell)
        path, stored = checkpoint.path, checkpoint.file_size
        shapes = {e.name: tuple(e.info.shape) for e in checkpoint.tensors()}
        if args.compare:
            other = open_given(args.compare, args.remote)
            graph_b = _graph_of(other, args, tell)
            pairs = pair_figures(diff_checkpoints(checkpoint, other).tensors)
            comparison = compare_graphs(graph, graph_b, shapes, {e.name: tuple(e.info.shape) for e in other.tensors()},
                                        pairs)
            graph = comparison.graph
    finally:
        checkpoint.close()
        if other is not None:
            other.close()
    if args.json:
        data = comparison.to_json() if comparison is not None else graph.to_json()
        data["blocks"] = _blocks(graph, stored, shapes)
        text = json.dumps(data)  # whole, then written: never half an object
        sys.stdout.write(text + "\n")
    elif args.dot:
        colours, outlines = _colours(comparison)
        sys.stdout.write(to_dot(graph, colours, Budget.for_stored(stored, "the graph's DOT text"), outlines))
    else:
        sys.stdout.write(summary(path, graph) + (_compared(args.compare, comparison) if comparison else ""))
    return 0


def _colours(comparison: GraphComparison | None) -> tuple[dict[str, str], dict[str, str]]:
    """Fills by relative change on the overlay's scale, outlines by status (added, removed, changed in shape)."""
    if comparison is None:
        return {}, {}
    scale = scale_of(CHANGE, comparison.change.values())
    fills = {node: colour_hex(scale.position(value) if value > 0 else 0.0) for node, value in comparison.change.items()
             if value is not None and scale is not None}
    outlines = {node: OUTLINES[status] for node, status in comparison.status.items() if status in OUTLINES}
    return fills, outlines


def _blocks(graph: ModelGraph, stored: int, shapes: dict[str, tuple[int, ...]]) -> list[dict[str, Any]]:
    """The architecture view's blocks in order, repeated ones folded (`core/graph/blocks`)."""
    numel = {name: _product(shape) for name, shape in shapes.items()}
    hierarchy = Hierarchy(graph, stored, numel)
    return blocks_json(hierarchy, architecture(hierarchy, shapes), numel)


def _product(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _progress(step: Progress) -> None:
    if step.message:
        print(f"ckptview: {printable(step.message)}", file=sys.stderr)


def summary(path: str, graph: ModelGraph) -> str:
    """The human summary: source, node count, ops by count, keys placed and unread, notes; all escaped."""
    ops = Counter(n.op for n in graph.nodes if n.op not in ("input", "output"))
    placed = graph.placed()
    lines = [printable(path),
             f"  graph from {printable(graph.source)}: {plural(len(graph.nodes), 'node')}, "
             f"{plural(sum(ops.values()), 'op')} of {plural(len(ops), 'kind')}, {plural(len(placed), 'key')} placed, "
             f"{len(graph.unread)} unread"]
    inputs = [n for n in graph.nodes if n.op == "input"]
    if inputs:
        lines.append("  inputs: " + ", ".join(printable(n.id) + _shape(n.shape, n.dtype) for n in inputs[:10])
                     + (" ..." if len(inputs) > 10 else ""))
    if ops:
        lines.append("  ops by count:")
        width = max(len(printable(op)) for op, _ in ops.most_common(SHOWN_OPS))
        lines += [f"    {printable(op):<{width}}  {count}" for op, count in ops.most_common(SHOWN_OPS)]
        if len(ops) > SHOWN_OPS:
            lines.append(f"    ... and {plural(len(ops) - SHOWN_OPS, 'other kind')}")
    if graph.unread:
        lines.append(f"  unread ({len(graph.unread)}, no node reads them): "
                     + ", ".join(map(printable, graph.unread[:SHOWN_UNREAD]))
                     + (" ..." if len(graph.unread) > SHOWN_UNREAD else ""))
    lines += [f"  note: {printable(cli_words(note))}" for note in graph.notes]
    return "\n".join(lines) + "\n"


def _compared(other: str, comparison: GraphComparison) -> str:
    counts = comparison.counts()
    lines = [f"  compared with {printable(other)}: {plural(counts['same'], 'node')} the same, {counts[SHAPE]:,} changed in "
             f"shape, {counts[REMOVED]:,} removed, {counts[ADDED]:,} added"]
    ranked = sorted(((v, n) for n, v in comparison.change.items() if v is not None), reverse=True)[:SHOWN_CHANGES]
    if ranked:
        lines.append("  largest relative change ||B-A||/||A||:")
        lines += [f"    {printable(node)}  {format_number(value)}" for value, node in ranked]
    return "\n".join(lines) + "\n"


def _shape(shape: Any, dtype: str | None) -> str:
    if shape is None:
        return ""
    return f" {printable(dtype or '?')}[{', '.join(printable(str(s)) for s in shape)}]"

"""`ckptview graph PATH [--json | --dot]`: the model's graph, read as data (nothing from the file runs)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from ckptview.commands.opening import open_given
from ckptview.core.graph import ModelGraph, graph_source, read_graph, to_dot
from ckptview.core.jobs import Progress
from ckptview.core.text import printable
from ckptview.core.units import plural

SHOWN_OPS = 20  # ops listed by count in the summary
SHOWN_UNREAD = 20


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `graph` subcommand."""
    p = sub.add_parser("graph", help="the model's graph: a .pt2's program, TorchScript's code, or the architecture "
                                     "an installed library names (traced on meta, nothing read but its config)")
    p.add_argument("path", help="checkpoint file or folder, or a URL (https://, hf://, s3://)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object (stable contract, docs/cli.md)")
    out.add_argument("--dot", action="store_true", help="print Graphviz DOT text (clusters by module path)")


def run(args: argparse.Namespace) -> int:
    """Read the graph and print it; a bad file is one line on stderr and a non-zero status (cli.main)."""
    checkpoint = open_given(args.path, args.remote)
    try:
        kind, arch, _ = graph_source(checkpoint)
        tell = sys.stderr.isatty() and arch is not None
        if tell:  # a minute of silence otherwise; scripts (no terminal) get the output alone
            print(f"ckptview: tracing {printable(arch.describe() if arch else kind)} in a worker "
                  "(kept in the cache after) ...", file=sys.stderr)
        graph = read_graph(checkpoint, on_progress=_progress if tell else None)
        path = checkpoint.path
    finally:
        checkpoint.close()
    if args.json:
        text = json.dumps(graph.to_json())  # whole, then written: never half an object
        sys.stdout.write(text + "\n")
    elif args.dot:
        sys.stdout.write(to_dot(graph))
    else:
        sys.stdout.write(summary(path, graph))
    return 0


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
    lines += [f"  note: {printable(note)}" for note in graph.notes]
    return "\n".join(lines) + "\n"


def _shape(shape: Any, dtype: str | None) -> str:
    if shape is None:
        return ""
    return f" {printable(dtype or '?')}[{', '.join(printable(str(s)) for s in shape)}]"

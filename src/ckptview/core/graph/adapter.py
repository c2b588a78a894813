"""What the window's Graph view asks of the core, as jobs a worker runs: the graph nested, a view laid out,
the figures of the tensors each box reads; and the words for where a graph came from.

The graph is the core's (`graph_job`: a `.pt2`'s program, TorchScript code, a library's architecture
traced in the run's worker, else the module tree), with its progress and its cancel: a cancelled token
raises `Cancelled` and kills the tracing worker. Figures come from the checkpoint's `Analysis`, the one
the panels read from, so a box's figure is the Statistics panel's figure of the same tensors.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.errors import CheckpointError
from ckptview.core.figures.analysis import Analysis
from ckptview.core.graph.blocks.folding import architecture
from ckptview.core.graph.build import graph_job
from ckptview.core.graph.cache import GraphCache
from ckptview.core.graph.collapse import ARCHITECTURE, Hierarchy, View
from ckptview.core.graph.compare import GraphComparison, compare_graphs
from ckptview.core.graph.exported import SOURCE as EXPORTED
from ckptview.core.graph.inferred import SOURCE as INFERRED
from ckptview.core.graph.layout import LayoutCache, Placed
from ckptview.core.graph.model import ModelGraph
from ckptview.core.graph.model_explorer import MAX_FILE, NodeData, NodeDataError, node_data, read_node_data
from ckptview.core.graph.module_tree import SOURCE as MODULE_TREE
from ckptview.core.graph.overlay import BoxFigure, Figure, KeyFigures, Scale, box_figures, combine, scale_of
from ckptview.core.graph.torchscript import SOURCE as TORCHSCRIPT
from ckptview.core.graph.user_code import SOURCE as MODEL_CODE
from ckptview.core.graph.user_code import code_graph
from ckptview.core.jobs import CancelToken, Progress, drain
from ckptview.core.read.bytes.files import open_regular
from ckptview.core.session.workspace import Holdings
from ckptview.core.units import plural

GraphJob = Callable[[Checkpoint | None, CancelToken | None], Generator[Progress, None, ModelGraph]]


def describe_source(graph: ModelGraph) -> str:
    """What the view says it shows: "exported program", "TorchScript code", "transformers
    LlamaForCausalLM on meta", or "module tree: <why there is no data flow>"."""
    source = graph.source
    if source == EXPORTED:
        return "exported program"
    if source == TORCHSCRIPT:
        return "TorchScript code"
    if source == MODULE_TREE:
        return f"module tree: {graph.notes[0]}" if graph.notes else "module tree"
    if source == INFERRED:
        guess = graph.notes[-1].partition("): ")[2] if graph.notes else ""
        return f"inferred from key names and shapes, not traced{': ' + guess if guess else ''}"
    library, sep, cls = source.partition(":")
    if sep and library == MODEL_CODE:
        return f"your model code {cls}, traced"
    if sep:
        return f"{library} {cls} on meta"
    return source


def hierarchy_job(checkpoint: Checkpoint | None, job: GraphJob | None = None, token: CancelToken | None = None,
                  cache: GraphCache | None = None) -> Generator[Progress, None, Hierarchy]:
    """The graph of `checkpoint` (the core's `graph_job`, traced graphs kept in `cache`; or `job`), nested by
    module path."""
    if job is not None:
        graph = yield from job(checkpoint, token)
    elif checkpoint is None:
        raise ValueError("no checkpoint to read a graph from")
    else:
        graph = yield from graph_job(checkpoint, token, cache)
    yield Progress(0, 0, f"nesting {plural(len(graph.nodes), 'node')} by module")
    shapes = {e.name: tuple(e.info.shape) for e in checkpoint.tensors()} if checkpoint is not None else {}
    hierarchy = Hierarchy(graph, checkpoint.file_size if checkpoint is not None else 0,
                          {name: _numel(shape) for name, shape in shapes.items()})
    yield Progress(0, 0, "finding the blocks and their repeats")
    hierarchy.folding = architecture(hierarchy, shapes)
    return hierarchy


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def code_graph_job(spec: str) -> GraphJob:
    """A graph job that traces your model code `spec` in the worker (`user_code.code_graph`: as `run --model`
    loads it, the checkpoint never loaded, its keys placed on the graph)."""

    def job(checkpoint: Checkpoint | None, token: CancelToken | None = None) -> Generator[Progress, None, ModelGraph]:
        if checkpoint is None:
            raise ValueError("no checkpoint to place the graph on")
        graph: ModelGraph = yield from code_graph(checkpoint, spec, token=token)
        return graph

    return job


def compared_graph_job(other: Checkpoint, found: dict[str, GraphComparison], cache: GraphCache | None = None
                       ) -> GraphJob:
    """A graph job for a comparison's A that reads B's graph too and gives the merged graph (B's added nodes
    after A's), its comparison kept in `found["comparison"]` for the view's marks."""

    def job(checkpoint: Checkpoint | None, token: CancelToken | None = None) -> Generator[Progress, None, ModelGraph]:
        if checkpoint is None:
            raise ValueError("no checkpoint to read a graph from")
        a = yield from graph_job(checkpoint, token, cache)
        yield Progress(0, 0, "reading the second checkpoint's graph")
        b = yield from graph_job(other, token, cache)
        found["comparison"] = compare_graphs(a, b, _shapes(checkpoint), _shapes(other))
        return found["comparison"].graph

    return job


def _shapes(checkpoint: Checkpoint) -> dict[str, tuple[int, ...]]:
    return {e.name: tuple(e.info.shape) for e in checkpoint.tensors()}


def held_graph_job(holdings: Holdings, path: str, cache: GraphCache | None = None) -> GraphJob:
    """A graph job for a checkpoint a view holds by path (a run's): leased in the worker, then `graph_job`
    (traced graphs kept in `cache`)."""

    def job(_checkpoint: Checkpoint | None, token: CancelToken | None = None) -> Generator[Progress, None, ModelGraph]:
        yield Progress(0, 0, "opening the checkpoint")
        lease = holdings.lease(path)  # the run's own hold (it lets it go with the tab)
        return (yield from graph_job(lease.checkpoint, token, cache))

    return job


@dataclass(frozen=True)
class Laid:
    """A layout job's result: the view of an expanded set, and its layout."""

    view: View
    placed: Placed


def layout_job(hierarchy: Hierarchy, expanded: frozenset[str], cache: LayoutCache, token: CancelToken | None = None,
               mode: str = ARCHITECTURE) -> Generator[Progress, None, Laid]:
    """The view of `expanded` in `mode` (the architecture view, or every op), laid out (or taken from `cache`)."""
    view = hierarchy.view(expanded, hierarchy.folding if mode == ARCHITECTURE else None)
    yield Progress(0, 1, f"laying out {len(view.items):,} boxes")
    return Laid(view, cache.layout(view, token=token))


@dataclass(frozen=True)
class Coloured:
    """An overlay job's result: each shown box's figure and the scale over them."""

    figure: Figure
    view: View
    boxes: list[BoxFigure]
    scale: Scale | None


def reads_of(hierarchy: Hierarchy, view: View) -> list[list[str]]:
    """The checkpoint keys each box of `view` reads (a module's: every node's inside it)."""
    return [hierarchy.keys_of(item) for item in view.items]


def key_figures(figure: Figure, keys: Sequence[str], checkpoint: Checkpoint, analysis: Analysis,
                known: dict[str, KeyFigures], token: CancelToken | None = None) -> Generator[Progress, None, None]:
    """Fill `known` with the figures of `keys` that `figure` needs (statistics, or spectra of matrices), from
    `analysis` (cached per tensor: read once, shared with the panels). A figure given by a comparison or a
    run ("pair") is never computed here."""
    if figure.needs == "pair":
        return
    token = token or CancelToken()
    todo = [k for k in dict.fromkeys(keys) if k not in known or (figure.needs == "spectrum"
                                                                  and known[k].alpha is None)]
    for i, key in enumerate(todo):
        token.check()
        yield Progress(i, len(todo), f"{figure.title}: {key}")
        try:
            info = checkpoint.tensor(key)
        except KeyError:
            continue
        try:
            stats = drain(analysis.stats([info], token))
            alpha = None
            if figure.needs == "spectrum" and len(info.shape) >= 2 and min(info.shape) > 1:
                spectrum = drain(analysis.spectrum(info, token))
                alpha = spectrum.fit.alpha if spectrum.fit is not None else None
        except CheckpointError:
            continue
        except (ValueError, TypeError):  # a dtype without figures (strings of bytes, complex spectra)
            continue
        abs_max = float(stats.abs_max) if stats.abs_max is not None else None
        known[key] = KeyFigures(l2=stats.l2 if stats.finite else None, abs_max=abs_max,
                                nonfinite=stats.nan + stats.posinf + stats.neginf, alpha=alpha)
    yield Progress(len(todo), len(todo), "")


def colour_job(figure: Figure, hierarchy: Hierarchy, view: View, checkpoint: Checkpoint | None,
               analysis: Analysis | None, known: dict[str, KeyFigures], token: CancelToken | None = None
               ) -> Generator[Progress, None, Coloured]:
    """Each box of `view` coloured by `figure`: the figures it needs read into `known` first (none for a
    figure given whole, or without a checkpoint to read them from)."""
    reads = reads_of(hierarchy, view)
    if checkpoint is not None and analysis is not None:
        yield from key_figures(figure, [k for keys in reads for k in keys], checkpoint, analysis, known, token)
    boxes = box_figures(figure, reads, known)
    return Coloured(figure, view, boxes, scale_of(figure, [b.value for b in boxes]))


def node_values(figure: Figure, hierarchy: Hierarchy, known: dict[str, KeyFigures]) -> dict[str, float | None]:
    """Each node's figure (a node reading no tensor has none): what Model Explorer's node data holds."""
    return {node.id: combine(figure, [known[k] for k in node.params if k in known]).value
            for node in hierarchy.graph.nodes if node.params}


def save_node_data_job(path: str, figure: Figure, hierarchy: Hierarchy, checkpoint: Checkpoint | None,
                       analysis: Analysis | None, known: dict[str, KeyFigures], token: CancelToken | None = None
                       ) -> Generator[Progress, None, int]:
    """Write every node's `figure` to `path` as Model Explorer node data (the figures it needs read first);
    returns how many nodes have a value. Written whole (a temporary file renamed), never half."""
    if checkpoint is not None and analysis is not None:
        keys = [k for node in hierarchy.graph.nodes for k in node.params]
        yield from key_figures(figure, keys, checkpoint, analysis, known, token)
    values = node_values(figure, hierarchy, known)
    text = json.dumps(node_data(values, scale_of(figure, values.values())))
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".ckptview-", suffix=".json", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return sum(1 for v in values.values() if v is not None)


def read_node_data_job(path: str, hierarchy: Hierarchy, token: CancelToken | None = None
                       ) -> Generator[Progress, None, NodeData]:
    """Model Explorer node data read from `path` for the nodes of `hierarchy` (NodeDataError when it is not)."""
    yield Progress(0, 0, f"reading {os.path.basename(path)}")
    with open_regular(path) as handle:  # a FIFO or a device is refused, never waited on
        text = handle.read(MAX_FILE + 1)
    if token is not None:
        token.check()
    if len(text) > MAX_FILE:
        raise NodeDataError(f"{os.path.basename(path)} is larger than the {MAX_FILE:,} bytes node data may be")
    return read_node_data(text, set(hierarchy.by_id))

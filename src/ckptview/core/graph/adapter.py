"""What the window's Graph view asks of the core, as jobs a worker runs: the graph nested, a view laid out,
the figures of the tensors each box reads; and the words for where a graph came from.

The graph is the core's (`graph_job`: a `.pt2`'s program, TorchScript code, a library's architecture
traced in the run's worker, else the module tree), with its progress and its cancel: a cancelled token
raises `Cancelled` and kills the tracing worker. Figures come from the checkpoint's `Analysis`, the one
the panels read from, so a box's figure is the Statistics panel's figure of the same tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.errors import CheckpointError
from ckptview.core.figures.analysis import Analysis
from ckptview.core.graph.build import graph_job
from ckptview.core.graph.cache import GraphCache
from ckptview.core.graph.collapse import GROUP, Hierarchy, View
from ckptview.core.graph.exported import SOURCE as EXPORTED
from ckptview.core.graph.layout import LayoutCache, Placed
from ckptview.core.graph.model import ModelGraph
from ckptview.core.graph.module_tree import SOURCE as MODULE_TREE
from ckptview.core.graph.overlay import BoxFigure, Figure, KeyFigures, Scale, box_figures, scale_of
from ckptview.core.graph.torchscript import SOURCE as TORCHSCRIPT
from ckptview.core.jobs import CancelToken, Progress, drain
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
    library, sep, cls = source.partition(":")
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
    return Hierarchy(graph)


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


def layout_job(hierarchy: Hierarchy, expanded: frozenset[str], cache: LayoutCache, token: CancelToken | None = None
               ) -> Generator[Progress, None, Laid]:
    """The view of `expanded`, laid out (or taken from `cache`)."""
    view = hierarchy.view(expanded)
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
    return [hierarchy.params_below(item.path) if item.kind == GROUP else list(hierarchy.node(item.node).params)
            for item in view.items]


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

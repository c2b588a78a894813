"""The one way to a checkpoint's graph: the program its file holds, else the architecture an installed library
names, else a graph inferred from its key names and shapes, else its module tree (see `docs/guide/graph.md`
for what each shows and what is never run)."""

from __future__ import annotations

from collections.abc import Callable, Generator

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.graph.cache import GraphCache
from ckptview.core.graph.exported import exported_graph
from ckptview.core.graph.inferred import SOURCE as INFERRED
from ckptview.core.graph.inferred import inferred_graph
from ckptview.core.graph.library import library_graph
from ckptview.core.graph.model import ModelGraph
from ckptview.core.graph.module_tree import SOURCE as MODULE_TREE
from ckptview.core.graph.module_tree import is_pickled_model, module_tree_graph
from ckptview.core.graph.torchscript import torchscript_graph
from ckptview.core.jobs import CancelToken, Progress, drain
from ckptview.core.message import message_of
from ckptview.core.read.bytes.location import locate
from ckptview.core.run.architectures import Architecture, ArchitectureRefused, missing_library, recognize
from ckptview.core.run.process import RunError
from ckptview.core.run.state_dict import find_state_dict

NO_GRAPH = "a state dict holds no graph, and no installed library names this architecture"
PROGRAMS = {"torch-export": "exported-program", "torchscript": "torchscript"}


def graph_source(checkpoint: Checkpoint) -> tuple[str, Architecture | None, str]:
    """(where the graph will come from, the library's architecture or None, why there is no data flow or "").

    Cheap (no worker, no code walked): "exported-program", "torchscript", "library" (a worker traces it,
    unless cached), "module-tree" (a full-model pickle: its modules by their classes) or "inferred" (from key
    names and shapes; the module tree where nothing looks like a layer). Reads the config.json beside a local checkpoint, as data."""
    program = PROGRAMS.get(checkpoint.format)
    if program is not None:
        return program, None, ""
    if locate(checkpoint.path).is_remote:
        return INFERRED, None, (f"{NO_GRAPH} here: the architecture of a remote checkpoint is not looked "
                                "up (its config.json is not read); download it to draw its library's graph")
    _, tensors = find_state_dict(checkpoint)
    try:
        arch = recognize(checkpoint.path, tensors) if tensors else None
    except ArchitectureRefused as exc:
        return INFERRED, None, message_of(exc)
    if arch is None:
        if is_pickled_model(checkpoint):  # a module, not a state dict: its classes say more than its keys
            return MODULE_TREE, None, ("a full-model pickle's forward is code in the file, never run, and no "
                                       "installed library names this architecture: its modules are drawn with "
                                       "their classes, without data flow")
        return INFERRED, None, NO_GRAPH
    missing = missing_library(arch)
    if missing is not None:
        return INFERRED, None, missing
    return "library", arch, ""


def graph_job(checkpoint: Checkpoint, token: CancelToken | None = None, cache: GraphCache | None = None
              ) -> Generator[Progress, None, ModelGraph]:
    """The graph of an opened checkpoint, as a job: yields progress, checks `token` (Cancelled), returns it.

    Slow for a library's architecture (a worker process traces it, seconds to minutes; cached after) and for
    large programs; run it off the GUI thread. `cache`: where traced graphs are kept (default: the user's)."""
    kind, arch, why = graph_source(checkpoint)
    if kind == "exported-program":
        return (yield from exported_graph(checkpoint, token))
    if kind == "torchscript":
        return (yield from torchscript_graph(checkpoint, token))
    if kind == MODULE_TREE:
        return module_tree_graph(checkpoint, why)
    if arch is not None:
        try:
            return (yield from library_graph(checkpoint, arch, token, cache))
        except RunError as exc:  # the class refuses its config, export and fx fail, the worker died
            why = f"{arch.describe()}: no graph could be traced ({exc})"
    return inferred_graph(checkpoint, why) or module_tree_graph(checkpoint, f"{why}: its modules are drawn "
                                                                           "without data flow")


def read_graph(checkpoint: Checkpoint, token: CancelToken | None = None,
               on_progress: Callable[[Progress], None] | None = None, cache: GraphCache | None = None) -> ModelGraph:
    """`graph_job` run to its end (the command line's form; `on_progress` gets each step)."""
    return drain(graph_job(checkpoint, token, cache), on_progress)

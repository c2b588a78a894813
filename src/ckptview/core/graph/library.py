"""The graph of the architecture an installed library names: traced in the worker, cached, placed on the keys.

The parent reads nothing of the file but what the run reads to recognise the architecture (`config.json`
beside it, as data; the checkpoint's key names and shapes, from the safe reader). The worker gets the
architecture and the shapes of the inputs a forward pass would feed, never the file's path: it builds the
class on `meta` and traces it (`core/worker/graph.py`). The traced graph names the model's own
`state_dict()` keys; placing it on a checkpoint maps those to the checkpoint's names (wrapper prefixes
peeled as a run's loader peels them, tied weights found by identity), and the checkpoint's keys no node
reads are listed as unread. The traced graph is cached (`cache.py`) by what was traced.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.errors import Cancelled
from ckptview.core.graph.cache import GraphCache, trace_key
from ckptview.core.graph.exported import clean_path
from ckptview.core.graph.model import GraphDataError, GraphNode, ModelGraph
from ckptview.core.graph.placing import unread_keys
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.run.architectures import Architecture
from ckptview.core.run.process import RunError, execute
from ckptview.core.run.state_dict import state_dict_entries, strip_prefixes
from ckptview.core.units import plural

TIMEOUT = 900.0  # seconds a worker may take to build and trace (a 70B-parameter program takes minutes)
_MAX_KEYS = 10_000_000
_FLOATS = ("float32", "float16", "bfloat16", "float64")


@dataclass
class Traced:
    """What the worker traced: the graph over the model's own state-dict names, those names, the tied groups."""

    graph: ModelGraph
    model_keys: list[str] = field(default_factory=list)
    aliases: list[list[str]] = field(default_factory=list)
    tracer: str = "torch.export"
    key_map: dict[str, str] = field(default_factory=dict)  # checkpoint key -> model key the library converts it to

    def to_json(self) -> dict[str, Any]:
        """The form the worker sends and the cache keeps (its key map apart: it depends on the checkpoint)."""
        return {"graph": self.graph.to_json(), "model_keys": list(self.model_keys),
                "aliases": [list(g) for g in self.aliases], "tracer": self.tracer}

    @classmethod
    def from_json(cls, data: Any) -> Traced:
        """Read back what the worker sent or the cache kept; GraphDataError when it is not that."""
        if not isinstance(data, Mapping):
            raise GraphDataError("traced graph: expected an object")
        keys = data.get("model_keys")
        aliases = data.get("aliases", [])
        tracer = data.get("tracer", "torch.export")
        if not isinstance(keys, list) or len(keys) > _MAX_KEYS or not all(isinstance(k, str) for k in keys):
            raise GraphDataError("traced graph: model_keys is not a list of names")
        if not isinstance(aliases, list) or not all(
                isinstance(g, list) and all(isinstance(k, str) for k in g) for g in aliases):
            raise GraphDataError("traced graph: aliases is not a list of groups of names")
        if not isinstance(tracer, str):
            raise GraphDataError("traced graph: tracer is not a name")
        return cls(ModelGraph.from_json(data.get("graph"), "traced graph"), keys, aliases, tracer[:40],
                   key_map_from_json(data.get("key_map", {})))


def key_map_from_json(data: Any) -> dict[str, str]:
    """A key map the worker sent or the cache kept; GraphDataError when it is not one."""
    if not isinstance(data, Mapping) or len(data) > _MAX_KEYS or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise GraphDataError("traced graph: key_map is not an object of names")
    return dict(data)


def float_dtype(checkpoint: Checkpoint) -> str | None:
    """The floating-point dtype holding most of the checkpoint's bytes: the model is traced in it, as a run
    builds it (`from_pretrained(dtype="auto")`)."""
    totals: dict[str, int] = {}
    for entry in checkpoint.tensors():
        if entry.info.dtype in _FLOATS:
            totals[entry.info.dtype] = totals.get(entry.info.dtype, 0) + entry.info.nbytes
    return max(totals, key=lambda d: totals[d]) if totals else None


def trace_request(arch: Architecture, dtype: str | None) -> dict[str, Any]:
    """The worker's `graph` request: the architecture and its preprocessor config only (no path: nothing to
    read); the worker feeds the inputs the built model declares, as a run does."""
    return {"op": "graph", "architecture": {"library": arch.library, "class": arch.cls, "source": arch.source,
                                            "config": arch.config},
            "preprocessor": arch.preprocessor, "dtype": dtype, **arch.expect()}


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def request_key(request: dict[str, Any]) -> str:
    """The cache key of a trace request: what it traces, the library's and torch's versions. Neither the
    checkpoint's key names nor the listing the build is held against (`expect`) are part of it: a graph traced
    once serves every checkpoint of that architecture, and one refused is never kept."""
    library = str(request["architecture"]["library"])
    traced = {k: v for k, v in request.items() if k not in ("keys", "expect")}
    return trace_key({"request": traced, "library": _version(library), "torch": _version("torch")})


def map_key(request: dict[str, Any], keys: list[str]) -> str:
    """The cache key of the key map of `keys` for the architecture of `request`."""
    return trace_key({"keys of": request_key(request), "keys": keys})


def traced_architecture(request: dict[str, Any], token: CancelToken | None = None, cache: GraphCache | None = None,
                        timeout: float = TIMEOUT) -> Generator[Progress, None, Traced]:
    """The traced graph of a request: from the cache, else from a worker (then kept in the cache). `cache`:
    the caller's (the window keeps one); without, the user's cache file is opened for this call only.

    A request naming the checkpoint's `keys` gets their key map too (which the library's loading converts):
    from the cache, else from the worker that traces, else from a worker that only builds the model."""
    if cache is None:
        own = GraphCache()
        try:
            return (yield from traced_architecture(request, token, own, timeout))
        finally:
            own.close()
    key = request_key(request)
    keys = list(request.get("keys") or [])
    traced: Traced | None = _kept(cache, key, Traced.from_json)
    if traced is None:
        yield Progress(0, 0, "starting the worker to trace the architecture")
        fresh: Traced = _checked(Traced.from_json, (yield from _execute(request, timeout, token)))
        traced = fresh
        cache.put(key, traced.to_json())
        if keys:
            cache.put(map_key(request, keys), traced.key_map)
        return traced
    if keys and request["architecture"].get("library") == "transformers" and _unmatched(keys, traced):
        kept = _kept(cache, map_key(request, keys), key_map_from_json)
        if kept is None:
            yield Progress(0, 0, "starting the worker to read how the library converts the checkpoint's keys")
            answer = yield from _execute({**request, "op": "keys"}, timeout, token)
            kept = _checked(lambda data: key_map_from_json(data.get("key_map", {})), answer)
            cache.put(map_key(request, keys), kept)
        traced.key_map = kept
    return traced


def _kept(cache: GraphCache, key: str, read: Any) -> Any:
    kept = cache.get(key)
    if kept is None:
        return None
    try:
        return read(kept)
    except (GraphDataError, AttributeError):
        cache.drop(key)
        return None


def _execute(request: dict[str, Any], timeout: float, token: CancelToken | None) -> Generator[Progress, None, Any]:
    try:
        return (yield from execute(request, timeout, token))
    except RunError as exc:
        if exc.kind == "cancelled":
            raise Cancelled(str(exc)) from None
        raise


def _checked(read: Any, payload: Any) -> Any:
    try:
        return read(payload)
    except (GraphDataError, AttributeError) as exc:
        raise RunError(f"the worker sent a malformed graph: {exc}", kind="protocol") from None


def _unmatched(keys: list[str], traced: Traced) -> bool:
    """Whether the model reads a tensor the checkpoint's keys do not name, even with wrapper prefixes peeled and
    tied weights found (a checkpoint in the Hub's layout; an extra key of the checkpoint needs no conversion)."""
    mapping, _ = strip_prefixes(keys, traced.model_keys)
    model_set = set(traced.model_keys)
    covered = set(mapping.values()) & model_set
    for group in traced.aliases:
        if covered.intersection(group):
            covered.update(group)
    return bool(model_set - covered)


def library_graph(checkpoint: Checkpoint, arch: Architecture, token: CancelToken | None = None,
                  cache: GraphCache | None = None) -> Generator[Progress, None, ModelGraph]:
    """The graph of `arch` placed on an opened checkpoint's keys (a worker traces it unless it is cached)."""
    _, entries = state_dict_entries(checkpoint)
    request = {**trace_request(arch, float_dtype(checkpoint)), "keys": list(entries)}
    traced = yield from traced_architecture(request, token, cache)
    return place(traced, checkpoint, f"{arch.library}:{arch.cls}")


def place(traced: Traced, checkpoint: Checkpoint, source: str) -> ModelGraph:
    """The traced graph with every node reading the checkpoint's names for its tensors."""
    _, entries = state_dict_entries(checkpoint)
    model_set = set(traced.model_keys)
    mapping, stripped = strip_prefixes(entries, traced.model_keys)
    by_model: dict[str, list[str]] = {}  # model key -> the checkpoint's names for it (experts merged: several)
    converted = 0
    for ckpt_key, model_key in mapping.items():
        if model_key not in model_set and ckpt_key in traced.key_map:  # the library's own conversion
            model_key = traced.key_map[ckpt_key]
            converted += 1
        if model_key in model_set:
            by_model.setdefault(model_key, []).append(entries[ckpt_key].name)
    twins = {name: group for group in traced.aliases for name in group}
    missing: set[str] = set()
    nodes = []
    for node in traced.graph.nodes:
        module = clean_path(node.module)
        params: list[str] = []
        for key in node.params:
            hit = next((by_model[k] for k in _preferred(twins.get(key, [key]), key, module) if k in by_model), None)
            if hit is not None:
                params.extend(hit)
            elif key in model_set:
                missing.add(key)
        nodes.append(GraphNode(node.id, node.op, module, node.inputs, tuple(dict.fromkeys(params)), node.shape,
                               node.dtype))
    graph = ModelGraph(source, nodes, classes={clean_path(k): v for k, v in traced.graph.classes.items()})
    graph.unread = unread_keys(graph, (e.name for e in entries.values()))
    if traced.tracer != "torch.export":
        graph.notes.append(f"traced by {traced.tracer} (torch.export could not trace it): nodes are module and "
                           "function calls, without shapes")
    if stripped:
        graph.notes.append(f"the checkpoint's keys carry the prefix {''.join(stripped)!r}, which the model's do not")
    if converted:
        graph.notes.append(f"{converted} of the checkpoint's keys are in the Hub's layout, placed as the library's "
                           "loading converts them")
    if missing:
        shown = ", ".join(sorted(missing)[:5]) + (" ..." if len(missing) > 5 else "")
        verb = "is" if len(missing) == 1 else "are"
        graph.notes.append(f"{plural(len(missing), 'tensor')} the model reads {verb} not in the checkpoint: {shown}")
    return graph


def _preferred(group: list[str], key: str, module: str) -> list[str]:
    """A tied group's names, the one in the node's module first (an LM head reads `lm_head.weight`), then the
    one the program named."""
    return sorted(group, key=lambda k: (not (module and k.startswith(module + ".")), k != key))

"""`ckptview info PATH [--json] [--stats] [--spectral]`: list everything inside a checkpoint."""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import math
import shutil
import sys
import tempfile
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from json.encoder import encode_basestring_ascii  # the C encoder's quoting
from typing import TYPE_CHECKING, Any

from ckptview.commands import cluster_options, keep_until_exit
from ckptview.commands.failures import CommandFailure
from ckptview.commands.opening import open_given
from ckptview.commands.wording import cli_words
from ckptview.core import dtypes, figures, inspect, sweep  # the last three: names loaded on first use
from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Node, Sharing, TensorEntry, TensorInfo
from ckptview.core.errors import TensorDataError
from ckptview.core.figures.stats import TensorStats, tensor_stats
from ckptview.core.gc_policy import paused_gc
from ckptview.core.inspect.summary import size_facts
from ckptview.core.jobs import drain
from ckptview.core.message import rephrased
from ckptview.core.read.bytes.files import ReadAhead, read_ahead
from ckptview.core.read.pickle.to_tree import release_tree, short_repr
from ckptview.core.read.values.repeats import format_factor, repeats
from ckptview.core.text import printable
from ckptview.core.units import MISSING, figure_or_text, human_bytes, human_count, plural, shape_str

if TYPE_CHECKING:
    from ckptview.core.inspect.hf_order import ParamOrders
    from ckptview.core.inspect.query import Query

TensorOrder = Callable[[TensorEntry], Any]  # the sort key of the tensors' listing (a `sort:` filter term)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `info` subcommand."""
    p = sub.add_parser("info", help="list everything inside a checkpoint")
    p.add_argument("path", help="checkpoint file or folder, or a URL (https://, hf://, s3://)")
    p.add_argument("--json", action="store_true", help="print one JSON object (stable contract)")
    p.add_argument("--stats", action="store_true", help="add per-tensor statistics (reads the values)")
    p.add_argument("--filter", metavar="EXPR",
                   help="list only the entries the window's filter would show: words that must all match, "
                        "e.g. 'attn bf16 >10MB', '*.q_proj.weight', '/layers\\.1\\d\\./', '768x3072', figures of "
                        "the values 'nan>0', 'norm>10', 'alpha<2', and 'sort:-norm' to list the largest first")
    p.add_argument("--spectral", action="store_true",
                   help="add the weight spectrum of every 2-D weight and conv kernel (alpha, norms, ranks)")
    p.add_argument("--expand-repeats", action="store_true",
                   help="with --spectral: also the spectra of tensors that repeat their storage (stride 0, "
                        "overlapping strides), computed on every element they declare (refused without it)")
    cluster_options.add_arguments(p, "with --stats or --spectral: read the values")


def info_dict(ckpt: Checkpoint, *, stats: bool = False, spectral: bool = False,
              only: set[str] | None = None, expand_repeats: bool = False,
              order: TensorOrder | None = None, orders: ParamOrders | None = None,
              given: sweep.ListingFigures | None = None) -> dict[str, Any]:
    """The `info --json` object of the command-line contract (`only`: the names a filter kept;
    `expand_repeats`: spectra of views that repeat their storage too, on every element they declare;
    `order`: the sort key of the tensors a `sort:` term asks for; `orders`: the parameter orders learned
    before, which name a Trainer folder's optimizer state; `given`: figures computed beforehand, on workers,
    by position in `ckpt.tensors()`)."""
    with paused_gc():
        return {key: list(value) if isinstance(value, Iterator) else value
                for key, value in info_items(ckpt, stats=stats, spectral=spectral, only=only,
                                             expand_repeats=expand_repeats, order=order, orders=orders,
                                             given=given)}


class JsonTexts:
    """A list written element by element from JSON texts already encoded (see `write_json_stream`)."""

    def __init__(self, texts: Iterator[str]) -> None:
        self.texts = texts


def info_items(ckpt: Checkpoint, *, stats: bool = False, encoded: bool = False, spectral: bool = False,
               only: set[str] | None = None, expand_repeats: bool = False,
               order: TensorOrder | None = None, orders: ParamOrders | None = None,
               given: sweep.ListingFigures | None = None) -> Iterator[tuple[str, Any]]:
    """The contract's (key, value) pairs in order; `tensors` and `values` come as iterators, so a
    writer can stream a million entries without holding them all (see `write_json_stream`).

    `encoded`: the tensors come as `JsonTexts`, the very text `json.dumps` writes for each row.
    `given`: statistics and spectra computed beforehand (on workers), used in place of reading here.
    """
    spectra = _by_info(ckpt, given.spectra) if given is not None else None
    memo = _StatsMemo(_by_info(ckpt, given.stats) if given is not None else None) if stats else None
    yield "path", ckpt.path
    yield "format", ckpt.format
    yield "file_size", ckpt.file_size
    yield "tensors", (JsonTexts(_tensor_texts(ckpt, memo, spectral, expand_repeats, spectra))
                      if encoded and only is None and order is None
                      else _tensor_items(ckpt, memo, spectral, only, expand_repeats, order, spectra))
    yield "values", ({"name": name, "path": list(path), "type": node.type_name, "repr": short_repr(node.value)}
                     for name, path, node in ckpt.value_entries() if only is None or name in only)
    yield "globals", list(ckpt.globals)
    yield "unsafe_globals", list(ckpt.unsafe_globals)
    if "pickles" in ckpt.metadata:  # pickle streams: how many pickles were read (all of them)
        yield "pickles", ckpt.metadata["pickles"]
    if ckpt.metadata.get("native_code"):  # compiled libraries (.pt2 AOTInductor): code torch would load
        yield "native_code", list(ckpt.metadata["native_code"])
    yield "parameters", size_facts(ckpt).parameters  # as sum(p.numel() for p in model.parameters()) counts
    if memo is not None:  # each module's figures over its floating-point tensors, the counters apart
        yield "modules", _module_items(ckpt, memo, only)
    yield "warnings", [cli_words(w) for w in ckpt.warnings]  # after the tensors: reading statistics may add some
    yield "optimizers", _optimizers(ckpt, orders)  # metadata only (reads nothing but 0-d step tensors)
    if (transfer := ckpt.metadata.get("_transfer")) is not None:  # a URL: what the network cost, last
        yield "transfer", transfer.as_dict()


def _by_info(ckpt: Checkpoint, found: dict[int, Any]) -> dict[int, Any]:
    """Figures by position in `ckpt.tensors()` as figures by `id(info)`, as the listing looks them up."""
    entries = ckpt.tensors()
    return {id(entries[i].info): value for i, value in found.items()}


class _StatsMemo:
    """The statistics of each tensor as the listing computes them (its ``"stats"`` rows), kept so that the
    modules' figures merge them instead of reading the values again; `given`: statistics (or the one-line
    error of a tensor whose values cannot be read) computed beforehand by workers, by `id(info)`."""

    def __init__(self, given: dict[int, TensorStats | str] | None = None) -> None:
        self.done: dict[int, TensorStats] = {}
        self.given = given

    def __call__(self, info: TensorInfo, ahead: ReadAhead | None = None) -> dict[str, Any]:
        found = self.given.get(id(info)) if self.given is not None else None
        if isinstance(found, str):
            raise TensorDataError(found)
        if found is None:
            found = tensor_stats(info, ahead=ahead)
        self.done[id(info)] = found
        return found.to_json()

    def get(self, info: TensorInfo) -> TensorStats | None:
        """The tensor's statistics (computed now if the listing did not), None when its values are unreadable."""
        found = self.done.get(id(info))
        if found is None and not info.broken and info.storage is not None:
            try:
                self(info)
            except TensorDataError:
                return None
            found = self.done.get(id(info))
        return found


def _module_items(ckpt: Checkpoint, memo: _StatsMemo, only: set[str] | None) -> Iterator[dict[str, Any]]:
    """The ``"modules"`` rows: path, tensors the figures are over, their merged figures, the counters apart."""
    kept = None if only is None else {id(e.info) for e in ckpt.tensors() if e.name in only}
    keep = None if kept is None else (lambda info: id(info) in kept)
    for module in inspect.module_figures(inspect.group_tree(ckpt.root), memo.get, keep):
        counters = module.counter_stats
        yield {"path": module.path, "tensors": module.tensors,
               "stats": module.stats.to_json() if module.stats is not None else None,
               "counters": {"tensors": module.counters, "stats": counters.to_json() if counters is not None else None}
               if module.counters else None}


def _tensor_items(ckpt: Checkpoint, stats_for: _StatsMemo | None, spectral: bool = False,
                  only: set[str] | None = None, expand_repeats: bool = False,
                  order: TensorOrder | None = None, spectra: dict[int, Any] | None = None) -> Iterator[dict[str, Any]]:
    sharing = _listed_sharing(ckpt)
    optimizer_state = _optimizer_state_paths(ckpt) if spectral else ()
    listed = ckpt.tensors(with_parts=True)  # a quantized weight's parts: rows of their own, each `part_of` it
    entries: Iterable[TensorEntry] = listed if order is None else sorted(listed, key=order)
    for entry in entries:
        if only is not None and entry.name not in only:
            continue
        weight = spectral and not _in_paths(entry, optimizer_state)
        yield _with_spectral(ckpt, entry, _tensor_item(ckpt, entry, sharing, stats_for), weight, expand_repeats,
                             spectra)


def _in_paths(entry: TensorEntry, paths: tuple[tuple[Any, ...], ...]) -> bool:
    return any(entry.path[:len(p)] == p for p in paths)


def _has_spectrum(info: TensorInfo) -> bool:
    """Whether a weight's row gets a `"spectral"` object (a matrix with values; see `_with_spectral`)."""
    return figures.matrix_of(info) is not None and info.storage is not None


def _has_stats(info: TensorInfo) -> bool:
    """Whether a row's `"stats"` are computed (see `_tensor_item`)."""
    return not info.broken and info.storage is not None


def listing_work(ckpt: Checkpoint, stats: bool, spectral: bool,
                 only: set[str] | None = None) -> tuple[list[int], list[int]]:
    """The positions in `ckpt.tensors()` of the tensors whose statistics, and of the weights whose spectra,
    the listing shows: the work a fan-out does in its place."""
    optimizer_state = _optimizer_state_paths(ckpt) if spectral else ()
    stats_of, spectra_of = [], []
    for i, entry in enumerate(ckpt.tensors()):
        if only is not None and entry.name not in only:
            continue
        if stats and _has_stats(entry.info):
            stats_of.append(i)
        if spectral and not _in_paths(entry, optimizer_state) and _has_spectrum(entry.info):
            spectra_of.append(i)
    return stats_of, spectra_of


def _optimizer_state_paths(ckpt: Checkpoint) -> tuple[tuple[Any, ...], ...]:
    """Where optimizer state sits: its moments have a weight's shape but no spectrum worth judging."""
    if not _has_key(ckpt.root, "param_groups"):
        return ()
    return tuple((*opt.path, "state") for opt in inspect.find_optimizers(ckpt))


def _with_spectral(ckpt: Checkpoint, entry: TensorEntry, item: dict[str, Any], spectral: bool,
                   expand_repeats: bool = False, given: dict[int, Any] | None = None) -> dict[str, Any]:
    """The row with its `"spectral"` object when asked for and the tensor is a weight matrix (else no key).

    A view that repeats its storage gets none unless `expand_repeats`: one warning line says its expanded
    size and how to ask for it. `given`: spectra (or one-line errors) computed beforehand, by `id(info)`."""
    if not spectral or not _has_spectrum(entry.info):
        return item
    try:
        found = given.get(id(entry.info)) if given is not None else None
        if isinstance(found, str):
            raise TensorDataError(found)
        if found is None:
            found = figures.spectrum(entry.info, expand=expand_repeats)
        item["spectral"] = found.to_json()
    except TensorDataError as exc:  # unreadable values or NaN: the listing still completes, without the key
        ckpt.warnings.append(rephrased(exc, lambda said: f"tensor '{entry.name}': {said}"))
    return item


def _listed_sharing(ckpt: Checkpoint) -> Sharing:
    """The checkpoint's sharing, once the pairs a listing names are paid for by the file's bytes: 30,000 views of
    one storage in a 1.5 MB file would list 900 million names (refused in one line)."""
    sharing = ckpt.sharing()
    Budget.for_stored(ckpt.file_size, "the listing").charge(sharing.pairs, "names of tensors sharing a storage")
    return sharing


def _tensor_item(ckpt: Checkpoint, entry: TensorEntry, sharing: Mapping[str, list[str]],
                 stats_for: Any) -> dict[str, Any]:
    """One row of the tensors section (`"repeats"`: a view that repeats its storage, what it stores)."""
    info = entry.info
    item: dict[str, Any] = {
        "name": entry.name,
        "path": list(entry.path),
        "shape": list(info.shape),
        "dtype": info.dtype,
        "nbytes": info.nbytes,
        "device": info.device,
        "shares_storage_with": sharing.get(entry.name, []),
    }
    if info.broken:
        item["broken"] = info.broken
    if (found := repeats(info)) is not None:  # stride 0, overlapping strides: its figures are of what it stores
        item["repeats"] = found.to_json()
    if info.layout != "strided":  # a sparse tensor is one row: its layout and stored values count
        item["layout"] = info.layout
        item["nnz"] = info.extra.get("nnz")
    if "shards" in info.extra:
        item["shards"] = info.extra["shards"]
    if "global_shape" in info.extra:  # a DTensor: the file holds this rank's local shard
        item["global_shape"] = info.extra["global_shape"]
        item["subclass"] = info.extra.get("subclass")
    if info.quant is not None:  # the logical tensor of a quantized weight: shape, dtype, stats are the real ones
        item["quantization"] = info.quant.to_json()
    if info.part_of is not None:  # a stored part of one
        item["part_of"] = info.part_of
    if stats_for is not None:
        item["stats"] = None
        if _has_stats(info):
            try:
                item["stats"] = stats_for(info)
            except TensorDataError as exc:  # unreadable values: the listing still completes
                ckpt.warnings.append(rephrased(exc, lambda said: f"tensor '{entry.name}': {said}"))
    return item


def _tensor_texts(ckpt: Checkpoint, stats_for: _StatsMemo | None, spectral: bool = False,
                  expand_repeats: bool = False, spectra: dict[int, Any] | None = None) -> Iterator[str]:
    """The rows of `_tensor_items` as the text `json.dumps` writes for each, a row at a time.

    A plain row (no statistics, not broken, strided, one file) is formatted directly: a third of the
    encoder's time for a listing of 100,000 tensors. Shapes and strings repeat, so their texts are
    kept; anything unusual (a non-int dimension, a key that is neither str nor int) goes through
    the encoder, which stays the definition of the output.
    """
    sharing = _listed_sharing(ckpt)
    if spectral:  # the rows of `_tensor_items`, which knows which tensors are weights
        yield from (_dumps(item) for item in _tensor_items(ckpt, stats_for, spectral, expand_repeats=expand_repeats,
                                                           spectra=spectra))
        return
    if stats_for is not None:  # small tensors' bytes come from windows of the file (`read_ahead`)
        def rows(ahead: ReadAhead) -> Generator[str, None, None]:
            with_ahead = functools.partial(stats_for, ahead=ahead)
            for entry in ckpt.tensors(with_parts=True):
                yield _dumps(_tensor_item(ckpt, entry, sharing, with_ahead))

        yield from read_ahead(rows)
        return
    quote = encode_basestring_ascii
    # id(shape) -> (the shape, kept alive so the id stays its own; its text or None; numel; C-order strides)
    shapes: dict[int, tuple[tuple[int, ...], str | None, int, tuple[int, ...] | None]] = {}
    # (id(shape), dtype, device) -> the row's text from "shape" to "shares_storage_with": (shared by most rows)
    middles: dict[tuple[int, str, str], str] = {}
    for entry in ckpt.tensors(with_parts=True):
        info = entry.info
        shape, dtype, storage = info.shape, info.dtype, info.storage
        known = shapes.get(id(shape))
        if known is None or known[0] is not shape:
            plain = type(shape) is tuple and all(type(d) is int for d in shape)
            known = shapes[id(shape)] = (shape, "[" + ", ".join(map(str, shape)) + "]" if plain else None,
                                         math.prod(shape) if plain else 0, _c_strides(shape) if plain else None)
        name, path = entry.name, entry.path
        name_text = quote(name)
        if len(path) == 1 and path[0] is name:  # a flat state dict: the path is the name
            path_text: str | None = "[" + name_text + "]"
        else:
            path_text = _path_text(path, quote)
        if (storage is None or info.broken or info.layout != "strided" or known[1] is None
                or path_text is None or type(dtype) is not str or type(storage.device) is not str
                or ((extra := info.extra) and ("shards" in extra or "global_shape" in extra))
                or info.quant is not None or info.part_of is not None
                or (info.stride != known[3] and repeats(info) is not None)):  # C order never repeats
            yield _dumps(_tensor_item(ckpt, entry, sharing, None))
            continue
        key = (id(shape), dtype, storage.device)
        middle = middles.get(key)
        if middle is None:
            nbytes = known[2] * dtypes.itemsize(dtype)  # as TensorInfo.nbytes counts
            middle = middles[key] = (f'"shape": {known[1]}, "dtype": {quote(dtype)}, "nbytes": {nbytes}, '
                                     f'"device": {quote(storage.device)}, "shares_storage_with": ')
        others = sharing.get(name)
        yield (f'{{"name": {name_text}, "path": {path_text}, {middle}'
               + ("[" + ", ".join(map(quote, others)) + "]}" if others else "[]}"))


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a C-contiguous tensor of `shape` (what nearly every tensor has)."""
    out = []
    step = 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return tuple(reversed(out))


def _path_text(path: tuple[Any, ...], quote: Any) -> str | None:
    """A path as JSON when every key is a str or an int, else None."""
    parts = []
    for key in path:
        if type(key) is str:
            parts.append(quote(key))
        elif type(key) is int:
            parts.append(str(key))
        else:
            return None
    return "[" + ", ".join(parts) + "]"


def _json_safe(value: Any) -> Any:
    """NaN/Inf are not JSON: they become null (the stats contract says figures are numbers or null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _optimizers(ckpt: Checkpoint, orders: ParamOrders | None = None) -> list[dict[str, Any]]:
    """The optimizers section; the optimizer module is imported only when something could be one."""
    if not _has_key(ckpt.root, "param_groups"):
        return []
    return inspect.optimizers_json(ckpt, orders)


def _has_key(root: Node, key: str) -> bool:
    """Whether any container in the tree has a child called `key` (leaves are never descended into)."""
    stack = [root]
    while stack:
        children = stack.pop().children
        if children:
            if key in [c.key for c in children]:
                return True
            stack.extend([c for c in children if c.children])
    return False


def _dumps(value: Any, indent: int | None = None) -> str:
    try:
        return json.dumps(value, indent=indent, default=str, allow_nan=False)
    except ValueError:  # a NaN/Inf somewhere (statistics): JSON has none, the contract says null
        return json.dumps(_json_safe(value), indent=indent, default=str, allow_nan=False)


def write_json(data: Any) -> None:
    """One JSON document on stdout: indented for a terminal, compact (C encoder, fast) for pipes."""
    sys.stdout.write(_dumps(data, 1 if sys.stdout.isatty() else None))
    sys.stdout.write("\n")


def write_json_stream(items: Iterator[tuple[str, Any]]) -> None:
    """The same document written piece by piece: one tensor or value in memory at a time."""
    out = sys.stdout
    out.write("{")
    for i, (key, value) in enumerate(items):
        out.write(("" if i == 0 else ", ") + json.dumps(key) + ": ")
        if isinstance(value, JsonTexts):
            out.write("[")
            first = True
            while batch := list(itertools.islice(value.texts, 4096)):
                out.write(("" if first else ", ") + ", ".join(batch))
                first = False
            out.write("]")
        elif isinstance(value, Iterator):
            out.write("[")
            first = True
            while batch := list(itertools.islice(value, 4096)):  # one encoder call per batch
                out.write(("" if first else ", ") + _dumps(batch)[1:-1])
                first = False
            out.write("]")
        else:
            out.write(_dumps(value))
    out.write("}\n")


def run(args: argparse.Namespace) -> int:
    """Run `ckptview info`; returns the exit status."""
    # One pause of the cyclic GC over opening and listing: each step builds or walks millions of
    # young objects without garbage cycles, and a collector pass between two steps re-scans them all.
    with paused_gc():
        return _list(args)


def _list(args: argparse.Namespace) -> int:
    """`run`, inside one pause of the cyclic GC."""
    query = None
    if getattr(args, "filter", None):
        try:
            query = inspect.parse_query(args.filter)
        except inspect.QueryError as exc:
            raise CommandFailure(f"--filter: {exc}") from None
    ckpt = open_given(args.path, args.remote)
    try:
        orders = _param_orders(ckpt)
        only, order = None, None
        if query is not None and query.needs_figures:  # nan>0, norm>10, sort:-norm: every tensor's figures first
            drain(inspect.compute_figures(query, [e.info for e in ckpt.tensors()], figures.Analysis()))
        if query is not None and not query.empty:
            only = inspect.matching_names(inspect.group_tree(ckpt.root, ckpt.warnings), query)
        if query is not None and query.order is not None:  # sort:-norm: most first, file order among equals
            order = _figure_order(query)
        spectral = getattr(args, "spectral", False)
        given = None
        if args.stats or spectral:  # on workers when placed there, or when the file pays for this machine's cores
            stats_of, spectra_of = listing_work(ckpt, args.stats, spectral, only)
            given = sweep.listing_figures(ckpt, args.path, args.remote, cluster_options.placement(args), stats_of,
                                          spectra_of, getattr(args, "expand_repeats", False))
        if args.json and not sys.stdout.isatty():  # scripts: streamed, memory stays flat
            # Whole or not at all: streamed into a spooled file (memory bounded, disk beyond) and
            # copied to stdout only once complete, so an error half-way leaves stdout empty.
            with tempfile.SpooledTemporaryFile(4 << 20, mode="w+", encoding="utf-8") as spool:
                with paused_gc(), contextlib.redirect_stdout(spool):
                    write_json_stream(info_items(ckpt, stats=args.stats, encoded=True, spectral=spectral, only=only,
                                                 expand_repeats=getattr(args, "expand_repeats", False),
                                                 order=order, orders=orders, given=given))
                spool.seek(0)
                shutil.copyfileobj(spool, sys.stdout, 1 << 20)
            return 0
        data = info_dict(ckpt, stats=args.stats, spectral=spectral, only=only,
                         expand_repeats=getattr(args, "expand_repeats", False), order=order, orders=orders,
                         given=given)
    finally:
        ckpt.close()
        _let_go(ckpt)
    if args.json:
        write_json(data)
        return 0
    print_table(data)
    return 0


def _param_orders(ckpt: Checkpoint) -> ParamOrders | None:
    """The parameter orders that name a Trainer folder's optimizer state: the user's cache of them, with
    what this checkpoint asks learned first when it is not there yet.

    A command prints once, so it does not print guessed names that a minute's wait would make sure: the
    first `info` of a config (and transformers version) waits for its model to be built on the meta device
    in a worker (seconds, said on a terminal), every later one reads the cache at metadata cost. The window
    shows the tree at once instead, the names marked until the order arrives.
    """
    if not _has_key(ckpt.root, "param_groups"):  # no optimizer: nothing of the kind is imported
        return None
    cache = inspect.ParamOrderCache()
    pending = inspect.pending_orders(ckpt, cache)
    if pending:
        if sys.stderr.isatty():
            print(f"ckptview: learning the parameter order of {', '.join(r.arch for r in pending)} from "
                  f"{pending[0].library} in a worker (once: kept in the cache after) ...", file=sys.stderr)
        cache.learn(pending)
    return cache


def _figure_order(query: Query) -> TensorOrder:
    """The sort key a `sort:` term asks for, over the figures `compute_figures` put in the query."""
    by, figures = query.order, query.figures
    assert by is not None

    def key(entry: TensorEntry) -> tuple[bool, float]:
        return by.key(figures.get(entry.info, by.figure))

    return key


def _let_go(ckpt: Checkpoint) -> None:
    """Free the checkpoint's tree now, or, when the process ends next, keep it out of the collector."""
    if keep_until_exit(ckpt):
        return
    release_tree(ckpt.root)  # only plain data is used below: parents unlinked, reference counting frees it


def print_table(data: dict[str, Any]) -> None:
    """The human-readable listing; every text from the file goes through `printable()`."""
    out = sys.stdout
    tensors = data["tensors"]
    own = [t for t in tensors if "part_of" not in t]  # a quantized weight's parts are counted in it
    total_bytes = sum(t["nbytes"] for t in own)
    total_params = sum(math.prod(t["shape"]) for t in own)
    out.write(f"{printable(data['path'])}\n  format {printable(data['format'])}, {human_bytes(data['file_size'])} "
              f"on disk, {plural(len(own), 'tensor')}, "
              f"{human_count(total_params)} element{'' if total_params == 1 else 's'}, "
              f"{human_bytes(total_bytes)}\n")
    quantized = [t["quantization"] for t in tensors if "quantization" in t]
    if quantized:
        schemes = sorted({printable(q["label"]) for q in quantized})
        params = data.get("parameters") or 0
        per = f", {total_bytes / params:.3g} bytes per parameter" if params else ""
        out.write(f"  quantized: {plural(len(quantized), 'weight')} ({'; '.join(schemes[:4])}"
                  f"{f'; +{len(schemes) - 4} more' if len(schemes) > 4 else ''}), "
                  f"{human_count(params)} parameters{per}\n")
    if data["unsafe_globals"]:
        out.write("  UNSAFE GLOBALS (referenced, not run): " + ", ".join(map(printable, data["unsafe_globals"]))
                  + "\n")
    if data.get("native_code"):
        out.write("  NATIVE CODE (compiled libraries, run if torch loads the file): "
                  + ", ".join(map(printable, data["native_code"])) + "\n")
    if "pickles" in data:
        count = data["pickles"]
        out.write(f"  {count} pickle{'' if count == 1 else 's'} in the stream, all read by the safe reader\n")
    if tensors:
        labels = _state_labels(data.get("optimizers", []))
        names = [printable(t["name"] + (f" ({labels[t['name']]})" if t["name"] in labels else "")) for t in tensors]
        width = min(max(len(n) for n in names), 70)
        out.write(f"\n{'name':<{width}}  {'dtype':<14} {'shape':<20} {'size':>10}  device\n")
        for name, t in zip(names, tensors, strict=True):
            name = name if len(name) <= width else "..." + name[-(width - 3):]
            shared = "  (shares storage)" if t["shares_storage_with"] else ""
            broken = f"  BROKEN: {printable(t['broken'])}" if t.get("broken") else ""
            sparse = f"  {printable(t['layout'])}, {t['nnz']} stored values" if "layout" in t else ""
            if "repeats" in t:  # stride 0, overlapping strides: the size above is what it declares
                r = t["repeats"]
                sparse += (f"  REPEATS its storage {format_factor(r['factor'])} ({r['kind']}): "
                           f"{plural(r['stored'], 'stored element')}")
            if "global_shape" in t:
                sparse += f"  local shard of {shape_str(t['global_shape'])}"
            if "quantization" in t:
                q = t["quantization"]
                sparse += f"  {printable(q['label'])}, {q['bits_per_weight']:g} bits per weight"
            if "part_of" in t:  # beneath its logical tensor: indented
                name = ("  " + name)[:width] if len(name) + 2 <= width else "  ..." + name[-(width - 5):]
                sparse += "  (part)"
            out.write(f"{name:<{width}}  {printable(t['dtype']):<14} {shape_str(t['shape']):<20} "
                      f"{human_bytes(t['nbytes']):>10}  {printable(t['device'])}{shared}{sparse}{broken}\n")
            if "stats" in t and t["stats"]:
                s = t["stats"]
                of = ""
                if "repeats" in t:
                    of = "  (its stored elements, each counted as often as it repeats)" if t["repeats"]["exact"] \
                        else "  (of its stored elements, each once)"
                out.write(f"{'':<{width}}  mean {figure_or_text(s.get('mean'))} std {figure_or_text(s.get('std'))} "
                          f"min {figure_or_text(s.get('min'))} max {figure_or_text(s.get('max'))} nan {s.get('nan')} "
                          f"inf {(s.get('posinf') or 0) + (s.get('neginf') or 0)}{of}\n")
    if data["values"]:
        out.write("\nvalues\n")
        for v in data["values"]:
            text = printable(v["repr"])
            text = text if len(text) < 100 else text[:97] + "..."
            out.write(f"  {printable(v['name']) or '(root)'} = {text}  ({printable(v['type'])})\n")
    for opt in data.get("optimizers", []):
        named = sum(1 for p in opt["params"] if p["name"] is not None)
        guessed = sum(1 for p in opt["params"] if p.get("name_guessed"))  # names a guessed order decides
        lrs = sorted({g.get("lr") for g in opt["param_groups"] if isinstance(g.get("lr"), (int, float))})
        out.write(f"\noptimizer {printable('.'.join(map(str, opt['path']))) or '(root)'}: {printable(opt['kind'])}, "
                  f"{plural(len(opt['params']), 'param')} in {plural(len(opt['param_groups']), 'group')}, "
                  f"{named} mapped to names ({printable(opt['mapping'])}"
                  + (f", {guessed} of them guessed" if guessed else "") + ")"
                  + (f", lr {', '.join(f'{x:g}' for x in lrs)}" if lrs else "") + "\n")
        if opt.get("note"):
            out.write(f"  note: {printable(opt['note'])}\n")
        unsure = [p for p in opt["params"] if p.get("name_guessed")]
        for p in unsure[:10]:
            out.write(f"  {printable(str(p['id']))}: {printable(str(p['name']))} (guessed)\n")
        if len(unsure) > 10:
            out.write(f"  ... and {len(unsure) - 10} more guessed (--json lists them)\n")
    _print_spectral_table(out, tensors)
    for warning in data["warnings"]:
        out.write(f"warning: {printable(warning)}\n")
    if "transfer" in data:
        t = data["transfer"]
        out.write(f"transfer: {human_bytes(t['bytes'])} in {plural(t['requests'], 'request')}\n")


def _state_labels(optimizers: list[dict[str, Any]]) -> dict[str, str]:
    """Tensor name -> "exp_avg of fc.weight" for the state of parameters the optimizer mapping names (as the
    window's tree labels them)."""
    out: dict[str, str] = {}
    for opt in optimizers:
        base = [*map(str, opt["path"]), "state"]
        for param in opt["params"]:
            if param["name"] is None:
                continue
            for key in param["state"]:
                out[".".join([*base, str(param["id"]), str(key)])] = f"{key} of {param['name']}"
    return out


def _print_spectral_table(out: Any, tensors: list[dict[str, Any]]) -> None:
    """`--spectral`: one line per analysed weight (alpha, KS distance, norms, ranks, flags)."""
    rows = [t for t in tensors if "spectral" in t]
    if not rows:
        return
    names = [printable(t["name"]) for t in rows]
    width = min(max(len(n) for n in names), 60)
    out.write(f"\nweight spectra (ESD of W^T W; alpha well trained in [2, 6])\n"
              f"{'name':<{width}}  {'matrix':<12} {'alpha':>7} {'xmin':>9} {'KS':>6} {'spec norm':>10} "
              f"{'stable rk':>9} {'rank':>11}  method      flags\n")
    for name, t in zip(names, rows, strict=True):
        s = t["spectral"]
        name = name if len(name) <= width else "..." + name[-(width - 3):]
        shape = t["shape"]
        matrix = f"{shape[0]}x{math.prod(shape[1:])}"
        rank = MISSING if s["rank"] is None else f"{s['rank']}/{s['num_singular_values']}"
        flags = ", ".join(s["flags"]) or MISSING
        out.write(f"{name:<{width}}  {matrix:<12} {figure_or_text(s['alpha'], '.3f'):>7} {figure_or_text(s['xmin'], '.4g'):>9} "
                  f"{figure_or_text(s['ks_distance'], '.3f'):>6} {figure_or_text(s['spectral_norm'], '.4g'):>10} "
                  f"{figure_or_text(s['stable_rank'], '.4g'):>9} {rank:>11}  {s['method']:<11} {flags}\n")

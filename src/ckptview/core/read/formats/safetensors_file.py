"""safetensors: an 8-byte header length, a JSON header, then raw little-endian tensor bytes."""

from __future__ import annotations

import heapq
import struct
from collections.abc import Generator, Iterator
from typing import Any

from ckptview.core import dtypes
from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Node, OpenFiles, PathKey, Storage, TensorInfo
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.jobs import Progress, drain
from ckptview.core.read.bytes.files import FileMap
from ckptview.core.read.bytes.sources import FileSlice
from ckptview.core.read.context import DEFAULT, ReaderContext, Source
from ckptview.core.read.formats.safetensors_header import (
    MAX_HEADER,  # noqa: F401 - part of this reader's limits
    PIECE_BYTES,
    NotInPieces,
    header_pieces,
    parse_whole,
    read_header_bytes,
)
from ckptview.core.read.pickle.torch_globals import check_view
from ckptview.core.text import elide
from ckptview.core.units import human_bytes, plural

NAME = "safetensors"
PRIORITY = 90
TENSOR_COST = 40  # units an entry costs (its TensorInfo, Storage, FileSlice and Node hold ~600 bytes)
MAX_LISTED = 20  # warnings of one kind listed one by one before they are counted
NAME_IN_ERROR = 80  # characters of a tensor name quoted in an error (a name may be 90 MB)
SORT_RUN = 1 << 15  # ranges sorted in one call when the header lists them out of offset order
_ST_DTYPES = dtypes.SAFETENSORS_DTYPES
_ITEMSIZES = {name: dtypes.itemsize(name) for name in _ST_DTYPES.values()}


def sniff(source: Source) -> bool:
    """True when the source's first bytes look like a safetensors file."""
    head = source.head
    if len(head) < 10 or source.is_dir:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return head[8:9] == b"{" and length > 1


def read_header(path: str) -> tuple[dict[str, Any], int, int]:
    """(parsed JSON header, offset of the data region, file size); validates sizes before reading."""
    raw, data_start, size = read_header_bytes(path)
    return parse_whole(raw), data_start, size


def tensor_from_entry(key: str, entry: Any, fmap: FileMap, data_start: int, data_size: int) -> TensorInfo:
    """One header entry as a TensorInfo; inconsistencies mark it broken instead of failing the file."""
    # The common case in few steps (900k-entry headers exist): a contiguous tensor that exactly fills
    # its byte range inside the data region is sound by construction. Anything else: the checks below.
    if type(entry) is dict:
        code, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        dtype = _ST_DTYPES.get(code) if type(code) is str else None
        if dtype is not None and type(shape) is list and len(shape) <= 64 and type(offsets) is list \
                and len(offsets) == 2:
            begin, end = offsets
            if type(begin) is int and type(end) is int and 0 <= begin <= end <= data_size:
                numel, strides = 1, []
                for size in reversed(shape):
                    if type(size) is not int or size < 0:
                        break
                    strides.append(numel)
                    numel *= size
                else:
                    itemsize = _ITEMSIZES[dtype]
                    if numel * itemsize == end - begin and 0 not in shape:
                        storage = Storage(f"{key} @ {begin}", dtype, numel, "cpu",
                                          FileSlice(fmap, data_start + begin, end - begin))
                        return TensorInfo(dtype, tuple(shape), tuple(reversed(strides)), 0, storage)
    if not isinstance(entry, dict):
        raise CheckpointFormatError(f"safetensors entry '{key}' is not an object")
    code, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    dtype = dtypes.SAFETENSORS_DTYPES.get(code) if isinstance(code, str) else None
    if dtype is None:
        raise CheckpointFormatError(f"safetensors entry '{key}' has unknown dtype {str(code)[:20]!r}")
    if (not isinstance(shape, list) or len(shape) > 64
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape)):
        raise CheckpointFormatError(f"safetensors entry '{key}' has an invalid shape")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise CheckpointFormatError(f"safetensors entry '{key}' has invalid data_offsets")
    begin, end = offsets
    shape_t = tuple(shape)
    odd_f4 = False
    if code == "F4" and shape_t:  # the file counts 4-bit values; torch's float4_e2m1fn_x2 counts their pairs
        odd_f4 = shape_t[-1] % 2 != 0
        shape_t = (*shape_t[:-1], shape_t[-1] // 2)
    stride = tuple(_contiguous_strides(shape_t))
    itemsize = dtypes.itemsize(dtype)
    length = max(end - begin, 0)
    storage = Storage(key=f"{key} @ {begin}", dtype=dtype, numel=length // itemsize, device="cpu",
                      source=FileSlice(fmap, data_start + begin, length))
    info = TensorInfo(dtype=dtype, shape=shape_t, stride=stride, offset=0, storage=storage)
    if 0 <= begin <= end and end > data_size:  # the file ends before the data its header describes
        info.broken = (f"cut off: its data_offsets [{begin}, {end}] end past the {data_size}-byte data region "
                       "the file holds")
        storage.broken = info.broken
    elif begin < 0 or end < begin:
        info.broken = f"data_offsets [{begin}, {end}] lie outside the {data_size}-byte data region"
        storage.broken = info.broken
    elif any(s < 0 for s in shape_t):
        info.broken = f"negative size in shape {list(shape_t)}"
    elif odd_f4:
        info.broken = f"F4 shape {list(shape)} has an odd last dimension: its 4-bit values are no whole bytes"
    elif info.numel * itemsize != end - begin:
        info.broken = f"shape {list(shape_t)} of {dtype} needs {info.numel * itemsize} bytes, entry holds {end - begin}"
    else:
        check_view(info)
    return info


def _contiguous_strides(shape: tuple[int, ...]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return list(reversed(strides))


class _Restart(Exception):
    """Reading piece by piece met something only the whole header decides (a repeated name, an error)."""


def open(source: Source, ctx: ReaderContext = DEFAULT) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read a safetensors file into a Checkpoint: metadata only, no tensor bytes, nothing run.

    A header read in pieces hands each piece's Progress to `ctx.report` (which checks `ctx.cancel`
    first, and may raise to stop the open)."""
    return drain(iter_open(source, ctx.budget_for(source)), ctx.report if ctx.reports else None)


def iter_open(source: Source, budget: Budget) -> Generator[Progress, None, Checkpoint]:
    """`open`, yielding Progress (header bytes read) between pieces of the header; each piece's entries
    charged to `budget`."""
    path = source.path
    raw, data_start, size = read_header_bytes(path, source.identity, source.fs)
    fmap = source.file_map()
    try:
        if len(raw) > PIECE_BYTES:
            try:
                return (yield from _build(path, raw, fmap, data_start, size, header_pieces(raw, PIECE_BYTES), True,
                                          budget))
            except (NotInPieces, _Restart):
                pass  # malformed or ambiguous piece by piece: the whole header decides (charged again)
        pieces = [(parse_whole(raw), len(raw))]
        return (yield from _build(path, raw, fmap, data_start, size, iter(pieces), False, budget))
    except BaseException:
        fmap.close()
        raise


def _build(path: str, raw: bytes, fmap: FileMap, data_start: int, size: int,
           pieces: Iterator[tuple[dict[str, Any], int]], in_pieces: bool, budget: Budget
           ) -> Generator[Progress, None, Checkpoint]:
    """The Checkpoint from the header's members, converted one piece at a time (each piece freed after).

    Sound entries (a known dtype, a contiguous shape that exactly fills its byte range inside the data
    region) take a few steps; every other entry gets `tensor_from_entry`'s full checks.
    """
    data_size = size - data_start
    root = Node(key="", kind="dict", type_name="safetensors")
    children: list[Node] = []
    broken: list[Node] = []
    metadata: Any = None
    seen: set[str] = set()
    count = 0  # members read, __metadata__ included (a repeated name shows as len(seen) < count)
    shapes: dict[tuple[int, ...], tuple[tuple[int, ...], tuple[int, ...], int]] = {}
    st_dtypes, itemsizes = _ST_DTYPES, _ITEMSIZES
    # Overlaps are checked between neighbours in offset order; entries usually come in that order, so
    # they are checked on the way and sorted afterwards only if not.
    in_order, last_begin, last_end, last_key = True, -1, -1, ""
    overlaps: list[tuple[PathKey, PathKey]] = []
    overlap_count = 0
    total = len(raw)
    for piece, done in pieces:  # each piece's entries charged before they are converted
        budget.charge(TENSOR_COST * len(piece), "header entries")
        if in_pieces:
            count += len(piece)
            seen.update(piece)
            if len(seen) != count:  # a name repeated from an earlier piece: JSON keeps the last value
                raise _Restart()
        if "__metadata__" in piece:
            metadata = piece.pop("__metadata__")
        for key, entry in piece.items():
            info = None
            try:  # anything missing, unhashable or of the wrong arity leaves the entry to the full checks
                dtype = st_dtypes[entry["dtype"]]
                shape = entry["shape"]
                begin, end = entry["data_offsets"]
            except (KeyError, TypeError, ValueError):
                dtype = None
            if dtype is not None and type(shape) is list and len(shape) <= 64 and type(begin) is int \
                    and type(end) is int and 0 <= begin <= end <= data_size:
                for dim in shape:
                    if type(dim) is not int or dim <= 0:
                        break
                else:
                    shape_t = tuple(shape)
                    known = shapes.get(shape_t)
                    if known is None:
                        known = shapes[shape_t] = _shape_facts(shape_t)
                    shape_t, stride_t, numel = known
                    if numel * itemsizes[dtype] == end - begin:
                        info = TensorInfo(dtype, shape_t, stride_t, 0,
                                          Storage(f"{key} @ {begin}", dtype, numel, "cpu",
                                                  FileSlice(fmap, data_start + begin, end - begin)))
            if info is None:
                try:
                    info = tensor_from_entry(key, entry, fmap, data_start, data_size)
                except CheckpointFormatError:
                    if in_pieces:  # the same name may come again later with a sound entry
                        raise _Restart() from None
                    raise
                if info.broken:
                    node = Node(key, "tensor", "Tensor", (), info, None, root)
                    children.append(node)
                    broken.append(node)
                    continue
                begin, end = entry["data_offsets"]
            children.append(Node(key, "tensor", "Tensor", (), info, None, root))
            if in_order:
                if begin > last_begin or (begin == last_begin and (end > last_end or (
                        end == last_end and key >= last_key))):
                    if begin < last_end:
                        overlap_count += 1
                        if len(overlaps) < MAX_LISTED:
                            overlaps.append((last_key, key))
                    last_begin, last_end, last_key = begin, end, key
                else:
                    in_order = False
        del piece
        yield Progress(done, total, "reading the header")
    del seen, shapes
    if not in_order:
        overlaps, overlap_count = _overlaps(children, data_start)
    if overlap_count:
        raise _overlap_error(overlaps[0], overlap_count)
    if children:
        root.children = children
    ckpt = Checkpoint(path=path, format=NAME, file_size=size, root=root, files=OpenFiles([fmap]),
                      metadata={"header_bytes": data_start - 8})
    if isinstance(metadata, dict):
        meta_node = root.add(Node(key="__metadata__", kind="dict", type_name="dict"))
        budget.charge(len(metadata), "header metadata entries")
        for k, v in metadata.items():  # charged above
            meta_node.add(Node(key=str(k), kind="value", type_name=type(v).__name__, value=v))
    elif metadata is not None:
        ckpt.warnings.append("safetensors __metadata__ is not an object; ignored")
    cut = [n for n in broken if n.tensor is not None and (n.tensor.broken or "").startswith("cut off")]
    if cut:
        ckpt.warnings.insert(0, _cut_short(cut, len(children), data_start, size))
    for node in broken:
        ckpt.warnings.append(f"tensor '{node.key}' is broken: {node.tensor.broken}")  # type: ignore[union-attr]
    return ckpt


def _cut_short(cut: list[Node], tensors: int, data_start: int, size: int) -> str:
    """The warning of a file that ends before the data its header describes: how much it should hold."""
    ends = [n.tensor.storage.source.offset + n.tensor.storage.source.length for n in cut
            if n.tensor is not None and n.tensor.storage is not None and isinstance(n.tensor.storage.source, FileSlice)]
    expected = max(ends, default=size)
    whole = tensors - len(cut)
    return (f"the file is cut short (an incomplete download?): it ends at {size:,} bytes, its header describes "
            f"{expected:,} ({human_bytes(expected)}); {whole} of {plural(tensors, 'tensor')} whole, {len(cut)} cut "
            "off and marked broken")


def _overlap_error(pair: tuple[PathKey, PathKey], count: int) -> CheckpointFormatError:
    """The refusal of a header whose entries share bytes (the safetensors library refuses it too).

    Aliased entries multiply what one file costs to export, compare or summarise (30,000 names over one
    160 KB range: 16 GB written from an 8.5 MB file); refusing the file keeps all of that within its size.
    """
    first, second = (elide(str(key), NAME_IN_ERROR) for key in pair)
    more = f" ({count} overlapping pairs)" if count > 1 else ""
    return CheckpointFormatError(f"safetensors entries '{first}' and '{second}' overlap in the file{more}; "
                                 "the safetensors format refuses entries that share bytes")


def _shape_facts(shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(shape, contiguous strides, element count) of a shape of positive sizes, shared by every tensor of it."""
    strides, numel = [], 1
    for size in reversed(shape):
        strides.append(numel)
        numel *= size
    return shape, tuple(reversed(strides)), numel


def _overlaps(children: list[Node], data_start: int) -> tuple[list[tuple[PathKey, PathKey]], int]:
    """(first MAX_LISTED overlapping neighbour pairs, their count) of the sound tensors, in offset order.

    Sorted in runs of SORT_RUN and merged: one sort of a million ranges in random order holds the
    interpreter lock for a second (a window's GUI thread would stop); a run takes a few milliseconds.
    """
    ranges = []
    for node in children:
        info = node.tensor
        if info is not None and not info.broken and isinstance(info.storage.source, FileSlice):  # type: ignore[union-attr]
            src = info.storage.source  # type: ignore[union-attr]
            ranges.append((src.offset - data_start, src.offset - data_start + src.length, node.key))
    runs = [sorted(ranges[i:i + SORT_RUN]) for i in range(0, len(ranges), SORT_RUN)]
    del ranges
    pairs: list[tuple[PathKey, PathKey]] = []
    count, last_end = 0, -1
    last_key: PathKey = ""
    for begin, end, key in heapq.merge(*runs):
        if begin < last_end:
            count += 1
            if len(pairs) < MAX_LISTED:
                pairs.append((last_key, key))
        last_end, last_key = end, key
    while runs:  # bounded: one sorted run freed per step; freed run by run: a million tuples freed at once hold the lock for a tenth of a second
        runs.pop()
    return pairs, count

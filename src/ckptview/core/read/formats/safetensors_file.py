"""safetensors: an 8-byte header length, a JSON header, then raw little-endian tensor bytes."""

from __future__ import annotations

import json
import struct
from typing import Any

from ckptview.core import dtypes
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.model import Checkpoint, Node, OpenFiles, Storage, TensorInfo
from ckptview.core.read import files as cfiles
from ckptview.core.read.files import open_regular
from ckptview.core.read.sources import FileMap, FileSlice
from ckptview.core.read.torch_globals import check_view

NAME = "safetensors"
PRIORITY = 90
MAX_HEADER = 100 << 20  # the safetensors library refuses headers over 100 MB too
MAX_TENSORS = 1_000_000  # the largest real models hold ~100k; a header listing millions is an attack
MAX_LISTED = 20  # warnings of one kind listed one by one before they are counted
_ST_DTYPES = dtypes.SAFETENSORS_DTYPES
_ITEMSIZES = {name: dtypes.itemsize(name) for name in _ST_DTYPES.values()}


def sniff(path: str, head: bytes) -> bool:
    """True when the path or its first bytes (`head`; b"" for a folder) look like a safetensors file."""
    if len(head) < 10 or cfiles.isdir(path):
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return head[8:9] == b"{" and length > 1


def read_header(path: str) -> tuple[dict[str, Any], int, int]:
    """(parsed JSON header, offset of the data region, file size); validates sizes before reading."""
    size = cfiles.getsize(path)
    with open_regular(path) as fh:  # never blocks on a FIFO
        raw_len = fh.read(8)
        if len(raw_len) < 8:
            raise CheckpointFormatError("truncated safetensors: header length missing")
        (length,) = struct.unpack("<Q", raw_len)
        if length > MAX_HEADER:
            raise CheckpointFormatError(f"safetensors header length {length} exceeds the {MAX_HEADER}-byte limit")
        if 8 + length > size:
            raise CheckpointFormatError(
                f"truncated safetensors: header declares {length} bytes, file has {size - 8} after the length")
        raw = fh.read(length)
    try:
        text = raw.decode("utf-8")
        del raw  # a 100 MB header: the bytes go before the parsed objects arrive
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointFormatError(f"safetensors header is not valid JSON ({str(exc)[:80]})") from None
    if not isinstance(header, dict):
        raise CheckpointFormatError("safetensors header is not a JSON object")
    return header, 8 + length, size


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
    stride = tuple(_contiguous_strides(shape_t))
    itemsize = dtypes.itemsize(dtype)
    length = max(end - begin, 0)
    storage = Storage(key=f"{key} @ {begin}", dtype=dtype, numel=length // itemsize, device="cpu",
                      source=FileSlice(fmap, data_start + begin, length))
    info = TensorInfo(dtype=dtype, shape=shape_t, stride=stride, offset=0, storage=storage)
    if begin < 0 or end < begin or end > data_size:
        info.broken = f"data_offsets [{begin}, {end}] lie outside the {data_size}-byte data region"
        storage.broken = info.broken
    elif any(s < 0 for s in shape_t):
        info.broken = f"negative size in shape {list(shape_t)}"
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


def open(path: str) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read a safetensors file into a Checkpoint: metadata only, no tensor bytes, nothing run."""
    header, data_start, size = read_header(path)
    fmap = FileMap(path)
    root = Node(key="", kind="dict", type_name="safetensors")
    metadata = header.pop("__metadata__", None)
    if len(header) > MAX_TENSORS:
        raise CheckpointFormatError(
            f"safetensors header lists {len(header)} tensors; refusing more than {MAX_TENSORS}")
    ranges = []
    for key in list(header):  # each parsed entry is dropped once used: the peak holds one copy, not two
        entry = header.pop(key)
        info = tensor_from_entry(key, entry, fmap, data_start, size - data_start)
        root.add(Node(key=key, kind="tensor", type_name="Tensor", tensor=info))
        if not info.broken:
            ranges.append((entry["data_offsets"][0], entry["data_offsets"][1], key))
    ckpt = Checkpoint(path=path, format=NAME, file_size=size, root=root, files=OpenFiles([fmap]),
                      metadata={"header_bytes": data_start - 8})
    if isinstance(metadata, dict):
        meta_node = root.add(Node(key="__metadata__", kind="dict", type_name="dict"))
        for k, v in metadata.items():
            meta_node.add(Node(key=str(k), kind="value", type_name=type(v).__name__, value=v))
    elif metadata is not None:
        ckpt.warnings.append("safetensors __metadata__ is not an object; ignored")
    ranges.sort()
    overlaps = [(k1, k2) for (_b1, e1, k1), (b2, _e2, k2) in zip(ranges, ranges[1:], strict=False) if b2 < e1]
    for k1, k2 in overlaps[:MAX_LISTED]:
        ckpt.warnings.append(f"tensors '{k1}' and '{k2}' overlap in the file")
    if len(overlaps) > MAX_LISTED:
        ckpt.warnings.append(f"... and {len(overlaps) - MAX_LISTED} more overlapping pairs")
    for entry in ckpt.tensors():
        if entry.info.broken:
            ckpt.warnings.append(f"tensor '{entry.name}' is broken: {entry.info.broken}")
    return ckpt

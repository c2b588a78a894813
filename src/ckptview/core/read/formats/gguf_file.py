"""GGUF (llama.cpp's single-file format): metadata key/values, then tensors of ggml types, read as data.

Each GGUF tensor is listed under the name llama.cpp gives it (`blk.0.attn_q.weight`), with the shape torch
would give it: GGUF stores dimensions fastest first, so the shape shown is them reversed, as gguf's own
reader (`GGUFReader`'s arrays) and Hugging Face's conversion give it. A tensor of a plain type (F32, F16,
BF16, F64, I8..I64) is a plain tensor over its bytes. A tensor of a block type (Q4_K, Q8_0, IQ2_XS, ...) is
the logical tensor of a quantized weight (`quant.recognise.logical_tensor`): its scheme `gguf Q4_K`, its
bits per weight, its values dequantized a few rows at a time by `quant.ggml`; its one part, the stored block
range, is listed beneath it under the same name, as uint8 rows of blocks (`GGUFReader`'s `data` shape). A
type the gguf package cannot dequantize, or an unknown type, says so in one line; its raw bytes (to the
next tensor, for an unknown type) stay listed.

The metadata are the checkpoint's values, under `metadata` (`metadata.general.architecture`,
`metadata.llama.context_length`, ...), with `general.file_type` also named (`Q4_K_M`); an array longer than a
few hundred items (the vocabulary) is shown by its length and first items. A tensor whose bytes lie past the
end of the file is broken (one line); tensors that overlap in the file are refused, as llama.cpp refuses
them. Nothing of the tensor data is read at open.
"""

from __future__ import annotations

import bisect
from typing import Any

from ckptview.core import dtypes
from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Node, OpenFiles, Quantization, Storage, TensorInfo
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.bytes.files import FileMap
from ckptview.core.read.bytes.sources import FileSlice
from ckptview.core.read.context import DEFAULT, ReaderContext, Source
from ckptview.core.read.formats.gguf_header import MAGIC, NAME_IN_ERROR, GgufHeader, TensorRecord, read_header
from ckptview.core.read.quant import ggml
from ckptview.core.read.quant.recognise import logical_tensor
from ckptview.core.text import elide
from ckptview.core.units import plural

NAME = "gguf"
PRIORITY = 85
METADATA = "metadata"  # the node the key/values are listed under
FILE_TYPE = "general.file_type"


def sniff(source: Source) -> bool:
    """True when the file begins with GGUF's magic."""
    return not source.is_dir and source.head[:4] == MAGIC


def open(source: Source, ctx: ReaderContext = DEFAULT) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """The GGUF file's tensors and metadata (the header only: no tensor data is read)."""
    fmap = source.file_map()
    try:
        budget = Budget.for_stored(fmap.size, "the GGUF header", cancel=ctx.cancel)
        header = read_header(fmap, budget)
        return _checkpoint(source.path, fmap, header, budget)
    except BaseException:
        fmap.close()
        raise


def _checkpoint(path: str, fmap: FileMap, header: GgufHeader, budget: Budget) -> Checkpoint:
    size = fmap.size
    root = Node(key="", kind="dict", type_name="gguf")
    children: list[Node] = []
    warnings: list[str] = []
    budget.charge(len(header.tensors), "tensor extents")
    extents = _extents(header, size)
    spans: list[tuple[int, int, str]] = []
    for record in header.tensors:
        budget.charge(1, "tensors")
        nodes, span = _tensor_nodes(record, header, fmap, extents.get(record.name))
        for node in nodes:
            node.parent = root
            children.append(node)
            info = node.tensor
            if info is not None and info.part_of is None and info.broken:
                warnings.append(f"tensor '{elide(record.name, NAME_IN_ERROR)}' is broken: {info.broken}")
        if span is not None and span[1] > span[0]:
            spans.append((*span, record.name))
    _refuse_overlaps(spans, budget)
    metadata = Node(key=METADATA, kind="dict", type_name="dict", parent=root)
    values = dict(header.metadata)
    if isinstance(values.get(FILE_TYPE), int):
        values[FILE_TYPE] = f"{values[FILE_TYPE]} ({ggml.FILE_TYPES.get(values[FILE_TYPE], 'unknown')})"
    for key, value in values.items():
        metadata.add(Node(key=key, kind="value", type_name=header.types[key], value=value))
    children.append(metadata)
    root.children = children
    facts: dict[str, Any] = {"gguf_version": header.version, "alignment": header.alignment,
                             "data_offset": header.data_offset, "header_bytes": header.header_bytes,
                             "byte_order": header.byte_order, "gguf": header.metadata}
    ckpt = Checkpoint(path=path, format=NAME, file_size=size, root=root, files=OpenFiles([fmap]), metadata=facts)
    ckpt.warnings.extend(warnings)
    return ckpt


def _whole_blocks(record: TensorRecord) -> bool:
    """Whether the tensor's type is known and its rows are whole blocks of it (its bytes then follow)."""
    kind = ggml.TYPES.get(record.type_id)
    return kind is not None and (record.dims[0] if record.dims else 1) % kind.block_size == 0


def _extents(header: GgufHeader, size: int) -> dict[str, int]:
    """The bytes each tensor whose size its type does not tell (an unknown type, rows of partial blocks) may
    hold: to the next tensor's offset, or the file's end."""
    odd = [r for r in header.tensors if not _whole_blocks(r)]
    if not odd:
        return {}
    starts = sorted({r.offset for r in header.tensors})
    data = max(0, size - header.data_offset)
    out = {}
    for record in odd:
        after = bisect.bisect_right(starts, record.offset)
        end = min(starts[after] if after < len(starts) else data, data)
        out[record.name] = max(0, end - record.offset)
    return out


def _tensor_nodes(record: TensorRecord, header: GgufHeader, fmap: FileMap,
                  extent: int | None) -> tuple[list[Node], tuple[int, int] | None]:
    """The node(s) of one tensor (a plain tensor; or a logical tensor and its block part) and the bytes it
    spans in the file (None when they lie outside it)."""
    name = record.name
    shape = tuple(reversed(record.dims))
    start = header.data_offset + record.offset
    kind = ggml.TYPES.get(record.type_id)
    if kind is None or not _whole_blocks(record):
        length = extent or 0
        part = _raw(name, (length,), start, fmap)
        if kind is None:
            label, ggml_type = f"gguf type {record.type_id}", str(record.type_id)
            problem = f"ggml type {record.type_id} is unknown: its raw bytes are listed"
        else:
            label, ggml_type = f"gguf {kind.name}", kind.name
            problem = (f"rows of {plural(shape[-1], 'weight')} are no whole blocks of {kind.block_size} ({kind.name}): "
                       "its raw bytes are listed")
        quant = Quantization(ggml.SCHEME, label, (("blocks", name),), length,
                             facts={"ggml_type": ggml_type, "data_offset": start}, problem=problem)
        return _pair(name, shape, quant, None, part), (start, start + length)
    nbytes = _numel(shape) // kind.block_size * kind.type_size
    beyond = None
    if start + nbytes > fmap.size:
        beyond = (f"its {nbytes:,} bytes at {start:,} lie past the end of the file ({fmap.size:,} bytes)"
                  if start <= fmap.size else f"its offset {start:,} lies past the end of the file ({fmap.size:,} bytes)")
    plain = ggml.PLAIN.get(kind.name)
    if plain is not None:
        info = _plain(name, shape, plain, start, nbytes, fmap, header)
        if beyond is not None:
            info.broken = info.storage.broken = beyond  # type: ignore[union-attr]
        return [Node(name, "tensor", "Tensor", tensor=info)], None if beyond else (start, start + nbytes)
    label = f"gguf {kind.name}"
    row = shape[-1] if shape else 1
    part = _raw(name, (*shape[:-1], row // kind.block_size * kind.type_size), start, fmap)
    trouble = beyond
    if trouble is None and kind.name not in ggml.DECODED:
        trouble = f"{label} is not dequantized (the gguf package has no dequantization for it): its raw blocks are listed"
    quant = Quantization(ggml.SCHEME, label, (("blocks", name),), nbytes, kind.bits, kind.block_size,
                         round(8 * kind.type_size / kind.block_size, 4), None,
                         {"ggml_type": kind.name, "block_bytes": kind.type_size, "data_offset": start}, trouble)
    decoder = None if trouble is not None else ggml.GgmlDecoder(_rows(part), kind)
    return _pair(name, shape, quant, decoder, part), None if beyond else (start, start + nbytes)


def _pair(name: str, shape: tuple[int, ...], quant: Quantization, decoder: ggml.GgmlDecoder | None,
          part: TensorInfo) -> list[Node]:
    """The logical tensor's node, then its part's (the same name: the part row follows the logical one)."""
    logical = logical_tensor(name, shape, quant, decoder)
    part.part_of = name
    return [Node(name, "tensor", "Tensor", tensor=logical), Node(name, "tensor", "Tensor", tensor=part)]


def _plain(name: str, shape: tuple[int, ...], dtype: str, start: int, nbytes: int, fmap: FileMap,
           header: GgufHeader) -> TensorInfo:
    numel = _numel(shape)
    storage = Storage(f"{name} @ {start}", dtype, numel, "cpu", FileSlice(fmap, start, nbytes),
                      byteorder=header.byte_order if dtypes.itemsize(dtype) > 1 else "little")
    return TensorInfo(dtype, shape, _strides(shape), 0, storage)


def _raw(name: str, shape: tuple[int, ...], start: int, fmap: FileMap) -> TensorInfo:
    """A tensor's stored blocks as uint8 of `shape` (rows of blocks)."""
    numel = _numel(shape)
    storage = Storage(f"{name} @ {start}", "uint8", numel, "cpu", FileSlice(fmap, start, numel))
    info = TensorInfo("uint8", shape, _strides(shape), 0, storage)
    if start + numel > fmap.size:
        info.broken = storage.broken = f"its bytes at {start:,} lie past the end of the file ({fmap.size:,} bytes)"
    return info


def _rows(part: TensorInfo) -> TensorInfo:
    """The block part as a matrix: one row of blocks per row of weights."""
    last = part.shape[-1] if part.shape else 1
    rows = _numel(part.shape) // last if last else 0
    return TensorInfo("uint8", (rows, last), (last, 1), 0, part.storage)


def _refuse_overlaps(spans: list[tuple[int, int, str]], budget: Budget) -> None:
    """One line when two tensors share bytes (llama.cpp refuses such a file; aliases would multiply the work)."""
    budget.charge(len(spans), "tensor ranges sorted")
    spans.sort()
    for (_s0, e0, n0), (s1, _e1, n1) in zip(spans, spans[1:], strict=False):
        if s1 < e0:
            raise CheckpointFormatError(f"GGUF tensors '{elide(n0, NAME_IN_ERROR)}' and '{elide(n1, NAME_IN_ERROR)}' "
                                        "overlap in the file")


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= max(size, 1)
    return tuple(reversed(out))

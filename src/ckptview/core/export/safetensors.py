"""Write a .safetensors file by hand: the JSON header from metadata first, then tensor bytes streamed.

Format (https://github.com/huggingface/safetensors): 8-byte little-endian header length, a JSON header
`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}` padded with spaces
to a multiple of 8, then the byte buffer, which must be covered by the offsets without holes. Tensors
are laid out by decreasing item size, so each one starts at a multiple of its own item size.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptview.core import dtypes
from ckptview.core.export.blocks import BlockWriter

if TYPE_CHECKING:
    import numpy as np

# torch dtype name -> safetensors code; the fnuz float8 codes are accepted by safetensors >= 0.5.
# complex128 has none (safetensors 0.8 refuses "C128"), so such tensors cannot be exported here.
CODES = {**{k: v for k, v in dtypes.SAFETENSORS_CODES.items() if v != "C128"},
         "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ"}
MAX_HEADER = 100_000_000  # the reference reader refuses larger headers


@dataclass(frozen=True)
class Entry:
    """One tensor as safetensors sees it."""

    key: str
    dtype: str  # torch dtype name of the bytes written
    shape: tuple[int, ...]
    nbytes: int


def layout(entries: Sequence[Entry]) -> list[Entry]:
    """The order tensors are written in: larger item sizes first, file order among equals (stable)."""
    return sorted(entries, key=lambda e: -dtypes.itemsize(e.dtype))


def header_bytes(ordered: Sequence[Entry], metadata: dict[str, str] | None = None) -> bytes:
    """The length prefix plus padded JSON header for `ordered` (already in layout order)."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for entry in ordered:
        header[entry.key] = {
            "dtype": CODES[entry.dtype],
            "shape": list(entry.shape),
            "data_offsets": [offset, offset + entry.nbytes],
        }
        offset += entry.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    text += b" " * (-len(text) % 8)  # the spec allows trailing spaces; 8 keeps the buffer aligned
    if len(text) > MAX_HEADER:
        raise ValueError(f"safetensors header would be {len(text)} bytes, over the {MAX_HEADER} limit")
    return struct.pack("<Q", len(text)) + text


def write_tensor_blocks(writer: BlockWriter, dtype: np.dtype, chunks: Iterable[np.ndarray]) -> Iterator[int]:
    """Append one tensor's C-order chunks as little-endian `dtype` through a BlockWriter; yields bytes per chunk."""
    little = dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype  # safetensors is little-endian
    for chunk in chunks:
        yield writer.write_values(chunk, little)

"""GGUF's header read as data: the magic, version, counts, metadata key/values, tensor infos and the alignment.

Layout (little-endian, or big-endian files whose version reads byte-swapped, as gguf's reader decides):
`GGUF`, version u32 (2 or 3), tensor count u64, key/value count u64; each key/value a string key, a value
type u32 and the value (scalars; a string is a u64 length and its bytes; an array an item type u32, a u64
count and the items, arrays of arrays allowed); then each tensor's info: its name, n_dims u32, n_dims u64
dimensions (fastest first), the ggml type u32 and its offset u64 from the data section, which begins at the
first multiple of `general.alignment` (default 32) after the infos.

Everything the file declares is checked against the bytes it has before anything is read or allocated: a
count, a string length, an array's items, a dimension list. A declared size that cannot fit in what is left
of the file is refused in one line, and all the work (items walked, bytes decoded) is charged to one work
budget the file's size pays for. The header is read through the byte layer in windows (`WINDOW`), never
mapped; long strings and arrays are skipped over, only what is shown is read (`SHOWN_*`). Arrays nested in
arrays are walked with an explicit stack.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.errors import CheckpointFormatError, NotACheckpointError
from ckptview.core.read.bytes.files import FileMap
from ckptview.core.text import elide
from ckptview.core.units import plural

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp and ggml hold at most four
WINDOW = 1 << 20  # bytes read at once while walking the header
WHOLE_ARRAY = 256  # arrays of at most this many scalars or strings are kept whole (per-layer head counts)
SHOWN_ITEMS = 8  # items of a longer array kept to show it (a vocabulary: its size and first tokens)
SHOWN_STRING = 64 << 10  # characters of a metadata string kept (chat templates are a few KiB)
SHOWN_ITEM_STRING = 256  # characters of a string inside an array kept
NAME_IN_ERROR = 80

# GGUF value types: id -> (name, struct code, bytes); STRING and ARRAY have no fixed size.
STRING, ARRAY = 8, 9
SCALARS: dict[int, tuple[str, str, int]] = {
    0: ("uint8", "B", 1), 1: ("int8", "b", 1), 2: ("uint16", "H", 2), 3: ("int16", "h", 2), 4: ("uint32", "I", 4),
    5: ("int32", "i", 4), 6: ("float32", "f", 4), 7: ("bool", "?", 1), 10: ("uint64", "Q", 8), 11: ("int64", "q", 8),
    12: ("float64", "d", 8),
}
TYPE_NAMES = {**{k: v[0] for k, v in SCALARS.items()}, STRING: "string", ARRAY: "array"}
MIN_ITEM = {**{k: v[2] for k, v in SCALARS.items()}, STRING: 8, ARRAY: 12}  # the fewest bytes one item takes
MIN_KV = 8 + 4 + 1  # an empty key, a type, a one-byte value
MIN_TENSOR_INFO = 8 + 4 + 4 + 8  # an empty name, no dimensions, a type, an offset


@dataclass(frozen=True)
class GgufArray:
    """A metadata array: its item type, its length and its items, all of them when it is short and flat
    (`whole`), else the first few (nested arrays as summaries of their own, without items)."""

    item_type: str
    count: int
    head: tuple[Any, ...] = ()

    @property
    def whole(self) -> tuple[Any, ...] | None:
        """Every item, when all are kept (a per-layer head count); None for a summarized array."""
        return self.head if len(self.head) == self.count and self.item_type != "array" else None

    def __repr__(self) -> str:
        shown = ", ".join(repr(v) for v in self.head)
        more = ", ..." if self.count > len(self.head) else ""
        return f"[{self.count:,} x {self.item_type}{': ' + shown + more if shown else ''}]"


@dataclass(frozen=True)
class TensorRecord:
    """One tensor info as the file declares it (dims fastest first, offset from the data section)."""

    name: str
    dims: tuple[int, ...]
    type_id: int
    offset: int


@dataclass
class GgufHeader:
    """What a GGUF header declares."""

    version: int
    byte_order: str  # "little" or "big"
    metadata: dict[str, Any] = field(default_factory=dict)  # key -> value (str, number, bool, GgufArray)
    types: dict[str, str] = field(default_factory=dict)  # key -> its GGUF type ("uint32", "array[string]")
    tensors: list[TensorRecord] = field(default_factory=list)
    alignment: int = DEFAULT_ALIGNMENT
    data_offset: int = 0  # where the data section begins in the file
    header_bytes: int = 0  # bytes of the header before the alignment padding


class _Cursor:
    """A position in the file and a window of its bytes; every length is checked against the file's size."""

    def __init__(self, fmap: FileMap, size: int, order: str) -> None:
        self.fmap, self.size, self.order = fmap, size, order
        self.pos = 0
        self.base = 0
        self.buf = b""

    def left(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str) -> None:
        """Raise (one line) unless `n` more bytes lie in the file at the position."""
        if n > self.size - self.pos:
            raise CheckpointFormatError(f"GGUF header is truncated: {what} at byte {self.pos:,} needs {n:,} bytes, "
                                        f"the file ends at {self.size:,}")

    def take(self, n: int, what: str) -> bytes:
        """The next `n` bytes (checked), read through the window."""
        self.need(n, what)
        start = self.pos - self.base
        if start < 0 or start + n > len(self.buf):
            length = min(max(n, WINDOW), self.size - self.pos)
            self.buf = self.fmap.read(self.pos, length)
            self.base = self.pos
            start = 0
        self.pos += n
        return self.buf[start : start + n]

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n

    def unpack(self, code: str, size: int, what: str) -> Any:
        return struct.unpack(self.order + code, self.take(size, what))[0]

    def u32(self, what: str) -> int:
        return int(self.unpack("I", 4, what))

    def u64(self, what: str) -> int:
        return int(self.unpack("Q", 8, what))

    def string(self, what: str, keep: int) -> str:
        """A GGUF string: its first `keep` characters (the rest skipped, said with '...')."""
        length = self.u64(what)
        self.need(length, what)
        if length <= keep:
            return self.take(length, what).decode("utf-8", "backslashreplace")
        text = self.take(keep, what).decode("utf-8", "backslashreplace")
        self.skip(length - keep, what)
        return f"{text}... ({length:,} bytes)"


def read_header(fmap: FileMap, budget: Budget) -> GgufHeader:
    """The header of the GGUF file `fmap`: checked, bounded and charged to `budget` (see the module docstring).
    Raises CheckpointFormatError (one line) for a header the file cannot hold, NotACheckpointError for a file
    that is no GGUF."""
    size = fmap.size
    head = fmap.read(0, 8)
    if len(head) < 8 or head[:4] != MAGIC:
        raise NotACheckpointError("not a GGUF file: no GGUF magic")
    order = "<"
    version = struct.unpack("<I", head[4:8])[0]
    if version & 0xFFFF == 0:  # written on a machine of the other byte order (gguf's reader decides so)
        order, version = ">", struct.unpack(">I", head[4:8])[0]
    if version not in VERSIONS:
        raise CheckpointFormatError(f"GGUF version {version} is not read (versions 2 and 3 are; version 1, of "
                                    "2023, had 32-bit counts)")
    cur = _Cursor(fmap, size, order)
    cur.pos = 8
    n_tensors = cur.u64("the tensor count")
    n_kv = cur.u64("the key/value count")
    if n_kv > cur.left() // MIN_KV:
        raise CheckpointFormatError(f"GGUF header declares {n_kv:,} metadata keys; {cur.left():,} bytes hold "
                                    f"at most {cur.left() // MIN_KV:,}")
    if n_tensors > cur.left() // MIN_TENSOR_INFO:
        raise CheckpointFormatError(f"GGUF header declares {plural(n_tensors, 'tensor')}; {cur.left():,} bytes hold at "
                                    f"most {cur.left() // MIN_TENSOR_INFO:,}")
    header = GgufHeader(version, "little" if order == "<" else "big")
    budget.charge(n_kv + n_tensors, "metadata keys and tensors")
    for _ in range(n_kv):
        key = cur.string("a metadata key", SHOWN_STRING)
        if key in header.metadata:
            raise CheckpointFormatError(f"GGUF metadata key '{elide(key, NAME_IN_ERROR)}' appears twice")
        type_id = cur.u32(f"the type of '{elide(key, NAME_IN_ERROR)}'")
        value, type_name = _value(cur, type_id, key, budget)
        header.metadata[key] = value
        header.types[key] = type_name
    names: set[str] = set()
    for _ in range(n_tensors):
        header.tensors.append(_tensor_info(cur, budget, names))
    header.header_bytes = cur.pos
    alignment = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if "general.alignment" in header.metadata and (
            header.types["general.alignment"] != "uint32" or alignment <= 0 or alignment & (alignment - 1)):
        raise CheckpointFormatError(f"GGUF general.alignment {str(alignment)[:20]} "
                                    f"({header.types['general.alignment']}) is no power of two as a uint32")
    header.alignment = int(alignment)
    header.data_offset = -(-cur.pos // header.alignment) * header.alignment
    return header


def _tensor_info(cur: _Cursor, budget: Budget, names: set[str]) -> TensorRecord:
    name = cur.string("a tensor name", cur.left())
    shown = elide(name, NAME_IN_ERROR)
    if name in names:
        raise CheckpointFormatError(f"GGUF tensor '{shown}' is declared twice")
    names.add(name)
    n_dims = cur.u32(f"the dimension count of '{shown}'")
    if n_dims > MAX_DIMS:
        raise CheckpointFormatError(f"GGUF tensor '{shown}' has {n_dims:,} dimensions; ggml holds at most {MAX_DIMS}")
    budget.charge(1 + n_dims + len(name) // 64, "tensor infos")
    raw = cur.take(8 * n_dims, f"the dimensions of '{shown}'")
    dims = struct.unpack(f"{cur.order}{n_dims}Q", raw)
    elements = 1
    for d in dims:
        elements *= d
    if any(d >= 1 << 63 for d in dims) or elements >= 1 << 63:
        raise CheckpointFormatError(f"GGUF tensor '{shown}' declares {'x'.join(map(str, reversed(dims)))} elements, "
                                    "more than ggml's int64 counts")
    type_id = cur.u32(f"the type of '{shown}'")
    offset = cur.u64(f"the offset of '{shown}'")
    return TensorRecord(name, tuple(dims), type_id, offset)


def _value(cur: _Cursor, type_id: int, key: str, budget: Budget) -> tuple[Any, str]:
    """A metadata value and its GGUF type's name (arrays: "array[item type]")."""
    shown = elide(key, NAME_IN_ERROR)
    if type_id in SCALARS:
        name, code, size = SCALARS[type_id]
        return cur.unpack(code, size, f"the value of '{shown}'"), name
    if type_id == STRING:
        return cur.string(f"the value of '{shown}'", SHOWN_STRING), "string"
    if type_id == ARRAY:
        return _array(cur, key, budget)
    raise CheckpointFormatError(f"GGUF metadata '{shown}' has unknown value type {type_id}")


def _array(cur: _Cursor, key: str, budget: Budget) -> tuple[Any, str]:
    """An array (`GgufArray`): kept whole when short and flat, else summarized; nested arrays walked with an
    explicit stack."""
    shown = elide(key, NAME_IN_ERROR)
    item, count = _array_head(cur, shown, budget)
    type_name = f"array[{TYPE_NAMES[item]}]"
    if item in SCALARS:
        _name, code, size = SCALARS[item]
        kept = count if count <= WHOLE_ARRAY else SHOWN_ITEMS
        raw = cur.take(kept * size, f"the items of '{shown}'")
        items = list(struct.unpack(f"{cur.order}{kept}{code}", raw))
        cur.skip((count - kept) * size, f"the items of '{shown}'")
        return GgufArray(TYPE_NAMES[item], count, tuple(items)), type_name
    if item == STRING:
        strings = _strings(cur, count, shown, WHOLE_ARRAY if count <= WHOLE_ARRAY else SHOWN_ITEMS)
        return GgufArray("string", count, tuple(strings)), type_name
    # Arrays of arrays: each nested array walked to its end; the first few of the outer one summarized.
    heads: list[GgufArray] = []
    stack = [count]  # items left at each open level
    while stack:
        if stack[-1] == 0:
            stack.pop()
            continue
        stack[-1] -= 1
        inner, inner_count = _array_head(cur, shown, budget)
        if len(stack) == 1 and len(heads) < SHOWN_ITEMS:
            heads.append(GgufArray(TYPE_NAMES[inner], inner_count))
        if inner in SCALARS:
            cur.skip(inner_count * SCALARS[inner][2], f"the items of '{shown}'")
        elif inner == STRING:
            _strings(cur, inner_count, shown, 0)
        else:
            budget.charge(1, "nested metadata arrays")
            stack.append(inner_count)
    return GgufArray("array", count, tuple(heads)), type_name


def _array_head(cur: _Cursor, shown: str, budget: Budget) -> tuple[int, int]:
    """(item type, count) of an array, the count checked against the bytes left and charged."""
    item = cur.u32(f"the item type of '{shown}'")
    if item not in TYPE_NAMES:
        raise CheckpointFormatError(f"GGUF metadata '{shown}' holds an array of unknown type {item}")
    count = cur.u64(f"the length of '{shown}'")
    least = MIN_ITEM[item]
    if count > cur.left() // least:
        raise CheckpointFormatError(f"GGUF metadata '{shown}' declares {plural(count, 'item')} of {TYPE_NAMES[item]} "
                                    f"(at least {least} bytes each); {cur.left():,} bytes are left in the file")
    budget.charge(count if item in (STRING, ARRAY) else 1 + count // 4096, "metadata array items")
    return item, count


def _strings(cur: _Cursor, count: int, shown: str, keep: int) -> list[str]:
    """Walk `count` strings of an array; the first `keep` of them returned (each at most SHOWN_ITEM_STRING)."""
    what = f"the strings of '{shown}'"
    out = [cur.string(what, SHOWN_ITEM_STRING) for _ in range(min(keep, count))]
    # The rest only walked (a vocabulary: 150,000 lengths), straight from the window.
    length_at = struct.Struct(cur.order + "Q").unpack_from
    pos, base, buf, size = cur.pos, cur.base, cur.buf, cur.size
    for _ in range(count - len(out)):
        start = pos - base
        if start < 0 or start + 8 > len(buf):
            cur.pos = pos
            cur.need(8, what)
            buf, base, start = cur.fmap.read(pos, min(WINDOW, size - pos)), pos, 0
            cur.buf, cur.base = buf, base
        pos += 8
        length = length_at(buf, start)[0]
        if length > size - pos:
            cur.pos = pos
            cur.need(length, what)
        pos += length
    cur.pos = pos
    return out

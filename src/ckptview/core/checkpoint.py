"""The inert description of a checkpoint: a tree of nodes, tensors and the storages behind them.

Nothing here reads tensor bytes; `ckptview.core.read.values.reading` does that on demand.

A quantized checkpoint stores each quantized weight as parts (GPTQ's `qweight`, `qzeros`, `scales`,
`g_idx`; FP8's codes and `weight_scale_inv`). The open adds the **logical tensor** beside them
(`ckptview.core.read.quant`): a `TensorInfo` with the weight's real shape, `dtype` the dtype its values are
read in (float32), `quant` its `Quantization` facts, and a storage whose byte source dequantizes the parts
in bounded blocks; each part keeps its node and is marked `part_of` the logical tensor's name.
`Checkpoint.tensors()` lists the logical tensors and leaves the parts out (so every figure sees the real
values); `tensors(with_parts=True)` lists both, each logical tensor before its parts.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol, SupportsIndex

from ckptview.core import dtypes
from ckptview.core.gc_policy import paused_gc

PathKey = str | int


class ReprKey(str):
    """A path component written as the repr() of a key that was neither a str nor an int in the file
    (2.5, ('a', 1)): it reads and prints as that text, but is no module path (no split at its dots)."""

    __slots__ = ()
NodeKind = Literal["dict", "list", "tuple", "set", "object", "tensor", "value"]


class ByteSource(Protocol):
    """Where a storage's bytes live; `open_buffer` maps or reads them only when called."""

    def describe(self) -> str: ...

    def open_buffer(self) -> memoryview: ...


@dataclass(eq=False, slots=True, repr=False)
class Storage:
    """One storage record: a flat run of `numel` elements of `dtype` saved from `device`."""

    key: str
    dtype: str
    numel: int
    device: str = "cpu"
    source: ByteSource | None = None
    byteorder: str = "little"
    # Set by the reader when the record is absent or cannot hold `nbytes`.
    broken: str | None = None

    @property
    def nbytes(self) -> int:
        return self.numel * dtypes.itemsize(self.dtype)

    def __repr__(self) -> str:
        # Shown as a value when a file saves a storage itself (torch.save(t.untyped_storage())).
        broken = f", broken: {self.broken}" if self.broken else ""
        return (f"storage '{self.key}' of {self.numel} x {self.dtype} ({self.nbytes} bytes) "
                f"saved on {self.device}{broken}")


_NO_EXTRA: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Quantization:
    """What a logical tensor of a quantized checkpoint is made of: the scheme and its facts, the parts.

    Inert facts only (`ckptview.core.read.quant` recognises the scheme and dequantizes). `problem` is set
    when the scheme is recognised but the values cannot be computed (a scale missing or of the wrong
    shape, a scheme recognised but not decoded): the tensor is then marked broken with it, its parts listed.
    """

    scheme: str
    """The registry's name of the scheme ("fp8", "gptq", "awq", "mxfp4", "nvfp4", "bnb-nf4", ...)."""
    label: str
    """For a person: "int4 GPTQ, group 128, act-order", "fp8 e4m3, block 128x128"."""
    parts: tuple[tuple[str, str], ...]
    """(role, stored tensor name) of each part, the codes first: (("qweight", "x.qweight"), ...)."""
    stored_bytes: int
    """Bytes the parts store (what the file holds for this tensor)."""
    bits: float | None = None
    """Bits of one code (4 for int4 and fp4, 8 for fp8), where the scheme has one width."""
    group_size: int | None = None
    """Weights sharing one scale along the input dimension, where the scheme groups them."""
    bits_per_weight: float = 0.0
    """Stored bits of all the parts per logical weight (4.25 for int4 in groups of 128 with fp16 scales)."""
    dtype: str | None = None
    """The dtype of the model the library builds from it (the config's `torch_dtype`), where known."""
    facts: Mapping[str, Any] = field(default_factory=lambda: _NO_EXTRA)
    """Scheme-specific facts (block shape, format, symmetric, act-order, ...), plain JSON values."""
    problem: str | None = None
    """Why the values cannot be computed, in one line; None when they can."""

    def part_names(self) -> list[str]:
        """The stored tensors' names, in `parts` order."""
        return [name for _role, name in self.parts]

    def to_json(self) -> dict[str, Any]:
        """The `info --json` object of a logical tensor's `"quantization"` (the facts first, then the parts)."""
        out: dict[str, Any] = {"scheme": self.scheme, "label": self.label, "bits": self.bits,
                               "group_size": self.group_size, "bits_per_weight": self.bits_per_weight,
                               "dtype": self.dtype, "stored_bytes": self.stored_bytes}
        for key, value in self.facts.items():
            out.setdefault(key, value)
        out["parts"] = self.part_names()
        out["roles"] = {role: name for role, name in self.parts}
        if self.problem is not None:
            out["problem"] = self.problem
        return out


class TensorInfo:
    """A tensor as the file describes it: a strided view over a Storage.

    Written out rather than a dataclass: slots keep it ~300 bytes smaller (a listing holds 100,000 of
    them), and `__weakref__` stays, because the window caches results in weak dictionaries keyed by it
    (`dataclass(slots=True, weakref_slot=True)` needs Python 3.11). Equality is identity.
    """

    __slots__ = ("__weakref__", "_extra", "broken", "dtype", "is_parameter", "layout", "offset", "part_of",
                 "quant", "requires_grad", "shape", "storage", "stride")

    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # storage offset, in elements of `dtype`
    storage: Storage | None
    requires_grad: bool
    is_parameter: bool
    layout: str
    broken: str | None
    quant: Quantization | None
    """Set on the logical tensor of a quantized weight (its values are the dequantized weight's)."""
    part_of: str | None
    """Set on a stored part of a quantized weight: the logical tensor's name."""

    def __init__(self, dtype: str, shape: tuple[int, ...], stride: tuple[int, ...], offset: int,
                 storage: Storage | None, requires_grad: bool = False, is_parameter: bool = False,
                 layout: str = "strided", extra: Mapping[str, Any] | None = None, broken: str | None = None) -> None:
        self.dtype, self.shape, self.stride, self.offset, self.storage = dtype, shape, stride, offset, storage
        self.requires_grad, self.is_parameter, self.layout = requires_grad, is_parameter, layout
        # Most tensors have none: no empty dict each (8 MB at 100,000); a given mapping is copied.
        self._extra: dict[str, Any] | None = dict(extra) if extra else None
        self.broken = broken
        self.quant: Quantization | None = None
        self.part_of: str | None = None

    @property
    def extra(self) -> Mapping[str, Any]:
        """Anything else the reader learned (quantization scale/zero point, shard layout, rebuild
        function); read-only: `set_extra` adds to it."""
        extra = self._extra
        return _NO_EXTRA if extra is None else MappingProxyType(extra)

    def set_extra(self, key: str, value: Any) -> None:
        if self._extra is None:
            self._extra = {}
        self._extra[key] = value

    def __repr__(self) -> str:
        return (f"TensorInfo(dtype={self.dtype!r}, shape={self.shape!r}, stride={self.stride!r}, "
                f"offset={self.offset!r}, storage={self.storage!r}, requires_grad={self.requires_grad!r}, "
                f"is_parameter={self.is_parameter!r}, layout={self.layout!r}, extra={dict(self.extra)!r}, "
                f"broken={self.broken!r}{f', quant={self.quant!r}' if self.quant else ''}"
                f"{f', part_of={self.part_of!r}' if self.part_of else ''})")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the logical tensor (numel x itemsize), whatever the storage holds; for the logical tensor
        of a quantized weight, the bytes its parts store (what the file holds for it)."""
        if self.quant is not None:
            return self.quant.stored_bytes
        return self.numel * dtypes.itemsize(self.dtype)

    @property
    def device(self) -> str:
        return self.storage.device if self.storage is not None else self.extra.get("device", "meta")

    @property
    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride), strict=False):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


# Where a pickled nn.Module held a tensor, set by the tree builder in `TensorInfo.extra[MODULE_PART]`:
# "parameter", "buffer" or "non-persistent buffer" (a buffer its module leaves out of `state_dict()`).
MODULE_PART = "module_part"


@dataclass(eq=False, slots=True)
class Node:
    """One item of the checkpoint tree: a container, a tensor or a plain value."""

    key: PathKey
    kind: NodeKind
    type_name: str = ""
    # Leaves (most nodes) share one empty tuple; `add` gives a node its own list on the first child.
    children: list[Node] | tuple[()] = ()
    tensor: TensorInfo | None = None
    value: Any = None
    parent: Node | None = field(default=None, repr=False)

    @property
    def path(self) -> tuple[PathKey, ...]:
        parts: list[PathKey] = []
        node: Node | None = self
        while node is not None and node.parent is not None:
            parts.append(node.key)
            node = node.parent
        return tuple(reversed(parts))

    @property
    def name(self) -> str:
        return join_path(self.path)

    def add(self, child: Node) -> Node:
        child.parent = self
        if self.children:
            self.children.append(child)
        else:
            self.children = [child]
        return child

    def walk(self) -> Iterator[Node]:
        """This node and every descendant, depth first, in file order (iterative: no recursion limit)."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


# Module levels a dotted name is split into for display and module figures (`a.b.c.weight`: 3). A name of
# 100,000 dots split whole costs 100,000 prefixes of up to its full length (gigabytes); past this depth the
# rest of the name's module path is one level.
MAX_MODULE_DEPTH = 256


def module_prefixes(name: str) -> list[str]:
    """The module paths a dotted name lies in, outermost first ('a', 'a.b' for 'a.b.weight'): at most
    `MAX_MODULE_DEPTH`, the last one then the whole path before the name's last dot."""
    out: list[str] = []
    pos = name.find(".")
    while pos > 0 and len(out) < MAX_MODULE_DEPTH - 1:
        out.append(name[:pos])
        pos = name.find(".", pos + 1)
    last = name.rfind(".")
    if pos > 0 and last > 0:
        out.append(name[:last])
    return out


def join_path(path: tuple[PathKey, ...] | list[PathKey]) -> str:
    """The contract's tensor name: path components joined by '.'."""
    return ".".join(map(str, path))


@dataclass(eq=False, slots=True)  # not frozen: a frozen dataclass costs 4x to build, 100,000 times per listing
class TensorEntry:
    """A tensor with its contract name and path, as `Checkpoint.tensors()` lists it (read-only by convention)."""
    name: str
    path: tuple[PathKey, ...]
    info: TensorInfo
    node: Node


MAX_WARNINGS = 100


class BoundedWarnings(list[str]):
    """A checkpoint's warnings: the first MAX_WARNINGS kept, the rest counted in a last "... and N more".

    A hostile file can produce a million warnings (one per broken entry); the list stays small whatever
    a reader appends, and every reader gets the same bound by appending to `Checkpoint.warnings`.
    """

    def __init__(self, items: Any = (), limit: int = MAX_WARNINGS) -> None:
        super().__init__()
        self.limit = limit
        self.dropped = 0
        self.dropped_broken = 0  # of those, "tensor '...' is broken: ..." lines (counted apart on open)
        self.extend(items)

    def kept(self) -> list[str]:
        """The warnings kept, without the "... and N more" line."""
        return list(self[:-1] if self.dropped else self)

    def _summary(self) -> str:
        return f"... and {self.dropped} more warning{'s' if self.dropped != 1 else ''}"

    def append(self, item: str) -> None:
        """Keep `item` while under the limit, else count it."""
        kept = len(self) - (1 if self.dropped else 0)
        if kept < self.limit:
            if self.dropped:
                super().insert(kept, item)
            else:
                super().append(item)
            return
        self.dropped += 1
        if item.startswith("tensor '") and " is broken: " in item:
            self.dropped_broken += 1
        if self.dropped == 1:
            super().append(self._summary())
        else:
            self[-1] = self._summary()

    def extend(self, items: Any) -> None:
        """Append each of `items` (bounded)."""
        for item in items:
            self.append(item)

    def insert(self, index: SupportsIndex, item: str) -> None:
        """Insert `item` (a leading summary line); the last kept warning is counted instead when full."""
        kept = len(self) - (1 if self.dropped else 0)
        super().insert(min(operator.index(index), kept), item)
        if kept + 1 > self.limit:
            super().pop(kept)
            self.dropped += 1
            if self.dropped == 1:
                super().append(self._summary())
            else:
                self[-1] = self._summary()

    # list.__iadd__ takes any iterable where list.__add__ takes only lists: typeshed silences the same.
    def __iadd__(self, items: Iterable[str]) -> BoundedWarnings:  # type: ignore[override,misc]
        self.extend(items)
        return self


class OpenFile(Protocol):
    """A file a checkpoint holds open (the byte layer's `FileMap`, local or remote)."""

    @property
    def path(self) -> str: ...

    def changed(self) -> str | None:
        """What changed on disk since the file was opened, or None."""
        ...

    def close(self) -> None: ...


class TakenIdentity(Protocol):
    """What an open recorded of a file it did not keep open (the byte layer's `FileIdentity`)."""

    def changed_at(self, path: str) -> str | None:
        """What changed at `path` since the identity was taken, or None."""
        ...


class OpenFiles:
    """The files a checkpoint holds open: their one owner, closed with the checkpoint.

    Readers hand over what they opened (a list of file maps, or an iterable evaluated when needed: a DCP
    folder opens its files on first read); composite readers (sharded folders, training folders) hand over
    their parts' OpenFiles. Iterating gives every file opened so far.
    """

    def __init__(self, *sources: Iterable[OpenFile]) -> None:
        self._sources = list(sources)

    def add(self, source: Iterable[OpenFile]) -> None:
        """Own the files of `source` too (a list of file maps, or another OpenFiles)."""
        self._sources.append(source)

    def __iter__(self) -> Iterator[OpenFile]:
        return iter([fmap for source in self._sources for fmap in source])

    def changed(self) -> str | None:
        """'PATH: what changed' for the first file that changed on disk since it was opened, else None."""
        for fmap in self:
            if (what := fmap.changed()) is not None:
                return f"{fmap.path}: {what}"
        return None

    def close(self) -> None:
        """Close every file (a map still viewed closes when the view goes)."""
        for fmap in self:
            fmap.close()


class Sharing(Mapping[str, list[str]]):
    """name -> names of the other tensors over the same storage (only tensors that share one).

    Each storage's names are kept once: 30,000 views of one storage are 30,000 names, not 900 million, and a
    tensor's others are listed when asked for. `pairs` says how many (tensor, other) pairs a full listing
    holds, so a caller that lists them all can weigh that first."""

    def __init__(self, groups: list[tuple[str, ...]]) -> None:
        self._group = {name: group for group in groups for name in group}
        self.pairs = sum(len(group) * (len(group) - 1) for group in groups)

    def __getitem__(self, name: str) -> list[str]:
        return [n for n in self._group[name] if n != name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._group)

    def __len__(self) -> int:
        return len(self._group)

    def __contains__(self, name: object) -> bool:
        return name in self._group


@dataclass(eq=False)
class Checkpoint:
    """What a reader found in a file: the tree plus what the file referenced and what looked wrong."""

    path: str
    format: str
    file_size: int
    root: Node
    globals: list[str] = field(default_factory=list)
    unsafe_globals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    files: OpenFiles = field(default_factory=OpenFiles, repr=False)  # what the reader opened, to close
    _tensors: list[TensorEntry] | None = field(default=None, repr=False)
    _by_name: dict[str, TensorInfo] | None = field(default=None, repr=False)
    _sharing: Sharing | None = field(default=None, repr=False)
    _has_parts: bool = field(default=False, repr=False)  # whether the last listing left parts out

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "warnings" and not isinstance(value, BoundedWarnings):
            value = BoundedWarnings(value)  # one bound for every reader, whatever list it built
        object.__setattr__(self, name, value)

    def changed_on_disk(self) -> str | None:
        """What changed on disk since this checkpoint was opened ("PATH: size 10 -> 0 bytes"), else None.

        Cheap (one stat per file), so a window can poll it; reading values of a changed file raises
        `FileChangedError` whether or not anyone asked.
        """
        identities: dict[str, TakenIdentity] = self.metadata.get("_identities", {})
        for path, identity in identities.items():
            if (what := identity.changed_at(path)) is not None:
                return f"{path}: {what}"
        return self.files.changed()

    def tensors(self, with_parts: bool = False) -> list[TensorEntry]:
        """Every tensor in file order, with its contract name and path.

        The stored parts of a quantized weight (`TensorInfo.part_of`) are left out: the logical tensor the
        open added stands for them. `with_parts=True` lists them too, each after its logical tensor."""
        if self._tensors is None:
            self._tensors = self._listing(False)
        if with_parts and self._has_parts:
            return self._listing(True)
        return self._tensors

    def _listing(self, with_parts: bool) -> list[TensorEntry]:
        entries: list[TensorEntry] = []
        append = entries.append
        root = self.root
        if root.kind == "tensor" and root.tensor is not None:
            append(TensorEntry("", (), root.tensor, root))
        # Depth first in file order: a stack of (children left, path, name prefix) per open container,
        # so names and paths grow by one key instead of being joined from the root for every tensor.
        stack: list[tuple[Iterator[Node], tuple[PathKey, ...], str]] = [(iter(root.children), (), "")]
        parts = False
        with paused_gc():
            while stack:
                children, path, prefix = stack[-1]
                for child in children:
                    key = child.key
                    tensor = child.tensor
                    if child.kind == "tensor" and tensor is not None:
                        if tensor.part_of is None:
                            append(TensorEntry(prefix + str(key), (*path, key), tensor, child))
                        else:
                            parts = True
                            if with_parts:
                                append(TensorEntry(prefix + str(key), (*path, key), tensor, child))
                    if child.children:
                        stack.append((iter(child.children), (*path, key), f"{prefix}{key}."))
                        break
                else:
                    stack.pop()
        if not with_parts:
            self._has_parts = parts
        elif parts:
            entries = _logical_first(entries)
        return entries

    def value_entries(self) -> Iterator[tuple[str, tuple[PathKey, ...], Node]]:
        """(name, path, node) of every non-tensor leaf, in file order, paths built during one walk."""
        root = self.root
        if root.kind == "value":  # the whole file is one value: torch.save(5)
            yield "", (), root
            return
        # As tensors(): (children left, path, name prefix) per open container; tensor leaves cost a check.
        stack: list[tuple[Iterator[Node], tuple[PathKey, ...], str]] = [(iter(root.children), (), "")]
        while stack:
            children, path, prefix = stack[-1]
            for child in children:
                if child.kind == "value":
                    yield prefix + str(child.key), (*path, child.key), child
                elif child.children:
                    key = child.key
                    stack.append((iter(child.children), (*path, key), f"{prefix}{key}."))
                    break
            else:
                stack.pop()

    def values(self) -> list[Node]:
        """Every non-tensor leaf (numbers, strings, None, bools, stubs without state)."""
        return [n for n in self.root.walk() if n.kind == "value"]  # the root too: torch.save(5)

    def tensor(self, name: str) -> TensorInfo:
        """The tensor called `name`; KeyError when absent."""
        if self._by_name is None:
            self._by_name = {}
            for entry in self.tensors():
                self._by_name.setdefault(entry.name, entry.info)  # the first, if a name repeats
        return self._by_name[name]

    def sharing(self) -> Sharing:
        """name -> names of the other tensors over the same storage (only tensors that share one)."""
        if self._sharing is None:
            first: dict[int, str] = {}  # id(storage) -> the first tensor over it
            groups: dict[int, list[str]] = {}  # only storages with two tensors or more get a list
            with paused_gc():
                entries = self.tensors()
                if len({id(e.info.storage) for e in entries}) == len(entries):
                    # Every tensor over a storage of its own (safetensors always; at most one without one).
                    self._sharing = Sharing([])
                    return self._sharing
                for entry in entries:
                    storage = entry.info.storage
                    if storage is not None:
                        key = id(storage)
                        if key in first:
                            groups.setdefault(key, [first[key]]).append(entry.name)
                        else:
                            first[key] = entry.name
                self._sharing = Sharing([tuple(names) for names in groups.values() if len(names) > 1])
        return self._sharing

    def parts_of(self, info: TensorInfo) -> list[TensorEntry]:
        """The stored parts of a logical tensor (`info.quant`), in its `parts` order; [] for any other."""
        if info.quant is None:
            return []
        named = {e.name: e for e in self.tensors(with_parts=True) if e.info.part_of is not None}
        return [named[name] for name in info.quant.part_names() if name in named]

    def drop_caches(self) -> list[Any]:
        """Forget the listing caches (tensors, names, sharing) and return what they held, for a caller that
        frees it a slice at a time (the window closing a tab of 900,000 tensors)."""
        held: list[Any] = [self._tensors] if self._tensors is not None else []
        self._tensors = self._by_name = self._sharing = None
        self._has_parts = False
        return held

    def close(self) -> None:
        """Release mapped files."""
        self.files.close()


def _logical_first(entries: list[TensorEntry]) -> list[TensorEntry]:
    """`entries` with the parts of each logical tensor moved to just after it, in its `parts` order (a part
    whose logical tensor is not listed stays where it is)."""
    logical = {e.name: e.info for e in entries if e.info.quant is not None}
    parts: dict[str, dict[str, TensorEntry]] = {}
    for entry in entries:
        owner = entry.info.part_of
        if owner is not None and owner in logical:
            parts.setdefault(owner, {})[entry.name] = entry
    out: list[TensorEntry] = []
    for entry in entries:
        owner = entry.info.part_of
        if owner is not None and owner in logical:
            continue
        out.append(entry)
        quant = entry.info.quant
        if quant is not None:
            mine = parts.pop(entry.name, {})
            out.extend(mine.pop(name) for name in quant.part_names() if name in mine)
            out.extend(mine.values())
    return out

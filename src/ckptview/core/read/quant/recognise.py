"""Recognise the quantized weights of an opened checkpoint and add their logical tensors to its tree.

`add_logical_tensors(ckpt, config)` runs once per open (the outermost: an index's shards are not looked at
alone, since a weight's parts may lie in two shards). For every scheme (the config's own first) and each of
its anchors, every stored tensor whose name and dtype the anchor matches is a candidate: the parts beside it
are gathered by name and the scheme decides. A recognised weight gets a tensor node of its own, placed in
its parts' container just before the first of them, holding the logical `TensorInfo` (its storage's source
a `QuantSource`, `quant` its facts, `broken` the problem when it cannot be computed); each part is marked
`part_of` it. A part is claimed once; a tensor already marked (a training folder's part opened before) is
left as it is. Every candidate looked at is charged to a budget the file's bytes pay for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Node, Quantization, Storage, TensorEntry, TensorInfo
from ckptview.core.read.quant.config import QuantConfig
from ckptview.core.read.quant.protocol import Anchor, Decoder, Found, Recognised
from ckptview.core.read.quant.registry import ordered, schemes
from ckptview.core.read.quant.source import QuantSource

__all__ = ["add_logical_tensors", "logical_tensor"]

LOGICAL_DTYPE = "float32"


@dataclass
class _Logical:
    name: str
    key: str
    container: Node
    parts: frozenset[int]  # id() of its parts' nodes: it goes just before the first of them in its container
    info: TensorInfo


# Tensor subclasses of quantization libraries a pickle names: recognised, not decoded (their classes are code
# the safe reader never imports; their stored parts are listed as the file holds them).
SUBCLASS_LIBRARIES = {"torchao.": "torchao", "optimum.quanto.": "optimum-quanto", "hqq.": "hqq"}


def subclass_note(ckpt: Checkpoint) -> str | None:
    """One line when the file's pickle names quantized tensor subclasses ckptview does not decode, else None."""
    named = sorted({g for g in ckpt.globals for prefix in SUBCLASS_LIBRARIES if g.startswith(prefix)})
    if not named:
        return None
    library = next(lib for prefix, lib in SUBCLASS_LIBRARIES.items() if named[0].startswith(prefix))
    classes = ", ".join(g.rsplit(".", 1)[-1] for g in named[:3]) + (", ..." if len(named) > 3 else "")
    return (f"{library} quantized tensors ({classes}) are recognised but not decoded: their stored parts are "
            "listed as the file holds them")


def add_logical_tensors(ckpt: Checkpoint, read_config: Callable[[], QuantConfig]) -> int:
    """Add the logical tensor of every quantized weight of `ckpt` (recognised by its config and the parts'
    names and dtypes) and mark their parts; the number of weights added. `read_config` is called only when a
    tensor looks like a part (a remote folder of plain weights costs no request for its config.json). A
    pickle naming tensor subclasses of a quantization library ckptview does not decode gets one warning line
    saying so."""
    if (note := subclass_note(ckpt)) is not None and note not in ckpt.warnings:
        ckpt.warnings.append(note)
    entries = ckpt.tensors()
    anchors = [(scheme, anchor) for scheme in schemes() for anchor in scheme.ANCHORS]
    by_dtype: dict[str, tuple[str, ...]] = {}  # a dtype an anchor names -> the suffixes its anchors end with
    for _s, anchor in anchors:
        for dtype in anchor.dtypes or ():  # bounded: the registry's anchors, written in ckptview
            by_dtype[dtype] = (*by_dtype.get(dtype, ()), anchor.suffix)
    by_suffix = tuple({a.suffix for _s, a in anchors if a.dtypes is None and a.suffix})
    budget = Budget.for_stored(ckpt.file_size, "recognising quantized weights")
    candidates = [e for e in entries if e.info.part_of is None and e.info.quant is None
                  and _could_be_part(e, by_dtype, by_suffix)]
    budget.charge(len(entries), "tensors looked at")
    if not candidates:
        return 0
    config = read_config()
    anchors = [(scheme, anchor) for scheme in ordered(config) for anchor in scheme.ANCHORS]  # its own first
    by_name: dict[str, TensorEntry] = {}
    for entry in entries:
        by_name.setdefault(entry.name, entry)
    claimed: set[int] = set()  # id(TensorInfo) of the parts claimed so far
    made: list[_Logical] = []
    for scheme, anchor in anchors:
        for entry in candidates:
            budget.charge(1 + len(anchor.parts), "parts looked up")
            if id(entry.info) in claimed or not _matches(entry, anchor):
                continue
            found = _found(entry, anchor, by_name, claimed)
            recognised = scheme.recognise(found, config)
            if recognised is None:
                continue
            logical = _place(found, entry, recognised, by_name)
            if logical is None:
                continue
            for _part_name, info in found.parts.values():
                claimed.add(id(info))
                info.part_of = found.logical_name
            made.append(logical)
    if made:
        _insert(made)
        ckpt.drop_caches()
    return len(made)


def _could_be_part(entry: TensorEntry, by_dtype: Mapping[str, tuple[str, ...]], by_suffix: tuple[str, ...]) -> bool:
    """Whether some scheme's anchor could name `entry` (its dtype with a suffix of that dtype's anchors)."""
    suffixes = by_dtype.get(entry.info.dtype)
    return bool(suffixes and entry.name.endswith(suffixes)) or bool(by_suffix and entry.name.endswith(by_suffix))


def _matches(entry: TensorEntry, anchor: Anchor) -> bool:
    return entry.name.endswith(anchor.suffix) and (anchor.dtypes is None or entry.info.dtype in anchor.dtypes) \
        and len(entry.name) > len(anchor.suffix)


def _found(entry: TensorEntry, anchor: Anchor, by_name: Mapping[str, TensorEntry], claimed: set[int]) -> Found:
    stem = entry.name[: len(entry.name) - len(anchor.suffix)]
    parts: dict[str, tuple[str, TensorInfo]] = {anchor.role: (entry.name, entry.info)}
    for role, suffix in anchor.parts.items():
        other = by_name.get(stem + suffix)
        if other is not None and other.info is not entry.info and id(other.info) not in claimed \
                and other.info.part_of is None and other.info.quant is None:
            parts[role] = (other.name, other.info)
    return Found(stem, stem + anchor.logical, parts, anchor)


def _place(found: Found, anchor_entry: TensorEntry, recognised: Recognised,
           by_name: Mapping[str, TensorEntry]) -> _Logical | None:
    """The logical tensor's node and where it goes: in the anchor part's container, under the key that
    gives the logical name; None when no key there can (the parts' names span containers)."""
    node = anchor_entry.node
    container = node.parent
    if container is None:
        return None
    prefix = anchor_entry.name[: len(anchor_entry.name) - len(str(node.key))]
    name = found.logical_name
    if not name.startswith(prefix) or len(name) == len(prefix):
        return None
    info = logical_tensor(name, recognised.shape, recognised.quant, recognised.decoder)
    nodes = frozenset(id(by_name[part].node) for part, _info in found.parts.values() if part in by_name) | {id(node)}
    return _Logical(name, name[len(prefix):], container, nodes, info)


def logical_tensor(name: str, shape: tuple[int, ...], quant: Quantization, decoder: Decoder | None) -> TensorInfo:
    """The logical tensor of a quantized weight: float32 values of `shape` read through `decoder` (a
    `QuantSource`), `quant` its facts; broken with `quant.problem` (or without a decoder) when they cannot be
    computed. A format that stores quantized tensors itself (GGUF) makes its tensors with this too."""
    numel = 1
    for size in shape:
        numel *= size
    source = None if decoder is None else QuantSource(shape, decoder, quant.label, quant.stored_bytes)
    storage = Storage(key=name, dtype=LOGICAL_DTYPE, numel=numel, source=source)
    broken = quant.problem or (None if decoder is not None else f"cannot read values: {quant.label} is not decoded")
    info = TensorInfo(LOGICAL_DTYPE, shape, _c_strides(shape), 0, storage, broken=broken)
    info.quant = quant
    return info


def _insert(made: list[_Logical]) -> None:
    """Each logical node into its container just before the first of its parts there (each container
    rebuilt once)."""
    by_container: dict[int, tuple[Node, dict[int, list[_Logical]]]] = {}
    for logical in made:
        _node, owners = by_container.setdefault(id(logical.container), (logical.container, {}))
        for part in logical.parts:  # bounded: a scheme's few parts per weight
            owners.setdefault(part, []).append(logical)
    for container, owners in by_container.values():  # bounded: each child and each logical node once
        children: list[Node] = []
        placed: set[int] = set()
        for child in container.children:
            for logical in owners.get(id(child), ()):
                if id(logical) not in placed:
                    placed.add(id(logical))
                    new = Node(logical.key, "tensor", "Tensor", tensor=logical.info)
                    new.parent = container
                    children.append(new)
            children.append(child)
        container.children = children


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides: list[int] = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))

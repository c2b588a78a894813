"""Line up the tensor names of two checkpoints despite wrapper prefixes (Qt-free, no torch).

Two kinds of prefix hide the same weights under different names:

- a **container**: the model state dict nested in a training checkpoint, a root dict key such as
  ``model_state_dict`` or Lightning's ``state_dict`` (path ``("state_dict", "model.fc.weight")``, so the
  name starts with ``state_dict.``). Tensors outside it (optimizer state, EMA buffers, ...) are *extras*.
- **wrappers**: leading components of the state-dict keys themselves, added by the code that saved them:
  ``module.`` (DataParallel/DDP), ``_orig_mod.`` (``torch.compile``), ``model.`` (Lightning modules, HF
  heads), ``state_dict.``, ``net.``.

:func:`align` tries every container/wrapper combination that occurs on each side and keeps the pair of
prefixes that matches the most names (the shortest on a tie, so nothing is stripped needlessly). The
helpers :func:`common_wrapper_prefix`, :func:`strip_prefixes` and :func:`match_prefixes` are public for
other code that must match a state dict against a model (loading for a forward pass).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ckptview.core.checkpoint import MODULE_PART

# Root dict keys that hold a model's state dict in a training checkpoint, most specific first.
CONTAINER_KEYS = ("model_state_dict", "state_dict", "model", "model_state", "module", "net", "network")
# Leading key components that wrappers add (a chain of at most MAX_WRAPPERS of them is tried).
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "model.", "state_dict.", "model_state_dict.", "net.")
MAX_WRAPPERS = 3
# A training folder's model entry: the weight file a library writes (`model.safetensors`, `pytorch_model.bin`,
# `model.safetensors.index.json`, `model-*.safetensors` for shards without an index).
_MODEL_FILE = re.compile(r"^(model|pytorch_model|diffusion_pytorch_model|adapter_model)([.-].*)?\.(safetensors|bin|json)$")

T = TypeVar("T")


class Named(Protocol):
    """Anything with a contract name and a tree path (``TensorEntry`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> tuple[Any, ...]: ...


@dataclass
class AlignedPair:
    """One row of a comparison: the key both sides are matched on and the entry of each side (or None)."""

    key: str
    a: Any = None
    b: Any = None
    extra: bool = False  # outside the model state dict (optimizer state, ...), matched by full name
    tied_to: str | None = None  # a one-sided name matched to the other side's twin over the same storage


@dataclass
class Alignment:
    """How two checkpoints were lined up."""

    strip_a: str
    strip_b: str
    pairs: list[AlignedPair]
    mapping: list[tuple[str, str]] = field(default_factory=list)
    # Extras of one side that were not compared because the other side has no extras at all.
    not_compared_a: list[str] = field(default_factory=list)
    not_compared_b: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------
# Public helpers on plain names.


def strip_prefix(name: str, prefix: str) -> str:
    """``name`` without ``prefix`` when it starts with it, else unchanged."""
    return name[len(prefix):] if prefix and name.startswith(prefix) else name


def wrapper_chain(name: str) -> str:
    """The leading run of known wrapper components of ``name`` (``"module._orig_mod."``), at most 3."""
    chain = ""
    for _ in range(MAX_WRAPPERS):
        rest = name[len(chain):]
        step = next((w for w in WRAPPER_PREFIXES if rest.startswith(w) and len(rest) > len(w)), None)
        if step is None:
            break
        chain += step
    return chain


def common_wrapper_prefix(names: Iterable[str]) -> str:
    """The wrapper chain every name starts with (``"module."`` for a DDP state dict), "" if none."""
    common: str | None = None
    for name in names:
        chain = wrapper_chain(name)
        if common is None:
            common = chain
        else:
            # Longest common run of whole components.
            parts_a, parts_b = common.split("."), chain.split(".")
            keep = []
            for x, y in zip(parts_a, parts_b, strict=False):
                if x != y or not x:
                    break
                keep.append(x)
            common = "".join(p + "." for p in keep)
        if not common:
            return ""
    return common or ""


def strip_prefixes(mapping: Mapping[str, T], prefix: str | None = None) -> tuple[dict[str, T], str]:
    """``mapping`` with ``prefix`` removed from the keys that have it; auto-detected when None.

    Returns the new dict and the prefix removed. With auto-detection only a chain shared by every key
    is removed (``module.`` of DDP, ``_orig_mod.`` of torch.compile, ...), so no two keys can collide.
    """
    if prefix is None:
        prefix = common_wrapper_prefix(mapping)
    out: dict[str, T] = {}
    for key, value in mapping.items():
        new = strip_prefix(key, prefix)
        if new in out:  # stripping would merge two keys: keep names as they are
            return dict(mapping), ""
        out[new] = value
    return out, prefix


def match_prefixes(names_a: Sequence[str], names_b: Sequence[str], mapping: Sequence[tuple[str, str]] = (),
                   fixed_a: str | None = None, fixed_b: str | None = None) -> tuple[str, str, int]:
    """The wrapper prefixes to strip from each side so that the most names match: (strip_a, strip_b, matches).

    ``fixed_a``/``fixed_b`` pin one side's prefix. A prefix whose removal would merge two names is never
    chosen. On a tie the shortest prefixes win, so nothing is stripped needlessly.
    """
    best = ("", "", -1)
    for sa in [fixed_a] if fixed_a is not None else _candidates(names_a):
        keys_a = _stripped(names_a, sa)
        if keys_a is None:
            continue
        keys_a = {apply_mapping(k, mapping) for k in keys_a}
        for sb in [fixed_b] if fixed_b is not None else _candidates(names_b):
            keys_b = _stripped(names_b, sb)
            if keys_b is None:
                continue
            score = len(keys_a & keys_b)
            if score > best[2] or score == best[2] and len(sa) + len(sb) < len(best[0]) + len(best[1]):
                best = (sa, sb, score)
    if best[2] < 0:
        return fixed_a or "", fixed_b or "", 0
    return best


def apply_mapping(key: str, mapping: Sequence[tuple[str, str]]) -> str:
    """Rename ``key`` by the first (a_prefix, b_prefix) rule whose a_prefix it starts with."""
    for pa, pb in mapping:
        if key.startswith(pa):
            return pb + key[len(pa):]
    return key


def parse_mapping(rules: Iterable[str]) -> list[tuple[str, str]]:
    """``["encoder.=backbone.", ...]`` -> ``[("encoder.", "backbone."), ...]``; ValueError on a bad rule."""
    out = []
    for rule in rules:
        if "=" not in rule:
            raise ValueError(f"prefix mapping must look like A_PREFIX=B_PREFIX, not {rule!r}")
        pa, pb = rule.split("=", 1)
        out.append((pa, pb))
    return out


def _candidates(names: Sequence[str]) -> list[str]:
    found = {""}
    for name in names:
        chain = wrapper_chain(name)
        while chain:
            if chain in found:
                break
            found.add(chain)
            chain = chain[: chain[:-1].rfind(".") + 1]  # drop the last component
    return sorted(found, key=len)


def _stripped(names: Sequence[str], prefix: str) -> set[str] | None:
    keys = {strip_prefix(n, prefix) for n in names}
    return keys if len(keys) == len(set(names)) else None  # None: stripping merges names


# ---------------------------------------------------------------------------------------------------
# Aligning two checkpoints' tensor entries.


def find_container(entries: Sequence[Named]) -> str | None:
    """The root key holding the model state dict of a training checkpoint (or training folder), or None.

    A pickled module (``torch.save(model)``) has none: its top-level keys (``model``, ``lm_head``) are
    its own submodules, the model itself.
    """
    if _pickled_module(entries):
        return None
    roots = {e.path[0] for e in entries if len(e.path) >= 2 and isinstance(e.path[0], str)}
    found = next((k for k in CONTAINER_KEYS if k in roots), None)
    if found is None:  # a training folder: the model's weight file is one top-level entry
        files = sorted(k for k in roots if _MODEL_FILE.match(k))
        found = files[0] if files else None
    return found


def _pickled_module(entries: Sequence[Named]) -> bool:
    """Whether the file's root object is an nn.Module (the reader marks the tensors of a pickled module)."""
    node = getattr(entries[0], "node", None) if entries else None
    if node is None:
        return False
    while node.parent is not None:
        node = node.parent
    if node.kind != "object":
        return False
    infos = (getattr(e, "info", None) for e in entries)
    return any(info is not None and MODULE_PART in info.extra for info in infos)


def _split_side(entries: Sequence[Named], strip: str | None) -> tuple[str | None, list[Any], list[Any]]:
    container = find_container(entries)
    if strip is not None and container is not None and not strip.startswith(container + "."):
        container = None  # a manual prefix outside the container: every tensor is comparable
    if container is None:
        return None, list(entries), []
    inside = [e for e in entries if len(e.path) >= 2 and e.path[0] == container]
    outside = [e for e in entries if not (len(e.path) >= 2 and e.path[0] == container)]
    return container, inside, outside


def _unique(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, entry in items:
        k, n = key, 2
        while k in out:  # "a.b" as one dict key and as a nested path give the same name
            k, n = f"{key}#{n}", n + 1
        out[k] = entry
    return out


def align(entries_a: Sequence[Named], entries_b: Sequence[Named], strip_a: str | None = None,
          strip_b: str | None = None, mapping: Sequence[tuple[str, str]] = ()) -> Alignment:
    """Match the tensors of A and B by name; ``strip_*`` None means detect, "" means strip nothing.

    ``mapping`` renames A's keys (after stripping) by prefix so they meet B's: ``[("encoder.", "backbone.")]``.
    The result's pairs are in model order: A's order, with B-only tensors placed after their B neighbour.
    """
    cont_a, inside_a, outside_a = _split_side(entries_a, strip_a)
    cont_b, inside_b, outside_b = _split_side(entries_b, strip_b)
    names_a = [_inner(e.name, cont_a) for e in inside_a]
    names_b = [_inner(e.name, cont_b) for e in inside_b]
    chain_a = _manual_chain(strip_a, cont_a)
    chain_b = _manual_chain(strip_b, cont_b)
    if chain_a is None or chain_b is None:
        auto_a, auto_b, _ = match_prefixes(names_a, names_b, mapping, chain_a, chain_b)
        chain_a = auto_a if chain_a is None else chain_a
        chain_b = auto_b if chain_b is None else chain_b
    model_a = _unique((apply_mapping(strip_prefix(n, chain_a), mapping), e) for n, e in zip(names_a, inside_a, strict=True))
    model_b = _unique((strip_prefix(n, chain_b), e) for n, e in zip(names_b, inside_b, strict=True))
    pairs = _merge_order(model_a, model_b, extra=False)
    not_a: list[str] = []
    not_b: list[str] = []
    extras_a = _unique((e.name, e) for e in outside_a)
    extras_b = _unique((e.name, e) for e in outside_b)
    if extras_a and extras_b:
        pairs += _merge_order(extras_a, extras_b, extra=True)
    else:
        not_a, not_b = list(extras_a), list(extras_b)
    return Alignment(_full(cont_a, chain_a), _full(cont_b, chain_b), pairs, list(mapping), not_a, not_b)


def _inner(name: str, container: str | None) -> str:
    return name[len(container) + 1:] if container is not None else name


def _full(container: str | None, chain: str) -> str:
    return (container + "." if container is not None else "") + chain


def _manual_chain(strip: str | None, container: str | None) -> str | None:
    if strip is None:
        return None
    return strip[len(container) + 1:] if container is not None else strip


def _merge_order(side_a: dict[str, Any], side_b: dict[str, Any], extra: bool) -> list[AlignedPair]:
    """A's order; each B-only key goes right after the last shared key that precedes it in B."""
    after: dict[str | None, list[str]] = {}
    anchor: str | None = None
    for key in side_b:
        if key in side_a:
            anchor = key
        else:
            after.setdefault(anchor, []).append(key)
    pairs = [AlignedPair(k, None, side_b[k], extra) for k in after.get(None, [])]
    for key, entry in side_a.items():
        pairs.append(AlignedPair(key, entry, side_b.get(key), extra))
        if key in after:
            pairs.extend(AlignedPair(k, None, side_b[k], extra) for k in after[key])
    return pairs

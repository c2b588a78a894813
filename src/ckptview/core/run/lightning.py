"""A Lightning `.ckpt` as data: its version, the LightningModule class it names, and its init arguments.

Read from ckptview's safe listing (no torch, no import). Lightning's own `load_from_checkpoint` is called on a
class the caller already has; only LightningCLI writes the class into the file
(`hyper_parameters["_class_path"]`, with `_instantiator`). A class path that comes from the file is code the
file chooses: importing it needs the user's consent (`--trust`, the window's dialog), like a full pickle, and
happens only in the isolated worker (`core/worker/lightning.py`). With `--model` the class is the user's.

The hyper-parameters travel to the worker as tagged JSON (`encode_value`): dicts, lists, tuples, sets, plain
scalars and the two containers Lightning and argparse put there (`argparse.Namespace`, Lightning's
`AttributeDict`), rebuilt by the worker as those types; anything else (a tensor, another class) is marked
and refused in one line if the class's `__init__` would receive it.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.checkpoint import ReprKey
from ckptview.core.message import Fix, Hint, Message

VERSION_KEY = "pytorch-lightning_version"
HPARAMS_KEY = "hyper_parameters"
HPARAMS_NAME_KEY = "hparams_name"
HPARAMS_TYPE_KEY = "hparams_type"
CLASS_PATH_KEY = "_class_path"
INSTANTIATOR_KEY = "_instantiator"
CLASS_SOURCE = f"{HPARAMS_KEY}.{CLASS_PATH_KEY}"
# Before `hyper_parameters`, Lightning 0.7 kept them under these keys; load_from_checkpoint still reads them.
PAST_HPARAMS_KEYS = ("hparams", "module_arguments")
_CLASS_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
# Containers rebuilt as their own type by the worker, by the dotted name the pickle gives them.
NAMESPACES = ("argparse.Namespace",)
ATTRIBUTE_DICTS = ("lightning.fabric.utilities.data.AttributeDict", "lightning_fabric.utilities.data.AttributeDict",
                   "lightning.pytorch.utilities.parsing.AttributeDict",
                   "pytorch_lightning.utilities.parsing.AttributeDict")
MAX_DEPTH = 64
# Hyper-parameters are a model's settings, not data: past this many values they are not sent to the worker.
MAX_VALUES = 100_000


class LightningRefused(Exception):
    """A Lightning checkpoint ckptview will not build a model from; the message says why, in one line."""


@dataclass
class LightningCheckpoint:
    """What a Lightning checkpoint says about its model, read as data."""

    name: str  # the file's base name, for messages
    version: str
    class_path: str | None  # named by the file (LightningCLI); None: the user must give the class
    hparams: Any = None  # tagged JSON (`encode_value`) of hyper_parameters merged as load_from_checkpoint does
    hparams_name: str | None = None
    hparams_type: str | None = None  # a past checkpoint's type name: the worker wraps the hparams in AttributeDict
    dropped: list[str] = field(default_factory=list)  # keys the worker never passes (_class_path, _instantiator)

    @property
    def class_source(self) -> str:
        """Where the class came from, in the result's `architecture.source`."""
        return CLASS_SOURCE

    def payload(self) -> dict[str, Any]:
        """What the worker's request carries (`request["lightning"]`)."""
        return {"name": self.name, "version": self.version, "class_path": self.class_path,
                "class_source": self.class_source, "hparams": self.hparams, "hparams_name": self.hparams_name,
                "hparams_type": self.hparams_type}

    def consent_line(self) -> Message:
        """The refusal without consent (exit 2), naming the class the worker would import."""
        return Message(f"lightning: {self.name} names class {self.class_path}; importing it runs code chosen by "
                       f"the file", Hint(Fix.TRUST))

    def no_class_line(self) -> Message:
        """The refusal when the file names no class and the user gave none."""
        return Message(f"lightning: {self.name} (Lightning {self.version}) names no LightningModule class (only "
                       f"LightningCLI writes one, in {CLASS_SOURCE}; its init arguments come from {HPARAMS_KEY})",
                       Hint(Fix.MODEL))

    def describe(self) -> str:
        """One line for people."""
        if self.class_path:
            return f"lightning {self.class_path} from {self.class_source}"
        return f"Lightning {self.version} checkpoint, no class named (give the LightningModule below)"


def recognize_lightning(checkpoint: Any, path: str) -> LightningCheckpoint | None:
    """The Lightning facts of an open checkpoint (root dict with `pytorch-lightning_version` and `state_dict`),
    or None when it is not one. Raises LightningRefused for a class path that is not a dotted name."""
    root = checkpoint.root
    if root.kind != "dict":
        return None
    children = {c.key: c for c in root.children if isinstance(c.key, str)}
    version = children.get(VERSION_KEY)
    state = children.get("state_dict")
    if version is None or version.kind != "value" or not isinstance(version.value, str) or state is None \
            or state.kind not in ("dict", "object"):
        return None
    name = os.path.basename(path.rstrip("/")) or path
    merged: list[tuple[Any, Any]] = []  # (key, tagged value) in the order load_from_checkpoint merges them
    hp = children.get(HPARAMS_KEY)
    nodes = itertools.chain.from_iterable(children[k].walk() for k in (*PAST_HPARAMS_KEYS, HPARAMS_KEY)
                                          if k in children)
    if sum(1 for _ in itertools.islice(nodes, MAX_VALUES + 1)) > MAX_VALUES:
        raise LightningRefused(f"lightning: {name}'s {HPARAMS_KEY} hold more values than the "
                               f"{MAX_VALUES:,} ckptview passes as a model's init arguments")
    if hp is not None:
        for key in (*PAST_HPARAMS_KEYS, HPARAMS_KEY):
            node = children.get(key)
            if node is not None and _mapping(node):
                merged += [(c.key, encode_value(c)) for c in node.children]
    class_path = _plain(merged, CLASS_PATH_KEY)
    if class_path is not None and (not isinstance(class_path, str) or not _CLASS_PATH.match(class_path)):
        raise LightningRefused(f"lightning: {name}'s {CLASS_SOURCE} is not a dotted class name: "
                               f"{str(class_path)[:80]!r}")
    pairs = [(k, v) for k, v in merged if k not in (CLASS_PATH_KEY, INSTANTIATOR_KEY)]
    hparams_name = _plain_child(children.get(HPARAMS_NAME_KEY))
    hparams_type = _plain_child(children.get(HPARAMS_TYPE_KEY))
    return LightningCheckpoint(
        name=name, version=version.value, class_path=class_path,
        hparams={"$t": "dict", "items": [[_key(k), v] for k, v in pairs]} if hp is not None else None,
        hparams_name=hparams_name if isinstance(hparams_name, str) else None,
        hparams_type=hparams_type if isinstance(hparams_type, str) else None,
        dropped=[k for k, _ in merged if k in (CLASS_PATH_KEY, INSTANTIATOR_KEY)])


def _mapping(node: Any) -> bool:
    return node.kind == "dict" or (node.kind == "object" and node.type_name in NAMESPACES + ATTRIBUTE_DICTS)


def _plain(pairs: list[tuple[Any, Any]], key: str) -> Any:
    found = [v for k, v in pairs if k == key]
    return found[-1] if found else None


def _plain_child(node: Any) -> Any:
    return node.value if node is not None and node.kind == "value" else None


def _key(key: Any) -> Any:
    return key if isinstance(key, (str, int)) and not isinstance(key, ReprKey) else {"$t": "refused", "why": f"a key is a {type(key).__name__}"}


def encode_value(node: Any, depth: int = 0) -> Any:
    """A node of the safe listing as tagged JSON the worker rebuilds (`run_lightning.decode_value`).

    Plain JSON for str, int, bool, None and finite floats; `{"$t": ...}` objects for everything else. What
    ckptview does not rebuild becomes `{"$t": "refused", "why": ...}`: refused only if it is ever passed."""
    if depth > MAX_DEPTH:
        return _refused(node, "nested too deep")
    if node.kind == "value":
        value = node.value
        if value is None or isinstance(value, (str, bool, int)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"$t": "float", "repr": repr(value)}
        if isinstance(value, bytes):
            return {"$t": "bytes", "hex": value.hex()}
        return _refused(node, f"a {node.type_name or type(value).__name__}")
    items = [encode_value(c, depth + 1) for c in node.children]
    if node.kind in ("list", "tuple", "set"):
        if node.type_name not in ("list", "tuple", "set", ""):
            return _refused(node, f"a {node.type_name}")
        return items if node.kind == "list" else {"$t": node.kind, "items": items}
    if node.kind == "dict" and node.type_name in ("dict", "collections.OrderedDict", ""):
        kind = "dict" if node.type_name != "collections.OrderedDict" else "ordered"
        return {"$t": kind, "items": [[_key(c.key), v] for c, v in zip(node.children, items, strict=True)]}
    if node.kind == "object" and node.type_name in NAMESPACES + ATTRIBUTE_DICTS:
        if not all(isinstance(c.key, str) for c in node.children):
            return _refused(node, f"a {node.type_name} with odd state")
        kind = "namespace" if node.type_name in NAMESPACES else "attributedict"
        return {"$t": kind, "type": node.type_name, "items": [[c.key, v] for c, v in
                                                              zip(node.children, items, strict=True)]}
    if node.kind == "tensor":
        return _refused(node, "a tensor")
    return _refused(node, f"a {node.type_name or node.kind}")


def _refused(node: Any, what: str) -> dict[str, str]:
    return {"$t": "refused", "why": f"{node.name[:120]} is {what[:120]}"}

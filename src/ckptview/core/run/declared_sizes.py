"""What a config declares, held against the checkpoint beside it before anything is built at that size.

A library builds the architecture a `config.json` names at the sizes the config declares, not at those of the
file: a 234-byte config declaring 20,000 Llama layers beside a one-tensor file made the worker build and trace
all of them for up to 900 s, and one declaring `intermediate_size` 2e9 asked for 128 GB before anything looked at
the file (issue 43, finding 9). The checkpoint's listing (its state dict's tensors, from the safe reader) is what
the build must agree with, checked twice:

- here, in the parent, on the config as data (no library, no worker): a layer count larger than the file has
  tensors (each layer holds at least one; `4 x tensors + 64` leaves room for weights shared between layers), or
  a size (`*_size`, `*_dim`, `d_model`, ...) larger than all the elements of the file and than `SIZE_FLOOR`, is
  refused in one line (`check_declared`);
- in the worker, on what the library actually builds (`core/worker/build_size.py`): the model is built on the
  meta device first (no memory), every parameter, buffer and module it registers is counted as it is
  registered, and the build stops at the first one past what the file pays for (`Listing.max_registered`,
  `Listing.max_elements`); the built model's tensors are then matched with the file's by shape
  (`Listing.max_unmatched`). Only then is it built for real. The request carries the file's `Listing`.

The numbers are in docs/limits.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ckptview.core import units
from ckptview.core.run.config_guard import MAX_DEPTH, ConfigRefused
from ckptview.core.units import plural

REGISTERED_PER_TENSOR = 4  # parameters, buffers and modules a build may register per tensor of the file
REGISTERED_FLOOR = 1024
ELEMENTS_PER_ELEMENT = 2  # elements a build may register per element of the file (tied weights count twice)
ELEMENTS_FLOOR = 16 << 20  # elements any build may register (64 MiB of float32): a tiny file's model is cheap
LAYERS_PER_TENSOR = 4  # layers a config may declare per tensor of the file, and
LAYERS_FLOOR = 64  # at least this many, whatever the file
SIZE_FLOOR = 1 << 20  # a declared size may exceed the file's elements up to this
MAX_SHAPES = 100_000  # distinct shapes handed to the worker (more: the counts alone)

# Keys of a layer count (num_hidden_layers, n_layer, encoder_layers, num_encoder_blocks, depth) and of a list of
# them (depths: [2, 2, 6, 2]; ResNet's layers: [3, 4, 6, 3]).
_LAYERS = re.compile(r"(^|_)(layers?|blocks)$|^depths?$")
# Keys of one dimension of a weight, and only those (a `chunk_size` in audio samples or a `max_*_size` is no
# weight's): hidden_size, intermediate_size, moe_intermediate_size, vocab_size, embed_dim, head_dim, d_model.
_SIZE = re.compile(r"(^|_)(hidden|intermediate|vocab|embedding|embed|ffn|head|projection)_(size|dim)$|"
                   r"^(n_embd|n_inner|d_model|d_ff|d_kv|d_inner|dim|ffn_dim|hidden_dim)$")


@dataclass(frozen=True)
class Listing:
    """The checkpoint's state dict as a build is held against it: its tensors, their elements, their shapes."""

    tensors: int
    elements: int
    shapes: dict[tuple[int, ...], int] = field(default_factory=dict)  # {shape: tensors of it}; {} when too many

    @classmethod
    def of(cls, shapes: Iterable[Iterable[int]]) -> Listing:
        """The listing of tensors of these shapes."""
        counts: dict[tuple[int, ...], int] = {}
        tensors = elements = 0
        for shape in shapes:
            key = tuple(int(s) for s in shape)
            tensors += 1
            elements += math.prod(key)
            counts[key] = counts.get(key, 0) + 1
        return cls(tensors, elements, counts if len(counts) <= MAX_SHAPES else {})

    @classmethod
    def of_tensors(cls, tensors: dict[str, Any]) -> Listing:
        """The listing of a state dict {key: TensorInfo} (the safe reader's)."""
        return cls.of(info.shape for info in tensors.values())

    @property
    def max_registered(self) -> int:
        """Parameters, buffers and modules a build of this file's model may register."""
        return REGISTERED_PER_TENSOR * self.tensors + REGISTERED_FLOOR

    @property
    def max_elements(self) -> int:
        """Elements of the parameters and buffers a build of this file's model may register."""
        return ELEMENTS_PER_ELEMENT * self.elements + ELEMENTS_FLOOR

    @property
    def max_unmatched(self) -> int:
        """Elements of the built model that may have no tensor of their shape in the file (renamed or merged
        layouts a library converts while loading, weights a partial file lacks)."""
        return self.elements + ELEMENTS_FLOOR

    def describe(self) -> str:
        """`1 tensor of 4,096 elements`."""
        return f"{self.tensors:,} tensor{'s' if self.tensors != 1 else ''} of {plural(self.elements, 'element')}"

    def to_json(self) -> dict[str, Any]:
        """The form a worker request carries."""
        return {"tensors": self.tensors, "elements": self.elements,
                "shapes": [[list(shape), count] for shape, count in self.shapes.items()]}

    @classmethod
    def from_json(cls, data: Any) -> Listing | None:
        """Read back `to_json` (None when it is not that: the build is then not held against a file)."""
        if not isinstance(data, dict):
            return None
        tensors, elements, shapes = data.get("tensors"), data.get("elements"), data.get("shapes") or []
        if not (isinstance(tensors, int) and isinstance(elements, int) and _count(tensors) and _count(elements)
                and isinstance(shapes, list)):
            return None
        counts: dict[tuple[int, ...], int] = {}
        for item in shapes:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)
                    and all(_count(s) for s in item[0]) and _count(item[1])):
                return None
            counts[tuple(item[0])] = item[1]
        return cls(tensors, elements, counts)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_declared(config: dict[str, Any], listing: Listing, where: str = "config.json") -> None:
    """ConfigRefused (one line) when `config` declares more layers or a larger size than the checkpoint of
    `listing` can hold; iterative, at most MAX_DEPTH levels of sub-configs."""
    max_layers = LAYERS_PER_TENSOR * listing.tensors + LAYERS_FLOOR
    max_size = max(listing.elements, SIZE_FLOOR)
    stack: list[tuple[dict[str, Any], str, int]] = [(config, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        for key, value in node.items():
            name = f"{path}{key}"
            if isinstance(value, dict):
                if depth < MAX_DEPTH:
                    stack.append((value, f"{name}.", depth + 1))
                continue
            if not isinstance(key, str):
                continue
            if _LAYERS.search(key):
                layers = _layer_count(value, key)
                if layers is not None and layers > max_layers:
                    raise ConfigRefused(f"{where} declares {_shown(layers)} layers ({name}) beside a checkpoint of "
                                        f"{listing.describe()}: it does not describe this file; not built")
            elif _SIZE.search(key) and _number(value) and value > max_size:
                raise ConfigRefused(f"{where} declares {name} = {_shown(value)}, larger than all "
                                    f"{plural(listing.elements, 'element')} of the checkpoint beside it: it does not "
                                    "describe this file; not built")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_LAYER_LISTS = re.compile(r"^(depths?|layers|blocks)$")  # lists of counts per stage; other lists hold indices


def _layer_count(value: Any, key: str) -> float | None:
    """A layer count, or the sum of a list of them per stage (Swin's depths); None for anything else."""
    if _number(value):
        return float(value)
    if _LAYER_LISTS.match(key) and isinstance(value, list) and value and all(_number(v) for v in value):
        return float(sum(value))
    return None


def _shown(value: float) -> str:
    return units.number(int(value) if float(value).is_integer() and abs(value) < 1e30 else float(value), ".3g")

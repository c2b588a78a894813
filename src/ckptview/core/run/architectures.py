"""Which library's architecture a checkpoint is, read from its folder's config as data (no torch, no import).

A forward pass with no code of the user's own needs the model's class. It comes from an installed library
(transformers, diffusers, timm, torchvision), never from the file's folder: `config.json` is read as JSON,
and a config that names code shipped beside the weights (`auto_map`) is refused. The worker builds the class
by name from the library's own registry (`core/worker/library.py`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.errors import CheckpointError
from ckptview.core.message import Fix, Hint, Message, message_of, rephrased
from ckptview.core.read.bytes.files import open_regular, special_kind
from ckptview.core.run.config_guard import ConfigRefused, guarded_config, timm_parts
from ckptview.core.run.config_json import load_json
from ckptview.core.run.declared_sizes import Listing, check_declared
from ckptview.core.run.example import EXAMPLE_CLASS, EXAMPLE_SOURCE, is_bundled_example
from ckptview.core.run.state_dict import state_dict_tensors

MAX_CONFIG_BYTES = 4 << 20  # a config.json larger than this is not a model config
EXTRA = "pip install 'ckptview[models]'"
# timm and torchvision are an extra of their own: torchvision must be the build made for the installed torch.
VISION_EXTRA = "pip install 'ckptview[vision]'"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class ArchitectureRefused(Exception):
    """The folder names an architecture ckptview will not build; the message says why, in one line."""


@dataclass(frozen=True)
class Architecture:
    """A model class an installed library knows, and the config it is built from."""

    library: str  # "transformers" | "diffusers" | "timm" | "torchvision"
    cls: str  # the class (or timm/torchvision model) name
    source: str  # what named it: "config.json", "keys and shapes"
    config: dict[str, Any] = field(default_factory=dict, compare=False)
    folder: str = ""  # the folder of config.json (a tokenizer.json beside it gives next-token results)
    # preprocessor_config.json beside config.json, read as data: the image or audio sizes the model expects.
    preprocessor: dict[str, Any] = field(default_factory=dict, compare=False)
    # A quantized folder run with ckptview's dequantized weights: the schemes ("int4 GPTQ, group 128").
    dequantized: tuple[str, ...] = ()
    # The checkpoint's tensors the build is held against (`declared_sizes`); None: not recognised from a file.
    listing: Listing | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, str]:
        """The contract's `"architecture"` object."""
        return {"library": self.library, "class": self.cls, "source": self.source}

    def describe(self) -> str:
        """One line for people: `transformers LlamaForCausalLM from config.json`."""
        return f"{self.library} {self.cls} from {self.source}"

    def payload(self) -> dict[str, Any]:
        """What the worker's request needs to build it; the inputs it declares are made there, from the model
        (`core/worker/declared_inputs.py`), for the window and the command line alike."""
        return {"architecture": {**self.to_json(), "config": self.config, "folder": self.folder},
                "preprocessor": self.preprocessor, **self.expect()}

    def expect(self) -> dict[str, Any]:
        """The request's `expect`: the listing of the checkpoint the build must agree with ({} when none)."""
        return {"expect": self.listing.to_json()} if self.listing is not None else {}


def config_path(path: str) -> str | None:
    """The config.json beside a checkpoint (in the folder, or beside the file), if there is one."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    candidate = os.path.join(folder, "config.json")
    return candidate if os.path.isfile(candidate) else None


def read_config(path: str) -> dict[str, Any]:
    """A config.json as data; ArchitectureRefused when it is not one JSON object of bounded size."""
    try:
        st = os.stat(path)
        if (kind := special_kind(st.st_mode)) is not None:  # a FIFO would block a plain open(), then feed it
            raise ArchitectureRefused(f"config.json is {kind}, not a regular file: not read")
        check_config_size(st.st_size)
        with open_regular(path) as fh:  # the byte layer: a FIFO swapped in after the stat is refused too
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ArchitectureRefused(f"cannot read config.json: {exc.strerror or exc}") from None
    except CheckpointError as exc:
        raise ArchitectureRefused(f"cannot read config.json: {exc}") from None
    return parse_config(raw)


def check_config_size(size: int) -> None:
    """ArchitectureRefused when a config.json of `size` bytes is too large to be a model config."""
    if size > MAX_CONFIG_BYTES:
        raise ArchitectureRefused(f"config.json is {size:,} bytes: too large for a model config")


def parse_config(raw: bytes) -> dict[str, Any]:
    """config.json's bytes as data; ArchitectureRefused when they are not one JSON object of bounded size and
    nesting (both checked while the bytes are scanned, before they are parsed: `config_json`)."""
    check_config_size(len(raw))
    try:
        data = load_json(bytes(raw))
    except ConfigRefused as exc:
        raise ArchitectureRefused(message_of(exc)) from None
    if not isinstance(data, dict):
        raise ArchitectureRefused("config.json is not a JSON object")
    return data


def recognize(path: str, tensors: dict[str, Any] | None = None) -> Architecture | None:
    """The architecture of the checkpoint at `path`, or None when nothing names one.

    `tensors` ({state-dict key: TensorInfo}) lets a folder without config be recognised by its keys and
    shapes (torchvision). Raises ArchitectureRefused for a config that ships its own code (`auto_map`).
    """
    if tensors and is_bundled_example(path, tensors):  # ckptview's own model: its code ships with ckptview
        return Architecture("ckptview", EXAMPLE_CLASS, EXAMPLE_SOURCE)
    found = config_path(path)
    if found is not None:
        config = read_config(found)
        config, schemes = dequantized_config(config, tensors or {})
        arch = recognize_config(config, os.path.dirname(found), tensors)
        if arch is not None:
            return dataclasses.replace(arch, preprocessor=read_preprocessor(os.path.dirname(found)),
                                       dequantized=schemes)
    return recognize_by_keys(tensors) if tensors else None


PREPROCESSOR = "preprocessor_config.json"


def read_preprocessor(folder: str) -> dict[str, Any]:
    """The preprocessor_config.json in `folder` as data ({} when there is none); ArchitectureRefused when it is
    there but not one bounded JSON object."""
    candidate = os.path.join(folder, PREPROCESSOR)
    if not os.path.isfile(candidate):
        return {}
    try:
        return read_config(candidate)
    except ArchitectureRefused as exc:
        raise ArchitectureRefused(rephrased(exc, lambda said: said.replace("config.json", PREPROCESSOR))) from None


def recognize_config(config: dict[str, Any], folder: str = "", tensors: dict[str, Any] | None = None
                     ) -> Architecture | None:
    """The architecture a config.json (read as data) names, its config as the build gets it (pinned and
    checked by `config_guard.guarded_config`); ArchitectureRefused for `auto_map`, odd names, or a field
    that would make the library load something. `tensors` ({state-dict key: TensorInfo} of the checkpoint
    beside it): the config's declared layers and sizes must fit them (`declared_sizes`), and the worker
    holds the build against them too."""
    arch = _named_architecture(config, folder)
    if arch is None:
        return None
    listing = Listing.of_tensors(tensors) if tensors else None
    try:
        guarded = guarded_config(arch.library, arch.cls, arch.config)
        if listing is not None:
            check_declared(guarded, listing)
    except ConfigRefused as exc:
        raise ArchitectureRefused(rephrased(exc, lambda said: f"{arch.describe()}: {said}")) from None
    return Architecture(arch.library, arch.cls, arch.source, guarded, arch.folder, listing=listing)


def dequantized_config(config: dict[str, Any], tensors: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A quantized model's config without its `quantization_config`, and its schemes, when ckptview dequantizes
    every quantized weight of `tensors` ({key: TensorInfo}, the logical tensors of `core/read/quant`): the model
    is then built unquantized and loads the dequantized weights (equal to the library's own dequantization), on
    any device. ArchitectureRefused, naming the scheme, when it does not (no weight of it recognised, or one
    that cannot be computed): never a model with weights left at random. Other configs are returned as they are."""
    quantization = config.get("quantization_config")
    if quantization is None:
        return config, ()
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    named = str(method)[:40] if isinstance(method, str) else "an unnamed scheme"
    quants = [info.quant for info in tensors.values() if getattr(info, "quant", None) is not None]
    if not quants:
        raise ArchitectureRefused(
            f"config.json's quantization_config names {named}, and no weight of it is one ckptview dequantizes: its "
            f"library's quantizer loads libraries and kernels of its own, which ckptview never runs")
    broken = next((q for q in quants if q.problem is not None), None)
    if broken is not None:
        raise ArchitectureRefused(f"cannot dequantize this {broken.label} model: {broken.problem}")
    return {k: v for k, v in config.items() if k != "quantization_config"}, tuple(sorted({q.label for q in quants}))


def _named_architecture(config: dict[str, Any], folder: str) -> Architecture | None:
    if "auto_map" in config:
        named = config["auto_map"]
        shown = ", ".join(f"{k}: {v}" for k, v in named.items())[:200] if isinstance(named, dict) else "?"
        raise ArchitectureRefused(Message(
            f"config.json names model code shipped with the weights (auto_map {shown}): ckptview never runs "
            f"code from a model's folder", Hint(Fix.MODEL)))
    if isinstance(config.get("_class_name"), str):  # diffusers components
        return Architecture("diffusers", _name(config["_class_name"], "_class_name"), "config.json", config, folder)
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(config.get("model_type"), str):
        return Architecture("transformers", _name(architectures[0], "architectures"), "config.json", config,
                            folder)
    arch = config.get("architecture") or config.get("model_name")
    if isinstance(arch, str) and ("pretrained_cfg" in config or "num_classes" in config):  # timm's config.json
        if not re.match(r"^[A-Za-z0-9_.]{1,128}$", arch):
            raise ArchitectureRefused(f"config.json names an odd timm architecture {arch[:60]!r}")
        return Architecture("timm", arch, "config.json", config, folder)
    if isinstance(config.get("model_type"), str):
        raise ArchitectureRefused(f"config.json has model_type {str(config['model_type'])[:60]!r} but no "
                                  f"'architectures' list naming the model class")
    return None


def _name(value: Any, key: str) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise ArchitectureRefused(f"config.json's {key} is not a class name: {str(value)[:60]!r}")
    return value


# torchvision's ResNets: blocks per stage, and the block kind (BasicBlock has conv1/conv2, Bottleneck conv3).
_RESNETS = {(2, 2, 2, 2, False): "resnet18", (3, 4, 6, 3, False): "resnet34", (3, 4, 6, 3, True): "resnet50",
            (3, 4, 23, 3, True): "resnet101", (3, 8, 36, 3, True): "resnet152"}


def recognize_by_keys(tensors: dict[str, Any]) -> Architecture | None:
    """A torchvision ResNet recognised by its state-dict keys and shapes (`torchvision resnet18`)."""
    conv1, fc = tensors.get("conv1.weight"), tensors.get("fc.weight")
    if conv1 is None or fc is None or len(conv1.shape) != 4 or len(fc.shape) != 2:
        return None
    blocks = []
    for stage in range(1, 5):
        count = 0
        while f"layer{stage}.{count}.conv1.weight" in tensors:
            count += 1
        blocks.append(count)
    bottleneck = "layer1.0.conv3.weight" in tensors
    name = _RESNETS.get((blocks[0], blocks[1], blocks[2], blocks[3], bottleneck))
    if name is None:
        return None
    config = {"num_classes": int(fc.shape[0]), "in_channels": int(conv1.shape[1])}
    return Architecture("torchvision", name, "keys and shapes", config, listing=Listing.of_tensors(tensors))


def recognize_checkpoint(path: str) -> Architecture | None:
    """`recognize` for a checkpoint on disk, its keys read by the safe reader; ArchitectureRefused also when
    the architecture's library is not installed."""
    tensors = state_dict_tensors(path)
    if tensors is None:
        return None
    arch = recognize(path, tensors)
    if arch is not None and (missing := missing_library(arch)):
        raise ArchitectureRefused(missing)
    return arch


def missing_library(arch: Architecture) -> str | None:
    """The refusal line when the architecture's library is not installed (no import, a spec lookup)."""
    if importlib.util.find_spec(arch.library) is None:
        if arch.library in ("timm", "torchvision"):
            return (f"{arch.describe()}: {arch.library} is not installed ({VISION_EXTRA} brings it, with a "
                    f"torchvision built for your torch)")
        return f"{arch.describe()}: {arch.library} is not installed ({EXTRA} brings it)"
    return None


def timm_config(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pretrained_cfg, model_args) of a timm config.json, split as timm's own folder loader splits it.

    timm builds a folder's model from `model_args` (keyword arguments of the model, e.g. `img_size`, `depth`)
    and `pretrained_cfg` (its default `num_classes`, and `in_chans` from `input_size`), with the top-level
    `num_classes` over the pretrained one. A legacy config is one flat dict: the pretrained_cfg itself.
    Locations and create_model's own arguments are refused (`config_guard.timm_parts`).
    """
    try:
        return timm_parts(config)
    except ConfigRefused as exc:
        raise ArchitectureRefused(str(exc)) from None


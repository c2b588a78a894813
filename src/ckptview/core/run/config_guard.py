
"""What a folder's config may ask of the library that builds its model: never a file, a URL, a download or code.

A forward pass (and the meta-device build that names a Trainer folder's optimizer state, and a model graph)
builds the architecture a config names with an installed library. Some config fields are not settings but
loads: transformers hands a `TimmWrapper`'s `model_args` to `timm.create_model` (`checkpoint_path`: torch.load
of any file), a `backbone` is fetched or read from a path, `attn_implementation` may name a kernel on the Hub,
`quantization_config` loads a quantizer; timm reads `local-dir:PATH` and `hf-hub:REPO` architectures and
`pretrained_cfg` locations; `_name_or_path` names where the config came from. Everything here is decided from
the config as data, before any library is imported (the worker checks again, and guards what the build opens:
`core/worker/build_guard.py`).

The rule, per library (:func:`guarded_config`):

- **Pinned**: fields that only say where a config came from or pick an implementation are dropped, so the
  library uses its own default (`_name_or_path`, `attn_implementation` and its internal variants, the
  experts implementation); a pretrained backbone is never loaded (`use_pretrained_backbone` is False).
- **Refused** (one line naming the field): code (`auto_map`, `trust_remote_code`, `custom_pipelines`,
  `custom_generate`), quantization (`quantization_config`), a `backbone` that is not a plain model name, timm
  model arguments that are `create_model`'s or the builder's own (`checkpoint_path`, `pretrained`,
  `pretrained_cfg_overlay`, `cache_dir`, `features_only`'s `feature_cls`, ...), a timm architecture that
  is not a registry name (`local-dir:`, `hf-hub:`), `pretrained_cfg` locations (`file`, `url`, `hf_hub_id`,
  ...), and any string anywhere that reads as a location (`/abs/path`, `~/x`, `../x`, `org/repo`,
  `scheme://...`, `scheme:...`, a weight file's name), outside the few free-text fields (labels,
  descriptions, prompts).
- **Allowed**: everything else, which the libraries take as settings (numbers, booleans, plain names).
"""

from __future__ import annotations

import re
from typing import Any

from ckptview.core.message import Fix, Hint, Message

MAX_DEPTH = 64  # nested sub-configs (text_config.vision_config...), far more than any real config has
MAX_ITEMS = 1_000_000  # values visited, at most (a 4 MiB config.json holds fewer)


class ConfigRefused(ValueError):
    """The config asks its library to load something; the message names the field, in one line."""


# Fields whose value is free text, never a location a library opens.
FREE_TEXT = frozenset({"id2label", "label2id", "label_names", "label_descriptions", "task_specific_params", "prefix",
                       "description", "notes", "license", "paper_name", "paper_ids", "origin_url", "transformers_version",
                       "_diffusers_version", "diffusers_version", "_commit_hash", "bos_token", "eos_token", "pad_token",
                       "unk_token", "sep_token", "cls_token", "mask_token"})
# Where a config came from, or which kernels to use: the build needs neither; the library's default is used.
PINNED_AWAY = frozenset({"_name_or_path", "name_or_path", "attn_implementation", "_attn_implementation",
                         "_attn_implementation_internal", "_attn_implementation_autoset", "experts_implementation",
                         "_experts_implementation", "_experts_implementation_internal"})
# Code or loaders a library would run for the config.
REFUSED_KEYS = {
    "auto_map": "names model code shipped with the weights",
    "trust_remote_code": "asks to run code shipped with the weights",
    "custom_pipelines": "names pipeline code shipped with the weights",
    "custom_generate": "names generation code from the Hub",
    "quantization_config": "asks for a quantizer, which loads libraries and kernels of its own",
    "kernel_config": "names kernels to fetch from the Hub",
    "use_kernels": "asks for kernels fetched from the Hub",
}
# Class names other libraries' Auto classes would look up (never imported here; plain names only).
CLASS_NAME_KEYS = frozenset({"tokenizer_class", "processor_class", "feature_extractor_type", "image_processor_type",
                             "video_processor_type", "_class_name"})
# timm.create_model's own parameters and its builder's (build_model_with_cfg): loading, downloading, wrapping.
TIMM_OWN_ARGS = frozenset({"pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "checkpoint_path", "cache_dir",
                           "scriptable", "exportable", "no_jit", "model_cfg", "feature_cfg", "pretrained_strict",
                           "pretrained_filter_fn", "kwargs_filter", "pruned", "feature_cls", "model_name",
                           "variant", "model_cls", "weights", "progress"})
# pretrained_cfg fields timm reads only to locate weights.
TIMM_LOCATION_FIELDS = frozenset({"url", "file", "state_dict", "hf_hub_id", "hf_hub_filename", "source"})
_TIMM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")  # resnet50, vit_base_patch16_224.augreg_in21k
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")  # https:, hf-hub:, local-dir:, file:, s3:
_REPO = re.compile(r"^[\w.\-]+/[\w.\-]+(@[\w.\-/]+)?$")  # org/repo, org/repo@rev
_WEIGHT_FILE = re.compile(r"\.(pt|pth|bin|ckpt|safetensors|sft|npz|npy|pkl|pickle|h5|msgpack|onnx|gguf|json|so|"
                          r"dll|dylib|pyd|py|txt|model|tar|zip|gz)$", re.IGNORECASE)


def looks_like_location(text: str) -> bool:
    """Whether a string reads as a path, a URL, a Hub repository or a file name (what a loader would open)."""
    stripped = text.strip()
    if not any(ch.isalnum() for ch in stripped):
        return False  # a separator (" / "), punctuation: nothing a loader could find
    if stripped[0] in "/\\~" or stripped.startswith((".", "$")) or "\\" in stripped or "://" in stripped:
        return True
    if "\x00" in stripped or "\n" in stripped:
        return True
    if _SCHEME.match(stripped):
        return True
    if "/" in stripped and (_REPO.match(stripped) or stripped.count("/") > 1 or " " not in stripped):
        return True
    return bool(_WEIGHT_FILE.search(stripped))


def guarded_config(library: str, cls: str, config: dict[str, Any]) -> dict[str, Any]:
    """The config the build gets: pinned fields dropped or set, the rest checked; ConfigRefused (one line)
    for a field that would make `library` open a file, fetch a URL, download or run code."""
    if not isinstance(config, dict):
        raise ConfigRefused("config.json is not a JSON object")
    config = copied(config, "config.json")  # depth and size first, without recursion; the caller's dict untouched
    if library == "transformers":
        return _transformers(config)
    if library == "diffusers":
        return _plain_config(config, "config.json", pin_backbone=False)
    if library == "timm":
        pretrained, args = timm_parts(config)
        out = {k: v for k, v in config.items() if k not in ("pretrained_cfg", "model_args")}
        _check_strings(out, "config.json")
        out["pretrained_cfg"], out["model_args"] = pretrained, args
        arch = config.get("architecture") or config.get("model_name")
        if isinstance(arch, str):
            check_timm_name(arch, "config.json's architecture")
        return out
    if library == "torchvision":
        classes = config.get("num_classes", 1000)
        if not isinstance(classes, int) or isinstance(classes, bool) or not 0 < classes < 1 << 24:
            raise ConfigRefused(f"the torchvision model's num_classes is not a count: {str(classes)[:40]!r}")
        return {"num_classes": classes, **({"in_channels": config["in_channels"]} if "in_channels" in config else {})}
    raise ConfigRefused(f"no config rules for the library {library[:40]!r}: not built")


def check_timm_name(name: str, where: str) -> None:
    """A timm registry name (`resnet50`, `vit_base_patch16_224.augreg_in21k`), never `local-dir:`/`hf-hub:`."""
    if not isinstance(name, str) or not _TIMM_NAME.match(name) or looks_like_location(name):
        raise ConfigRefused(f"{where} is not a timm model name: {_shown(name)} (timm would read or download "
                            "what it names)")


def timm_parts(config: dict[str, Any], where: str = "config.json") -> tuple[dict[str, Any], dict[str, Any]]:
    """(pretrained_cfg, model_args) of a timm config.json, split as timm's own folder loader splits it, checked.

    `model_args` reach the model's constructor through `create_model` (keyword arguments: `img_size`,
    `depth`, ...): create_model's and its builder's own parameters are refused, values must be settings.
    `pretrained_cfg` keeps the data fields (classes, input size, mean/std); its locations are refused.
    """
    if isinstance(config.get("pretrained_cfg"), dict):
        pretrained = dict(config["pretrained_cfg"])
    else:  # a legacy config: one flat dict, the pretrained_cfg itself
        pretrained = {k: v for k, v in config.items() if k not in ("architecture", "num_features", "model_args")}
    if "num_classes" in config:
        pretrained["num_classes"] = config["num_classes"]
    located = sorted(k for k, v in pretrained.items() if k in TIMM_LOCATION_FIELDS and v not in (None, "", [], {}))
    if located:
        raise ConfigRefused(f"{where}'s pretrained_cfg names {', '.join(located)}: where timm loads weights from, "
                            "never taken from a model's folder")
    pretrained = {k: v for k, v in pretrained.items() if k not in TIMM_LOCATION_FIELDS}
    _check_strings(pretrained, f"{where}'s pretrained_cfg")
    raw = config.get("model_args")
    if raw is None:
        args: dict[str, Any] = {}
    elif isinstance(raw, dict):
        args = check_model_args(raw, f"{where}'s model_args")
    else:
        raise ConfigRefused(f"{where}'s model_args is not an object of keyword arguments")
    return pretrained, args


def check_model_args(args: dict[str, Any], where: str) -> dict[str, Any]:
    """timm model keyword arguments: identifiers, never create_model's own, values plain settings."""
    if not all(isinstance(k, str) and _IDENTIFIER.match(k) for k in args):
        raise ConfigRefused(f"{where} are not keyword arguments")
    own = sorted(TIMM_OWN_ARGS & set(args))
    if own:
        raise ConfigRefused(f"{where} name {', '.join(own)}: arguments of timm.create_model itself (loading, "
                            "downloading), never taken from a model's folder")
    _check_strings(args, where, free_text=frozenset())
    return dict(args)


# ---------------------------------------------------------------------------------------------------


def _transformers(out: dict[str, Any]) -> dict[str, Any]:
    _walk(out, "config.json", transformers=True)
    out["use_pretrained_backbone"] = False  # transformers 4.x loads a pretrained backbone by default (DETR)
    return out


def _plain_config(out: dict[str, Any], where: str, pin_backbone: bool) -> dict[str, Any]:
    _walk(out, where, transformers=pin_backbone)
    return out


def copied(config: dict[str, Any], where: str) -> dict[str, Any]:
    """A copy of a config's dicts and lists (the caller's stays as it was), made with an explicit stack: a
    config nested deeper than MAX_DEPTH, or holding more than MAX_ITEMS values, is refused before it is
    copied, never by a RecursionError (`copy.deepcopy` recurses once per level)."""
    out: dict[str, Any] = {}
    stack: list[tuple[Any, Any, int]] = [(config, out, 0)]
    seen = 0
    while stack:
        source, target, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigRefused(f"{where} nests deeper than {MAX_DEPTH} levels: not a model config")
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, value in items:
            seen += 1
            if seen > MAX_ITEMS:
                raise ConfigRefused(f"{where} holds more than {MAX_ITEMS:,} values: not a model config")
            if isinstance(value, (dict, list)):
                child: Any = {} if isinstance(value, dict) else [None] * len(value)
                stack.append((value, child, depth + 1))
                value = child
            target[key] = value
    return out


def _walk(root: dict[str, Any], where: str, transformers: bool) -> None:
    """Check and pin every dict of the config in place, iteratively (a config may nest sub-configs)."""
    stack: list[tuple[dict[str, Any], str, int]] = [(root, where, 0)]
    seen = 0
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigRefused(f"{path} nests deeper than {MAX_DEPTH} levels: not a model config")
        for key in list(node):
            seen += 1
            if seen > MAX_ITEMS:
                raise ConfigRefused(f"config.json holds more than {MAX_ITEMS:,} values: not a model config")
            value = node[key]
            field = f"{path}.{key}" if path != where else f"{where}'s {key}"
            if not isinstance(key, str):
                continue
            if key in REFUSED_KEYS and value not in (None, False, {}, []):
                raise ConfigRefused(Message(f"{field} {REFUSED_KEYS[key]}: ckptview never runs or fetches what a "
                                            "model's folder names", *([Hint(Fix.MODEL)] if key == "auto_map" else [])))
            if key in PINNED_AWAY:
                if "implementation" in key:  # a kernel named on the Hub is a refusal, not a silent default
                    _check_strings(value, field, free_text=frozenset())
                del node[key]  # the library's own default: no kernel from the Hub, no path to resolve
                continue
            if key in FREE_TEXT:
                continue
            if key in CLASS_NAME_KEYS:
                if value is not None and not (isinstance(value, str) and _IDENTIFIER.match(value)):
                    raise ConfigRefused(f"{field} is not a class name: {_shown(value)}")
                continue
            if transformers and key == "backbone" and value is not None:
                if not isinstance(value, str) or not _PLAIN_NAME.match(value) or looks_like_location(value):
                    raise ConfigRefused(f"{field} names {_shown(value)}, which transformers would fetch or read "
                                        "from a path: give a plain backbone name (resnet50) or a backbone_config")
                continue
            if transformers and key == "use_pretrained_backbone":
                node[key] = False  # never a download
                continue
            # TimmWrapper (transformers' format of timm models) hands `architecture` and `model_args` to
            # timm.create_model, and `pretrained_cfg` is timm's: checked as timm's own config, wherever they are.
            if transformers and key == "architecture" and value is not None:
                check_timm_name(value, field)
                continue
            if transformers and key == "model_args" and value is not None:
                if not isinstance(value, dict):
                    raise ConfigRefused(f"{field} is not an object of keyword arguments")
                check_model_args(value, field)
                continue
            if transformers and key == "pretrained_cfg" and isinstance(value, dict):
                timm_parts({"pretrained_cfg": value}, field)
                continue
            if isinstance(value, dict):
                stack.append((value, field, depth + 1))
            elif isinstance(value, list):
                _check_list(value, field, stack, depth)
            elif isinstance(value, str) and looks_like_location(value):
                raise ConfigRefused(f"{field} reads as a location ({_shown(value)}): a library would open or "
                                    "fetch it; not built")


def _check_list(items: list[Any], field: str, stack: list[tuple[dict[str, Any], str, int]], depth: int) -> None:
    pending: list[tuple[list[Any], int]] = [(items, depth)]
    while pending:
        current, level = pending.pop()
        if level > MAX_DEPTH:
            raise ConfigRefused(f"{field} nests deeper than {MAX_DEPTH} levels: not a model config")
        for item in current:
            if isinstance(item, dict):
                stack.append((item, field, level + 1))
            elif isinstance(item, list):
                pending.append((item, level + 1))
            elif isinstance(item, str) and looks_like_location(item):
                raise ConfigRefused(f"{field} holds {_shown(item)}, which reads as a location a library would open "
                                    "or fetch: not built")


def _check_strings(value: Any, where: str, free_text: frozenset[str] = FREE_TEXT) -> None:
    """Every string in `value` (outside `free_text` fields) is a setting, not a location; iterative."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    seen = 0
    while stack:
        item, path, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH or seen > MAX_ITEMS:
            raise ConfigRefused(f"{path} is too deep or too large for a model config")
        if isinstance(item, dict):
            for k, v in item.items():
                if isinstance(k, str) and k in free_text:
                    continue
                if isinstance(k, str) and looks_like_location(k):
                    raise ConfigRefused(f"{path} has a key that reads as a location: {_shown(k)}")
                stack.append((v, f"{path}.{k}", depth + 1))
        elif isinstance(item, list):
            stack.extend((v, path, depth + 1) for v in item)
        elif isinstance(item, str) and looks_like_location(item):
            raise ConfigRefused(f"{path} reads as a location ({_shown(item)}): a library would open or fetch it; "
                                "not built")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

"""The inputs a library model declares, for a forward pass given no inputs: one rule for the window and the
command line alike (both send no inputs; this module, in the worker, decides).

What a model declares, in the order it is asked: its forward's parameters (`inspect.signature`), its
`main_input_name` and `input_modalities` (transformers), whether it is an encoder-decoder (then it gets decoder
ids), the sizes its config names (`vocab_size`, `image_size`, `num_mel_bins`, `sample_size`, ...), the
`preprocessor_config.json` beside the weights (read as data by the parent: image and audio sizes), and timm's
own data config (`timm.data.resolve_model_data_config`: `pretrained_cfg.input_size`). Each input's `origin`
says which of them gave its name and size. Values are seeded fills (`core/run/input_specs.py`), so anyone
can remake them from the result.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from ckptview.core.message import Fix, Hint, Message
from ckptview.core.run.architectures import timm_config
from ckptview.core.run.input_specs import InputSpec

TEXT_TOKENS = 8
DEFAULT_IMAGE = 224
AUDIO_SECONDS_SAMPLES = 16000  # one second at 16 kHz, when no preprocessor names a sampling rate
SMALL_LATENT = 64  # a diffusers model's sample side when its config names a larger one (a test pass, not a picture)


class NoDeclaredInputs(Exception):
    """The model declares an input ckptview cannot make (its layout is unknown); the message says which."""


def declared_inputs(model: Any, arch: dict[str, Any], preprocessor: dict[str, Any] | None
                    ) -> list[tuple[InputSpec, str]]:
    """[(spec, origin)] of the inputs `model` (built by `arch["library"]`) declares, named for its forward."""
    library = arch.get("library")
    if library == "transformers":
        return _transformers(model, preprocessor or {})
    if library == "diffusers":
        return _diffusers(model)
    if library == "timm":
        return [_timm_image(model, "x", model_args=timm_config(arch.get("config") or {})[1])]
    if library == "torchvision":
        channels = _int(arch.get("config", {}).get("in_channels"), 3)
        return [(InputSpec(shape=(1, channels, DEFAULT_IMAGE, DEFAULT_IMAGE), dtype=_float_dtype(model), name="x"),
                 f"torchvision's ImageNet size {DEFAULT_IMAGE} (the model declares none)")]
    if library == "ckptview":
        features = int(getattr(model, "in_features", 20))
        return [(InputSpec(shape=(2, features), name="x"), f"the example MLP's {features} input features")]
    return []


def _parameters(model: Any) -> list[str]:
    try:
        return [p.name for p in inspect.signature(model.forward).parameters.values()
                if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    except (TypeError, ValueError):
        return []


def _float_dtype(model: Any) -> str:
    """The dtype of the model's first floating-point parameter (its inputs are made in it)."""
    for param in model.parameters():
        if param.is_floating_point():
            return str(param.dtype).removeprefix("torch.")
    return "float32"


def _int(value: Any, default: int) -> int:
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 20 else default


# ------------------------------------------------------------------------------------------------ transformers

_MODALITY_INPUT = {"text": "input_ids", "image": "pixel_values", "video": "pixel_values_videos"}


def _transformers(model: Any, preprocessor: dict[str, Any]) -> list[tuple[InputSpec, str]]:
    params = _parameters(model)
    config = model.config
    main = str(getattr(model, "main_input_name", "input_ids") or "input_ids")
    wanted: dict[str, str] = {main: "its main_input_name"}
    modalities = getattr(model, "input_modalities", None)
    if isinstance(modalities, str):
        modalities = (modalities,)
    if modalities:
        for modality in modalities:
            name = _MODALITY_INPUT.get(str(modality))
            if name and name in params:
                wanted.setdefault(name, f"its input_modalities ({', '.join(map(str, modalities))})")
    else:  # transformers 4: text and vision towers in one config (CLIP) take both
        if getattr(config, "text_config", None) is not None and "input_ids" in params:
            wanted.setdefault("input_ids", "its text_config")
        if getattr(config, "vision_config", None) is not None and "pixel_values" in params:
            wanted.setdefault("pixel_values", "its vision_config")
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        wanted["decoder_input_ids"] = "an encoder-decoder (config is_encoder_decoder)"
    out: list[tuple[InputSpec, str]] = []
    for name, why in wanted.items():
        if name not in params:
            continue
        out += _transformers_input(model, name, why, preprocessor, params)
    return out


def _text_config(config: Any) -> Any:
    """The config of the text part (CLIP's text_config, a decoder's own config)."""
    get = getattr(config, "get_text_config", None)
    if not callable(get):  # transformers before 4.44
        return getattr(config, "text_config", None) or config
    try:
        return get(decoder=True)
    except TypeError:  # transformers before 4.46 takes no arguments
        return get()


def _transformers_input(model: Any, name: str, why: str, preprocessor: dict[str, Any],
                        params: list[str]) -> list[tuple[InputSpec, str]]:
    config = model.config
    if name in ("input_ids", "decoder_input_ids"):
        vocab = _int(getattr(_text_config(config), "vocab_size", None), 0)
        if vocab <= 0:
            raise NoDeclaredInputs(f"the model takes {name} but its config names no vocab_size")
        ids = InputSpec(shape=(1, TEXT_TOKENS), dtype="int64", fill="randint", low=0.0, high=float(vocab), name=name)
        out = [(ids, f"{name}: {why}; ids below the config's vocab_size {vocab}")]
        mask = "attention_mask" if name == "input_ids" else "decoder_attention_mask"
        if name == "input_ids" and mask in params:
            out.append((InputSpec(shape=(1, TEXT_TOKENS), dtype="int64", fill="ones", name=mask),
                        f"{mask}: a forward parameter beside input_ids; all ones"))
        return out
    if name in ("pixel_values", "pixel_values_videos"):
        if getattr(model, "timm_model", None) is not None:  # transformers' TimmWrapper: timm's own data config
            spec, origin = _timm_image(model.timm_model, name, _float_dtype(model))
            return [(spec, f"{name}: {why}; {origin}")]
        vision = getattr(config, "vision_config", None) or config
        channels = _int(getattr(vision, "num_channels", None), 3)
        side, size_origin = _image_size(vision, preprocessor)
        spec = InputSpec(shape=(1, channels, side[0], side[1]), dtype=_float_dtype(model), name=name)
        return [(spec, f"{name}: {why}; {size_origin}")]
    if name == "input_features":
        mels = _int(getattr(config, "num_mel_bins", None), 0)
        positions = _int(getattr(config, "max_source_positions", None), 0)
        if not mels or not positions:
            raise NoDeclaredInputs(Message("the model takes input_features but its config names no num_mel_bins "
                                           "and max_source_positions", Hint(Fix.INPUT_SHAPE)))
        # Whisper's encoder takes exactly 2 frames per position (two convolutions, the second of stride 2).
        spec = InputSpec(shape=(1, mels, 2 * positions), dtype=_float_dtype(model), name=name)
        return [(spec, f"{name}: {why}; num_mel_bins {mels} x 2*max_source_positions {2 * positions} "
                       f"from the config")]
    if name == "input_values":
        rate = _int(preprocessor.get("sampling_rate"), 0)
        samples, origin = (rate, "one second at the preprocessor_config.json sampling_rate") if rate else (
            AUDIO_SECONDS_SAMPLES, "one second at 16 kHz (no preprocessor_config.json names a rate)")
        spec = InputSpec(shape=(1, samples), dtype=_float_dtype(model), name=name)
        return [(spec, f"{name}: {why}; {origin}")]
    raise NoDeclaredInputs(Message(f"the model's main input is {name}, which ckptview cannot make",
                                   Hint(Fix.INPUT_NAMED, (name,))))


def _image_size(vision: Any, preprocessor: dict[str, Any]) -> tuple[tuple[int, int], str]:
    """(height, width) of an image for the model, and where it came from."""
    size = getattr(vision, "image_size", None)
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return (_int(size[0], DEFAULT_IMAGE), _int(size[1], DEFAULT_IMAGE)), "image_size from the config"
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return (size, size), "image_size from the config"
    for key in ("crop_size", "size"):
        if key == "crop_size" and preprocessor.get("do_center_crop") is False:
            continue
        found = _preprocessor_side(preprocessor.get(key))
        if found is not None:
            return found, f"{key} from preprocessor_config.json"
    return (DEFAULT_IMAGE, DEFAULT_IMAGE), f"{DEFAULT_IMAGE} (neither the config nor a preprocessor_config.json " \
                                           f"names an image size)"


def _preprocessor_side(value: Any) -> tuple[int, int] | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 16:
        return value, value
    if isinstance(value, dict):
        height, width = _int(value.get("height"), 0), _int(value.get("width"), 0)
        if height and width:
            return height, width
        edge = _int(value.get("shortest_edge"), 0)
        if edge:
            return edge, edge
    return None


# ------------------------------------------------------------------------------------------------ others


def _diffusers(model: Any) -> list[tuple[InputSpec, str]]:
    params = _parameters(model)
    config = model.config
    dtype = _float_dtype(model)
    size = _int(config.get("sample_size"), 32)
    size_origin = "sample_size from config.json"
    if size > 128:
        size, size_origin = SMALL_LATENT, f"{SMALL_LATENT} (config.json's sample_size {size} is a full picture)"
    channels = _int(config.get("in_channels"), 4)
    out = [(InputSpec(shape=(1, channels, size, size), dtype=dtype, name="sample"),
            f"sample: forward parameter; in_channels {channels}, {size_origin}")]
    if "timestep" in params:
        out.append((InputSpec(shape=(), dtype="int64", fill="full", low=10.0, high=10.0, name="timestep"),
                    "timestep: forward parameter; step 10"))
    if "encoder_hidden_states" in params and config.get("cross_attention_dim"):
        dim = _int(config["cross_attention_dim"], 32)
        out.append((InputSpec(shape=(1, TEXT_TOKENS, dim), dtype=dtype, name="encoder_hidden_states"),
                    f"encoder_hidden_states: forward parameter; cross_attention_dim {dim} from config.json"))
    return out


def _timm_image(model: Any, name: str, dtype: str | None = None,
                model_args: dict[str, Any] | None = None) -> tuple[InputSpec, str]:
    """An image for a timm model: timm's own data config for it (its pretrained_cfg), with the `img_size` and
    `in_chans` of the `model_args` it was built with (timm does not rewrite pretrained_cfg for those)."""
    timm_data = importlib.import_module("timm.data")  # optional, in the vision extra
    data = timm_data.resolve_model_data_config(model)
    channels, height, width = (int(s) for s in data["input_size"])
    origin = "input_size from timm's resolve_model_data_config (its pretrained_cfg)"
    args = model_args or {}
    size = args.get("img_size")
    if isinstance(size, (list, tuple)) and len(size) == 2:
        height, width = _int(size[0], height), _int(size[1], width)
    elif size is not None:
        height = width = _int(size, height)
    channels = _int(args.get("in_chans"), channels)
    if size is not None or "in_chans" in args:
        origin = "img_size/in_chans from config.json's model_args, over timm's data config"
    spec = InputSpec(shape=(1, channels, height, width), dtype=dtype or _float_dtype(model), name=name)
    return spec, origin

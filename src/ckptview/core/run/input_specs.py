"""Test inputs for a forward pass: parse the `--input-shape` syntax and make the arrays (NumPy, seeded).

Syntax (documented in the README): inputs are separated by ';', each is

    [NAME:]SHAPE[@DTYPE][=FILL]

NAME is the forward's parameter the input goes to (`input_ids:1,8@int64=randint:0:100`); inputs that all
have names the forward declares are passed by keyword, others by position, in order. SHAPE is comma-separated sizes (`2,3,224,224`; `scalar` or `()` for a 0-d input). DTYPE is a torch dtype
name (`float32`, `bfloat16`, `int64`, ...). FILL is `normal` (standard normal, seeded), `zeros`, `ones`,
`full:V`, `uniform:LO:HI` (floats in [LO, HI)) or `randint:LO:HI` (integers in [LO, HI), as torch.randint).
Input number i is drawn from `numpy.random.default_rng([seed, i])`, so the same spec and seed give the same
values in any process. Values can also come from a `.npy` (one input) or `.npz` (one input per array).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ckptview.core import dtypes

if TYPE_CHECKING:
    import numpy as np

FILLS = ("normal", "zeros", "ones", "full", "uniform", "randint")
DEFAULT_FLOAT = "float32"
DEFAULT_INT = "int64"


class InputSpecError(ValueError):
    """The input spec text cannot be parsed; the message says which part and why."""


@dataclass(frozen=True)
class InputSpec:
    """One test input: its shape, torch dtype name and how to fill it."""

    shape: tuple[int, ...]
    dtype: str = DEFAULT_FLOAT
    fill: str = "normal"
    low: float = 0.0
    high: float = 1.0
    name: str = ""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form (sent to the worker)."""
        out = asdict(self)
        out["shape"] = list(self.shape)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InputSpec:
        """Inverse of `to_json`."""
        return cls(shape=tuple(int(s) for s in data["shape"]), dtype=data.get("dtype", DEFAULT_FLOAT),
                   fill=data.get("fill", "normal"), low=float(data.get("low", 0.0)),
                   high=float(data.get("high", 1.0)), name=data.get("name", ""))

    def text(self) -> str:
        """The spec back in the input syntax (its name first, when it has one)."""
        shape = ",".join(str(s) for s in self.shape) if self.shape else "scalar"
        if self.name:
            shape = f"{self.name}:{shape}"
        fill = self.fill
        if fill in ("uniform", "randint"):
            fill = f"{fill}:{_spec_number(self.low)}:{_spec_number(self.high)}"
        elif fill == "full":
            fill = f"full:{_spec_number(self.low)}"
        return f"{shape}@{self.dtype}={fill}"


def _spec_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def parse_input_specs(text: str, dtype: str | None = None, fill: str | None = None) -> list[InputSpec]:
    """Parse `2,3,224,224;2@int64=randint:0:10`; `dtype`/`fill` are defaults for parts that name none."""
    parts = [p.strip() for p in text.split(";")]
    if not text.strip():
        raise InputSpecError("empty input spec: give a shape such as 2,20")
    return [_parse_one(part, dtype, fill, index) for index, part in enumerate(parts)]


def _parse_one(part: str, default_dtype: str | None, default_fill: str | None, index: int) -> InputSpec:
    where = f"input {index + 1} ('{part}')"
    if not part:
        raise InputSpecError(f"input {index + 1} is empty: shapes are separated by ';'")
    name = ""
    named = _NAMED.match(part)
    if named is not None:
        name, part = named.group(1), part[named.end():].strip()
    shape_text, _, fill_text = part.partition("=")
    shape_text, _, dtype_text = shape_text.partition("@")
    shape = _parse_shape(shape_text.strip(), where)
    fill, low, high = _parse_fill((fill_text or default_fill or "normal").strip(), where)
    dtype_name = (dtype_text.strip() or default_dtype or (DEFAULT_INT if fill == "randint" else DEFAULT_FLOAT))
    dtype_name = dtypes.canonical(dtype_name)
    if not dtypes.is_known(dtype_name) or dtypes.is_quantized(dtype_name) or dtype_name.startswith("bits"):
        raise InputSpecError(f"{where}: unknown dtype '{dtype_name}'")
    return InputSpec(shape=shape, dtype=dtype_name, fill=fill, low=low, high=high, name=name)


# `NAME:` before a shape: an identifier (a shape starts with a digit, `(`, `[` or the word `scalar`, never `x:`).
_NAMED = re.compile(r"^([A-Za-z_][A-Za-z0-9_]{0,127})\s*:")


def _parse_shape(text: str, where: str) -> tuple[int, ...]:
    if text in ("scalar", "()", ""):
        if text == "":
            raise InputSpecError(f"{where}: missing shape")
        return ()
    sizes = []
    for item in text.strip("()[] ").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            size = int(item)
        except ValueError:
            raise InputSpecError(f"{where}: '{item}' is not a size (shapes are like 2,3,224,224)") from None
        if size < 0:
            raise InputSpecError(f"{where}: negative size {size}")
        sizes.append(size)
    return tuple(sizes)


def _parse_fill(text: str, where: str) -> tuple[str, float, float]:
    name, *args = text.split(":")
    name = name.strip().lower()
    if name not in FILLS:
        raise InputSpecError(f"{where}: unknown fill '{name}' (use {', '.join(FILLS)})")
    try:
        values = [float(a) for a in args]
    except ValueError:
        raise InputSpecError(f"{where}: fill '{text}' needs numbers after ':'") from None
    if name in ("uniform", "randint"):
        if len(values) != 2:
            raise InputSpecError(f"{where}: {name} needs a range, as {name}:LOW:HIGH")
        if values[1] <= values[0]:
            raise InputSpecError(f"{where}: {name} range is empty ({_spec_number(values[0])} >= {_spec_number(values[1])})")
        return name, values[0], values[1]
    if name == "full":
        if len(values) != 1:
            raise InputSpecError(f"{where}: full needs a value, as full:VALUE")
        return name, values[0], values[0]
    if values:
        raise InputSpecError(f"{where}: fill '{name}' takes no arguments")
    return name, 0.0, 1.0


def make_array(spec: InputSpec, seed: int = 0, index: int = 0) -> np.ndarray:
    """The values of one input as a NumPy array (float32 carries bf16/fp8/complex32 values; torch casts)."""
    import numpy as np

    np_dtype = _carrier(spec.dtype)
    rng = np.random.default_rng([seed, index])
    shape = spec.shape
    if spec.fill == "zeros":
        return np.zeros(shape, dtype=np_dtype)
    if spec.fill == "ones":
        return np.ones(shape, dtype=np_dtype)
    if spec.fill == "full":
        return np.full(shape, spec.low, dtype=np_dtype)
    if spec.fill == "randint":
        integers = rng.integers(math.ceil(spec.low), math.ceil(spec.high), size=shape, dtype=np.int64)
        return integers.astype(np_dtype)
    values: np.ndarray
    if spec.fill == "uniform":
        values = rng.uniform(spec.low, spec.high, size=shape)
    else:
        values = rng.standard_normal(size=shape)
    if np_dtype.kind == "c":
        values = values + 1j * rng.standard_normal(size=shape)
    if np_dtype.kind in "iub":
        # a float fill into an integer/bool dtype: round, as torch does when casting
        return np.asarray(np.rint(values)).astype(np_dtype)
    return np.asarray(values).astype(np_dtype)


def _carrier(dtype_name: str) -> np.dtype:
    """A NumPy dtype that torch.from_numpy accepts and that holds the values of `dtype_name`."""
    import numpy as np

    if dtype_name == "complex32":
        return np.dtype("complex64")
    np_dtype = dtypes.numpy_dtype(dtype_name)
    if np_dtype is None or np_dtype.type.__module__ != "numpy":
        return np.dtype("float32")  # bf16 / fp8 values are drawn in float32 and cast by torch
    return np_dtype


def load_input_file(path: str) -> list[tuple[str, np.ndarray]]:
    """Inputs from a `.npy` (one) or `.npz` (one per array, in file order); never unpickles."""
    import numpy as np

    if not os.path.exists(path):
        raise InputSpecError(f"input file not found: {path}")
    try:
        loaded = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise InputSpecError(f"cannot read input file {os.path.basename(path)}: {exc}") from None
    if isinstance(loaded, np.ndarray):
        return [(os.path.splitext(os.path.basename(path))[0], loaded)]
    with loaded:
        return [(name, loaded[name]) for name in loaded.files]


GUESS_BATCH = 2
GUESS_TOKENS = 16
# Names of token-embedding tables (the model takes integer ids); position/type tables are not inputs.
_TOKEN_TABLES = ("embed_tokens", "word_embeddings", "tok_embeddings", "token_embedding", "wte", "embed_in",
                 "embeddings", "embedding", "embed", "shared")
_NOT_TOKENS = ("pos", "position", "wpe", "type", "class", "time", "label", "rel")


def conv_input(in_channels: int, kernel: tuple[int, ...]) -> InputSpec:
    """A batch for a first convolution: 1 channel -> 28 x 28 (MNIST-like), a kernel of 7+ (ImageNet stems,
    ViT patches) -> 224, else 32 (CIFAR-like); 1-D convolutions get 128 steps, 3-D ones 8 frames."""
    big = max(kernel, default=1)
    if len(kernel) == 1:
        return InputSpec(shape=(GUESS_BATCH, in_channels, max(128, 4 * big)))
    side = 28 if in_channels == 1 else 224 if big >= 7 else 32
    side = max(side, big)
    frames = (max(8, kernel[0]),) if len(kernel) == 3 else ()
    return InputSpec(shape=(GUESS_BATCH, in_channels, *frames, side, side))


def token_input(num_embeddings: int) -> InputSpec:
    """A batch of integer ids in [0, num_embeddings) for a model whose first layer is an embedding."""
    return InputSpec(shape=(GUESS_BATCH, GUESS_TOKENS), dtype=DEFAULT_INT, fill="randint", low=0.0,
                     high=float(max(1, num_embeddings)))


def _is_token_table(name: str) -> bool:
    module = name.rsplit(".", 1)[0].lower() if "." in name else ""
    last = module.rsplit(".", 1)[-1]
    return any(t in last for t in _TOKEN_TABLES) and not any(w in last for w in _NOT_TOKENS)


def guess_inputs(weights: list[tuple[str, tuple[int, ...]]]) -> list[InputSpec] | None:
    """An input for a state dict from its weights (name, shape) in file order, without torch.

    A token-embedding table anywhere means integer ids (sorted safetensors names can put a head first);
    otherwise the first weight of two or more dimensions is the layer that takes the input: 4-D a Conv2d
    (N, C, H, W), 3-D a Conv1d, 5-D a Conv3d, 2-D a Linear (N, in_features). Norms and biases are skipped.
    """
    named = [(n, s) for n, s in weights if n.rsplit(".", 1)[-1] in ("weight", "weight_orig")]
    for name, shape in named:
        if len(shape) == 2 and _is_token_table(name):
            return [token_input(int(shape[0]))]
    for _name, shape in named:
        if 3 <= len(shape) <= 5:
            return [conv_input(int(shape[1]), tuple(int(k) for k in shape[2:]))]
        if len(shape) == 2:
            return [InputSpec(shape=(GUESS_BATCH, int(shape[1])))]
    return None


def describe_inputs(specs: list[InputSpec]) -> str:
    """The specs back in the `--input-shape` syntax."""
    return ";".join(s.text() for s in specs)


def program_inputs(signature: Any) -> list[InputSpec] | None:
    """The user inputs of a .pt2 signature (`torch_export.signature`) as input specs, or None when one is not a
    tensor of concrete shape and known dtype (several programs: the one named 'model', which torch loads)."""
    if isinstance(signature, dict) and "inputs" not in signature:
        signature = signature.get("model")
    if not isinstance(signature, dict):
        return None
    specs = []
    for item in signature.get("inputs") or []:
        if not isinstance(item, dict) or item.get("kind") != "user_input":
            continue
        shape, dtype = item.get("shape"), item.get("dtype")
        if not isinstance(dtype, str) or not isinstance(shape, list) or not all(
                type(s) is int and s >= 0 for s in shape):
            return None
        specs.append(InputSpec(shape=tuple(shape), dtype=dtype, name=str(item.get("name") or "")))
    return specs or None

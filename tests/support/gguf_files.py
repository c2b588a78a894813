"""GGUF files written at test time: with the gguf package's own writer and quantizer (`write_gguf`, `blocks_of`), as
llama.cpp's converter writes a tiny Llama (`convert_llama`), or byte by byte for files that lie (`RawGguf`).

gguf's Python package quantizes F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0 and MXFP4 only (the
K-quants and IQ types are quantized by llama.cpp's C code); their blocks are made here from random bytes, each
block redrawn until the package's own `dequantize` gives finite values, which is all a block format requires of
its bytes: the reference the tests hold ckptview to is that `dequantize`.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

# Block types gguf quantizes from floats; the others' blocks are drawn at random (see the module docstring).
QUANTIZED_BY_GGUF = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4")
DRAWN = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
         "IQ2_S", "IQ4_XS", "IQ1_M", "NVFP4")


def qtype(name: str) -> Any:
    import gguf

    return gguf.GGMLQuantizationType[name]


def blocks_of(name: str, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The stored bytes of `values` (float32, rows of whole blocks) in ggml type `name`: quantized by gguf where it
    can, else random blocks of the same shape (finite under gguf's dequantize)."""
    import gguf

    kind = qtype(name)
    if name in ("F32", "F16", "BF16") or name in QUANTIZED_BY_GGUF:
        return gguf.quants.quantize(values.astype(np.float32), kind)
    block, size = gguf.GGML_QUANT_SIZES[kind]
    rows, cols = values.reshape(-1, values.shape[-1]).shape
    blocks = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
    if name == "Q8_K":  # gguf has no Q8_K dequantize: a finite float32 scale, llama.cpp's layout
        blocks[:, :4] = (rng.standard_normal((len(blocks), 1)).astype(np.float32) * 0.01).view(np.uint8)
    else:
        while True:
            with np.errstate(all="ignore"):
                bad = ~np.isfinite(gguf.quants.dequantize(blocks, kind)).all(axis=-1)
            if not bad.any():
                break
            blocks[bad] = rng.integers(0, 256, (int(bad.sum()), size), dtype=np.uint8)
    return blocks.reshape(*values.shape[:-1], cols // block * size)


def q8_k_reference(blocks: np.ndarray) -> np.ndarray:
    """llama.cpp's `dequantize_row_q8_K` (ggml-quants.c): y[j] = d * q[j] per block of 256, in float32."""
    flat = blocks.reshape(-1, 292)
    d = flat[:, :4].copy().view(np.float32)
    q = flat[:, 4:260].view(np.int8).astype(np.float32)
    return (d * q).reshape(*blocks.shape[:-1], blocks.shape[-1] // 292 * 256)


def write_gguf(path: Path, tensors: dict[str, tuple[np.ndarray, str]], arch: str = "llama",
               metadata: dict[str, Any] | None = None) -> Path:
    """A GGUF file written by gguf's `GGUFWriter`: each tensor's stored array (`blocks_of`) and ggml type."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in (metadata or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_array(key, list(value))
    for name, (data, kind) in tensors.items():
        raw = None if kind in ("F32", "F16") else qtype(kind)
        writer.add_tensor(name, data, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- a tiny Llama, converted as llama.cpp's convert_hf_to_gguf.py converts it -------------------------------

def permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """convert_hf_to_gguf.py's `LlamaModel.permute` (the rows of q/k regrouped for llama.cpp's rope)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def convert_llama(folder: Path, out: Path, types: dict[str, str], default: str = "Q8_0",
                  rng: np.random.Generator | None = None) -> dict[str, tuple[str, str]]:
    """A GGUF of the Hugging Face Llama in `folder` (safetensors + config.json), as llama.cpp's converter makes it:
    names mapped with gguf's `TensorNameMap`, q/k rows permuted, 1-D tensors in F32, each matrix in the ggml type
    `types` names for it (by the end of its GGUF name, e.g. "attn_q.weight") or `default`. Returns
    {gguf name: (hf name, ggml type)}."""
    import json

    import gguf
    from safetensors.torch import load_file

    rng = rng or np.random.default_rng(0)
    config = json.loads((folder / "config.json").read_text())
    tensors = {k: v.float().numpy() for k, v in load_file(str(folder / "model.safetensors")).items()}
    n_layers, n_head = config["num_hidden_layers"], config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_head)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layers)
    written: dict[str, tuple[np.ndarray, str]] = {}
    mapping: dict[str, tuple[str, str]] = {}
    for hf_name, value in tensors.items():
        data = np.asarray(value, dtype=np.float32)
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, hf_name
        if hf_name.endswith("q_proj.weight"):
            data = permute(data, n_head, n_head)
        elif hf_name.endswith("k_proj.weight"):
            data = permute(data, n_head, n_kv)
        kind = "F32" if data.ndim == 1 else next((t for end, t in types.items() if gguf_name.endswith(end)), default)
        written[gguf_name] = (blocks_of(kind, data, rng), kind)
        mapping[gguf_name] = (hf_name, kind)
    meta = {"llama.block_count": n_layers, "llama.context_length": config.get("max_position_embeddings", 64),
            "llama.embedding_length": config["hidden_size"], "llama.feed_forward_length": config["intermediate_size"],
            "llama.attention.head_count": n_head, "llama.attention.head_count_kv": n_kv,
            "llama.rope.dimension_count": config["hidden_size"] // n_head, "general.file_type": 7}
    write_gguf(out, written, "llama", meta)
    return mapping


# -- files that lie, byte by byte -------------------------------------------------------------------------

class RawGguf:
    """A GGUF file put together by hand: any count, length, type or offset, true or not."""

    def __init__(self, version: int = 3, order: str = "<") -> None:
        self.order = order
        self.version = version
        self.kv: list[bytes] = []
        self.infos: list[bytes] = []
        self.n_kv: int | None = None
        self.n_tensors: int | None = None
        self.data = b""
        self.alignment = 32

    def s(self, text: str | bytes, length: int | None = None) -> bytes:
        raw = text.encode() if isinstance(text, str) else text
        return struct.pack(self.order + "Q", len(raw) if length is None else length) + raw

    def add_kv(self, key: str, type_id: int, payload: bytes) -> RawGguf:
        self.kv.append(self.s(key) + struct.pack(self.order + "I", type_id) + payload)
        return self

    def add_u32(self, key: str, value: int) -> RawGguf:
        return self.add_kv(key, 4, struct.pack(self.order + "I", value))

    def add_tensor(self, name: str, dims: tuple[int, ...], type_id: int, offset: int,
                   n_dims: int | None = None) -> RawGguf:
        self.infos.append(self.s(name) + struct.pack(self.order + "I", len(dims) if n_dims is None else n_dims)
                          + struct.pack(f"{self.order}{len(dims)}Q", *dims)
                          + struct.pack(self.order + "IQ", type_id, offset))
        return self

    def bytes(self) -> bytes:
        head = (b"GGUF" + struct.pack(self.order + "I", self.version)
                + struct.pack(self.order + "QQ", len(self.infos) if self.n_tensors is None else self.n_tensors,
                              len(self.kv) if self.n_kv is None else self.n_kv)
                + b"".join(self.kv) + b"".join(self.infos))
        pad = -len(head) % self.alignment
        return head + b"\0" * pad + self.data

    def write(self, path: Path) -> Path:
        path.write_bytes(self.bytes())
        return path

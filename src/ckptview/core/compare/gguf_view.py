"""A GGUF side of a comparison seen as the Hugging Face model it was converted from: its names mapped and the
rows of its attention q/k weights put back in the model's order.

llama.cpp's converter (convert_hf_to_gguf.py) renames every tensor with the `gguf` package's `TensorNameMap`
(`model.layers.0.self_attn.q_proj.weight` -> `blk.0.attn_q.weight`) and, for the architectures whose rope
llama.cpp computes on interleaved pairs (Llama and the models converted as it is), permutes the rows of the
q and k projections within each head (`LlamaModel.permute`: a head's rows `(2, d/2)` become `(d/2, 2)`). To
compare a GGUF file with the model it came from, `side_views` maps the GGUF side's names with the same
`TensorNameMap`, built for the file's architecture and block count, applied the way the converter applies it:
each name of the other side is mapped to the GGUF name it would get, and the GGUF tensor of that name takes
it. A q/k weight is then read through a decoder that undoes the permutation, with the head counts of the
file's metadata (`<arch>.attention.head_count`, `head_count_kv`; per-layer arrays too). Nothing of the
mapping tables is copied here: the `gguf` package is asked.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint, Storage, TensorInfo
from ckptview.core.compare.diff import SideView
from ckptview.core.read.formats.gguf_header import GgufArray
from ckptview.core.read.quant.protocol import Decoder
from ckptview.core.read.quant.source import QuantSource
from ckptview.core.read.values.reading import read_region

if TYPE_CHECKING:
    import numpy as np

    from ckptview.core.read.bytes.files import ReadAhead

__all__ = ["PERMUTED", "gguf_view", "side_views"]

# GGUF architectures whose converter permutes q/k rows as `LlamaModel.permute` does (convert_hf_to_gguf.py: the
# models of `LlamaModel` with `undo_permute`, and Deci, MiniCPM, OLMo, Arctic, DeepSeek, BailingMoE, Chameleon,
# Granite, which call it).
PERMUTED = frozenset({"llama", "deci", "minicpm", "olmo", "arctic", "deepseek", "bailingmoe", "chameleon",
                      "granite", "granitemoe"})
_BLOCK = re.compile(r"blk\.(\d+)\.")
SUFFIXES = (".weight", ".bias")


def side_views(a: Checkpoint, b: Checkpoint) -> tuple[SideView | None, SideView | None]:
    """How each side of a comparison of `a` and `b` is seen: a GGUF side against a checkpoint of another format
    as that checkpoint's model (names, q/k rows); None for a side seen as it is."""
    return gguf_view(a, b), gguf_view(b, a)


def gguf_view(ckpt: Checkpoint, other: Checkpoint) -> SideView | None:
    """`ckpt` (a GGUF file) seen with the names of `other`'s model; None when `ckpt` is no GGUF file, `other`
    is one too, or the gguf package does not know the file's architecture."""
    if ckpt.format != "gguf" or other.format == "gguf":
        return None
    meta: dict[str, Any] = ckpt.metadata.get("gguf") or {}
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        return None
    try:
        import gguf
    except ImportError:
        return None
    model_arch = {name: key for key, name in gguf.MODEL_ARCH_NAMES.items()}.get(arch)
    if model_arch is None:
        return None
    names = [e.name for e in ckpt.tensors()]
    blocks = 1 + max((int(m.group(1)) for n in names if (m := _BLOCK.match(n))), default=-1)
    budget = Budget.for_stored(ckpt.file_size, "mapping a GGUF file's tensor names")
    per_block = sum(1 + len(keys) for keys in gguf.TensorNameMap.block_mappings_cfg.values())
    budget.charge(blocks * per_block, "names of blocks mapped")
    table = _name_map(gguf, model_arch, blocks)
    present = set(names)
    renamed: dict[str, str] = {}
    for entry in other.tensors():
        target = table.get_name(entry.name, try_suffixes=SUFFIXES)
        if target is not None and target in present and target not in renamed:
            renamed[target] = entry.name
    permuted: dict[str, int] = {}
    if arch in PERMUTED:
        kinds = {gguf.MODEL_TENSOR.ATTN_Q: "q", gguf.MODEL_TENSOR.ATTN_K: "k"}
        for name in names:
            found = table.get_type_and_name(name, try_suffixes=SUFFIXES)
            if found is not None and found[0] in kinds and name.endswith(".weight"):
                heads = _heads(meta, arch, kinds[found[0]], _block_of(name))
                if heads:
                    permuted[name] = heads

    def rename(name: str) -> str:
        return renamed.get(name, name)

    def transform(name: str, info: TensorInfo) -> TensorInfo:
        heads = permuted.get(name)
        return info if heads is None else unpermuted(info, heads)

    return SideView(rename=rename, transform=transform)


_MAP_LOCK = threading.Lock()


def _name_map(gguf: Any, arch: Any, blocks: int) -> Any:
    """gguf's `TensorNameMap` for `arch`: its constructor merges an architecture's own block names (Arctic's)
    into the class's shared table, so the table is put back after it (under a lock: comparisons run in
    jobs), and a later map of another architecture is not built with them."""
    shared = gguf.TensorNameMap.block_mappings_cfg
    with _MAP_LOCK:
        saved = dict(shared)
        try:
            return gguf.get_tensor_name_map(arch, blocks)
        finally:
            shared.clear()
            shared.update(saved)


def _block_of(name: str) -> int | None:
    found = _BLOCK.match(name)
    return int(found.group(1)) if found else None


def _heads(meta: dict[str, Any], arch: str, which: str, block: int | None) -> int | None:
    """The head count the converter permuted a q (`which` "q") or k weight of `block` with."""
    def count(key: str) -> int | None:
        value = meta.get(f"{arch}.attention.{key}")
        if isinstance(value, GgufArray):
            whole = value.whole
            value = whole[block] if whole is not None and block is not None and block < len(whole) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    n_head = count("head_count")
    if which == "q":
        return n_head
    n_kv = count("head_count_kv")
    return n_kv if n_kv is not None else n_head


def unpermuted(info: TensorInfo, heads: int) -> TensorInfo:
    """`info` (a GGUF q/k weight, rows permuted by `LlamaModel.permute` with `heads`) with its rows in the model's
    order, read a few heads at a time; `info` itself when its rows are no whole pairs of `heads` heads."""
    if info.broken or len(info.shape) != 2 or info.shape[0] % (2 * heads) or info.storage is None:
        return info
    rows, cols = info.shape
    source = info.storage.source
    inner = source.decoder if isinstance(source, QuantSource) else _PlainRows(info)
    decoder = _Unpermute(inner, rows // heads)
    stored = info.quant.stored_bytes if info.quant is not None else info.nbytes
    label = info.quant.label if info.quant is not None else info.dtype
    out = TensorInfo(info.dtype, info.shape, info.stride, 0,
                     Storage(f"{info.storage.key} (q/k rows unpermuted)", info.dtype, info.numel,
                             source=QuantSource(info.shape, decoder, label, stored)))
    out.quant = info.quant
    return out


class _PlainRows:
    """Rows of a plain tensor as float32 (the values are exact in it)."""

    def __init__(self, info: TensorInfo) -> None:
        self.info = info

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        import numpy as np

        return read_region(self.info, (slice(r0, r1),), ahead).astype(np.float32)

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray | None:
        return None


class _Unpermute:
    """Rows of a weight whose rows llama.cpp's converter permuted within each head of `head_dim` rows: GGUF row
    `h d + 2 i + j` is the model's row `h d + j d/2 + i`. The heads a block of rows spans are read whole."""

    def __init__(self, inner: Decoder, head_dim: int) -> None:
        self.inner = inner
        self.head_dim = head_dim

    def rows(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray:
        d = self.head_dim
        h0, h1 = r0 // d, -(-r1 // d)
        block: np.ndarray = self.inner.rows(h0 * d, h1 * d, ahead)
        cols = block.shape[1]
        model: np.ndarray = block.reshape(h1 - h0, d // 2, 2, cols).swapaxes(1, 2).reshape((h1 - h0) * d, cols)
        return model[r0 - h0 * d : r1 - h0 * d]

    def codes(self, r0: int, r1: int, ahead: ReadAhead | None = None) -> np.ndarray | None:
        return None

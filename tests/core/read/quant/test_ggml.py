"""GGUF's block formats dequantized: ckptview's values equal `gguf.quants.dequantize` of the same bytes bit for bit,
for every ggml type the gguf package writes or reads, in files written by gguf's own `GGUFWriter`."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from ckptview.core.read import open_checkpoint
from ckptview.core.read.quant import ggml
from ckptview.core.read.values.reading import iter_chunks, read_region, read_values
from tests.support.gguf_files import DRAWN, QUANTIZED_BY_GGUF, blocks_of, q8_k_reference, write_gguf

TYPES = ("F32", "F16", "BF16", *QUANTIZED_BY_GGUF, *DRAWN)


def test_the_type_table_is_gguf_s():
    sizes = {t.value: (t.name, *gguf.GGML_QUANT_SIZES[t]) for t in gguf.GGMLQuantizationType}
    assert {k: tuple(v) for k, v in ggml.TYPES.items()} == sizes
    names = {f.value: f.name.removeprefix("MOSTLY_").removeprefix("ALL_") for f in gguf.LlamaFileType}
    assert names == ggml.FILE_TYPES
    decoded = {t.name for t in gguf.GGMLQuantizationType if t.name not in ggml.PLAIN
               and hasattr(getattr(gguf.quants, t.name, None), "dequantize_blocks")}
    assert decoded | ggml.HAND_WRITTEN == ggml.DECODED


def _bits(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("kind", TYPES)
def test_values_equal_gguf_dequantize_bit_for_bit(tmp_path, kind):
    rng = np.random.default_rng(sum(map(ord, kind)))
    block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[kind]][0]
    cols = 2 * max(block, 32)
    weights = {"blk.0.ffn_up.weight": rng.standard_normal((7, cols)).astype(np.float32) * 0.05,
               "blk.0.ffn_gate_exps.weight": rng.standard_normal((2, 3, cols)).astype(np.float32)}
    tensors = {name: (blocks_of(kind, w, rng), kind) for name, w in weights.items()}
    path = write_gguf(tmp_path / f"{kind}.gguf", tensors)
    reader = gguf.GGUFReader(str(path))
    ckpt = open_checkpoint(str(path))
    for t in reader.tensors:
        ref = q8_k_reference(np.asarray(t.data)) if kind == "Q8_K" else gguf.quants.dequantize(t.data, t.tensor_type)
        info = ckpt.tensor(t.name)
        assert info.broken is None
        assert info.shape == tuple(reversed(t.shape.tolist())) == ref.shape
        values = read_values(info)
        if kind in ggml.PLAIN:  # a plain tensor in its own dtype (float16, bfloat16): exact in float32
            assert values.dtype.name == ggml.PLAIN[kind]
            values = values.astype(np.float32)
        assert values.dtype == ref.dtype == np.float32
        assert np.array_equal(_bits(values), _bits(ref)), (kind, t.name)
        # streamed in blocks of a few rows, and a region of rows: the same values
        chunks = np.concatenate(list(iter_chunks(info, cols + 1))).astype(np.float32)
        assert np.array_equal(_bits(chunks), _bits(ref.reshape(-1)))
        assert np.array_equal(_bits(read_region(info, (slice(1, 2),)).astype(np.float32)), _bits(ref[1:2]))
        if kind not in ggml.PLAIN:
            assert info.quant.label == f"gguf {kind}"
            assert info.quant.group_size == block
    ckpt.close()


def test_a_type_gguf_cannot_dequantize_lists_its_blocks(tmp_path):
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, (4, 2 * 40), dtype=np.uint8)  # Q8_1: 32 weights in 40 bytes
    path = write_gguf(tmp_path / "q81.gguf", {"w": (raw, "Q8_1")})
    ckpt = open_checkpoint(str(path))
    info = ckpt.tensor("w")
    assert info.shape == (4, 64)
    assert info.broken == ("gguf Q8_1 is not dequantized (the gguf package has no dequantization for it): its raw "
                           "blocks are listed")
    (part,) = ckpt.parts_of(info)
    assert np.array_equal(read_values(part.info), raw)
    ckpt.close()


@pytest.mark.parametrize("kind", sorted(ggml.UNIT_SCALES))
def test_the_codes_are_the_stored_integers(tmp_path, kind):
    """A block type's codes (the histogram's view of its levels), 0 .. 2**bits - 1: Q4_0's nibbles and Q8_0's bytes
    as their layout stores them; every type's dequantized weight is its scales applied to them."""
    rng = np.random.default_rng(1)
    block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[kind]][0]
    blocks = blocks_of(kind, rng.standard_normal((4, 2 * block)).astype(np.float32), rng)
    ckpt = open_checkpoint(str(write_gguf(tmp_path / "c.gguf", {"w": (blocks, kind)})))
    source = ckpt.tensor("w").storage.source
    codes = np.concatenate(list(source.iter_codes(1 << 16))).reshape(4, 2 * block)
    bits = ggml.TYPES[gguf.GGMLQuantizationType[kind].value].bits
    assert codes.min() >= 0 and codes.max() < 2 ** bits
    if kind == "Q4_0":  # 2 bytes of scale, then 16 bytes: weight j < 16 the low nibble of byte j, else the high
        qs = blocks.reshape(-1, 18)[:, 2:]
        assert np.array_equal(codes.reshape(-1, 32), np.concatenate([qs & 0x0F, qs >> 4], axis=1))
    if kind == "Q8_0":  # 2 bytes of scale, then 32 signed bytes
        q = blocks.reshape(-1, 34)[:, 2:].view(np.int8).astype(np.int32)
        assert np.array_equal(codes.reshape(-1, 32), q + 128)
    if kind == "Q6_K":  # d (f16 at 208) x the int8 scale of each 16 weights (at 192) x (q - 32)
        flat = blocks.reshape(-1, 210)
        d = flat[:, 208:210].copy().view(np.float16).astype(np.float32)
        scale = np.repeat(flat[:, 192:208].view(np.int8).astype(np.float32), 16, axis=1)
        want = (d * scale) * (codes.reshape(-1, 256) - 32).astype(np.float32)
        assert np.array_equal(want, gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q6_K).reshape(-1, 256))
    ckpt.close()

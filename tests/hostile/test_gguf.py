"""Hostile GGUF files: what they declare is checked against the bytes they hold before anything is read, each
problem gets one line, the raw bytes stay listed, nothing is computed past the stored bytes and the work of an
open or a figure is bounded by the file's bytes. (The corpus of lying headers is in tests/support/corpus.py,
which test_malformed.py and the window's test open too.)"""

from __future__ import annotations

import struct
import tracemalloc

import numpy as np
import pytest

from ckptview.core.budget import BudgetExceeded
from ckptview.core.compare.diff import diff_checkpoints
from ckptview.core.compare.gguf_view import side_views
from ckptview.core.errors import CheckpointError, TensorDataError
from ckptview.core.figures.stats import tensor_stats
from ckptview.core.read import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.gguf_files import RawGguf, blocks_of, write_gguf

FOUR = np.arange(4, dtype=np.float32)


def _good() -> RawGguf:
    raw = RawGguf().add_tensor("good", (4,), 0, 0)
    raw.data = FOUR.tobytes() + bytes(28)
    return raw


def test_an_unknown_type_keeps_its_raw_bytes_up_to_the_next_tensor(tmp_path):
    raw = RawGguf().add_tensor("odd", (64,), 99, 0).add_tensor("good", (4,), 0, 32)
    raw.data = bytes(range(32)) + FOUR.tobytes()
    ckpt = open_checkpoint(str(raw.write(tmp_path / "odd.gguf")))
    info = ckpt.tensor("odd")
    assert info.shape == (64,) and info.broken == "ggml type 99 is unknown: its raw bytes are listed"
    assert info.quant.label == "gguf type 99"
    with pytest.raises(TensorDataError):
        read_values(info)
    (part,) = ckpt.parts_of(info)
    assert np.array_equal(read_values(part.info), np.arange(32, dtype=np.uint8))  # up to the next tensor
    assert np.array_equal(read_values(ckpt.tensor("good")), FOUR)
    assert ckpt.warnings == ["tensor 'odd' is broken: ggml type 99 is unknown: its raw bytes are listed"]
    ckpt.close()


def test_bytes_past_the_end_are_never_read(tmp_path):
    raw = _good().add_tensor("cut", (32, 2), 8, 32)  # Q8_0, 2 rows of 32 (dims fastest first): 68 bytes, none there
    ckpt = open_checkpoint(str(raw.write(tmp_path / "cut.gguf")))
    info = ckpt.tensor("cut")
    assert info.broken == "its 68 bytes at 160 lie past the end of the file (172 bytes)"
    for tensor in (info, ckpt.parts_of(info)[0].info):
        with pytest.raises(TensorDataError, match="past the end"):
            read_values(tensor)
    ckpt.close()


def test_a_vocabulary_of_a_million_strings_is_walked_not_kept(tmp_path):
    strings = b"".join(struct.pack("<Q", 1) + b"x" for _ in range(1_000_000))
    raw = _good().add_kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 1_000_000) + strings)
    ckpt = open_checkpoint(str(raw.write(tmp_path / "vocab.gguf")))
    (tokens,) = [n.value for n in ckpt.values() if n.key == "tokenizer.ggml.tokens"]
    assert tokens.count == 1_000_000 and len(tokens.head) == 8
    ckpt.close()


def test_a_string_longer_than_shown_is_cut_and_skipped(tmp_path):
    template = "{% x %}" * 20_000  # 140,000 characters: more than a metadata string keeps
    raw = _good().add_kv("tokenizer.chat_template", 8, struct.pack("<Q", len(template)) + template.encode())
    ckpt = open_checkpoint(str(raw.write(tmp_path / "template.gguf")))
    (value,) = [n.value for n in ckpt.values() if n.key == "tokenizer.chat_template"]
    assert value.endswith("... (140,000 bytes)") and len(value) < 70_000
    assert np.array_equal(read_values(ckpt.tensor("good")), FOUR)
    ckpt.close()


def test_dequantizing_holds_a_block_not_the_weight(tmp_path):
    """Statistics of a 2048 x 4096 Q4_K weight (32 MiB as float32) read a block of rows at a time."""
    rng = np.random.default_rng(0)
    blocks = blocks_of("Q4_K", np.zeros((2048, 4096), np.float32), rng)
    ckpt = open_checkpoint(str(write_gguf(tmp_path / "big.gguf", {"w": (blocks, "Q4_K")})))
    info = ckpt.tensor("w")
    tensor_stats(info, chunk_elems=1 << 18)  # warm: imports, the package's first use
    tracemalloc.start()
    try:
        stats = tensor_stats(info, chunk_elems=1 << 18)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stats.numel == 2048 * 4096
    assert peak < 24 << 20, f"{peak / 2**20:.1f} MiB at its peak for a 32 MiB weight"
    ckpt.close()


def test_a_block_index_no_file_pays_for_is_refused_when_mapping_names(tmp_path):
    """The name map is built for the blocks the file's names say: `blk.1000000000` in a small file is refused
    in one line, not a billion blocks' names built."""
    raw = _good().add_kv("general.architecture", 8, struct.pack("<Q", 5) + b"llama")
    raw.add_tensor("blk.1000000000.attn_q.weight", (4,), 0, 32)
    raw.data += FOUR.tobytes()
    gguf_path = raw.write(tmp_path / "blocks.gguf")
    from safetensors.numpy import save_file

    save_file({"model.layers.0.self_attn.q_proj.weight": FOUR}, str(tmp_path / "base.safetensors"))
    a, b = open_checkpoint(str(tmp_path / "base.safetensors")), open_checkpoint(str(gguf_path))
    with pytest.raises(BudgetExceeded, match="mapping a GGUF file's tensor names") as caught:
        side_views(a, b)
    assert "\n" not in str(caught.value) and isinstance(caught.value, CheckpointError)
    a.close()
    b.close()


def test_head_counts_that_fit_no_rows_leave_the_rows_as_stored(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((12, 32)).astype(np.float32)
    path = write_gguf(tmp_path / "m.gguf", {"blk.0.attn_q.weight": (w, "F32")}, "llama",
                      {"llama.attention.head_count": 5, "llama.block_count": 1})
    from safetensors.numpy import save_file

    save_file({"model.layers.0.self_attn.q_proj.weight": w}, str(tmp_path / "base.safetensors"))
    a, b = open_checkpoint(str(tmp_path / "base.safetensors")), open_checkpoint(str(path))
    result = diff_checkpoints(a, b, views=side_views(a, b))
    (row,) = result.tensors
    assert row.name == "model.layers.0.self_attn.q_proj.weight" and row.status == "identical"
    a.close()
    b.close()

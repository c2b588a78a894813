"""GGUF files as gguf's own writer writes them: the listing equals `gguf.GGUFReader`'s (names, shapes in torch's
order, types, offsets, bytes), the metadata are the checkpoint's values (long arrays summarized), the parameter
count is the tensors' elements, `info --json` gives each quantized tensor's scheme, and export writes the stored
blocks or the dequantized weights bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file

from ckptview.core.inspect.summary import size_facts
from ckptview.core.read import open_checkpoint
from ckptview.core.read.bytes.sources import FileSlice
from ckptview.core.read.values.reading import read_values
from tests.support.gguf_files import blocks_of, write_gguf

TOKENS = ["<unk>", "<s>", "</s>"] + [f"tok{i}" for i in range(5000)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small Q4_K_M-like file: K-quant and Q8_0 matrices, F16 embeddings, F32 norms, a 5,003-token vocabulary."""
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": ((64, 256), "F16"), "output_norm.weight": ((256,), "F32")}
    for i in range(2):
        shapes |= {f"blk.{i}.attn_norm.weight": ((256,), "F32"), f"blk.{i}.attn_q.weight": ((256, 256), "Q4_K"),
                   f"blk.{i}.attn_k.weight": ((64, 256), "Q4_K"), f"blk.{i}.attn_v.weight": ((64, 256), "Q6_K"),
                   f"blk.{i}.attn_output.weight": ((256, 256), "Q4_K"), f"blk.{i}.ffn_up.weight": ((512, 256), "Q8_0"),
                   f"blk.{i}.ffn_down.weight": ((256, 512), "Q6_K"), f"blk.{i}.ffn_gate_exps.weight": ((2, 8, 256), "Q5_0")}
    tensors = {name: (blocks_of(kind, rng.standard_normal(shape).astype(np.float32) * 0.02, rng), kind)
               for name, (shape, kind) in shapes.items()}
    meta = {"llama.block_count": 2, "llama.context_length": 4096, "llama.embedding_length": 256,
            "llama.attention.head_count": 4, "llama.attention.head_count_kv": 1, "general.file_type": 15,
            "general.name": "tiny", "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": TOKENS,
            "tokenizer.ggml.scores": [float(i) for i in range(len(TOKENS))], "llama.rope.sections": [4, 4, 8]}
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tensors, "llama", meta)


def test_the_listing_is_gguf_readers(model):
    reader = gguf.GGUFReader(str(model))
    ckpt = open_checkpoint(str(model))
    assert ckpt.format == "gguf"
    entries = ckpt.tensors()
    assert [e.name for e in entries] == [t.name for t in reader.tensors]
    for entry, t in zip(entries, reader.tensors, strict=True):
        info = entry.info
        assert info.shape == tuple(reversed(t.shape.tolist())) == t.data.shape[:-1] + (
            info.shape[-1],)  # GGUF's dims reversed: torch's order
        assert info.numel == t.n_elements
        kind = t.tensor_type.name
        if info.quant is not None:
            assert info.quant.scheme == "gguf" and info.quant.facts["ggml_type"] == kind
            assert info.quant.label == f"gguf {kind}"
            assert info.nbytes == info.quant.stored_bytes == t.n_bytes
            (part,) = ckpt.parts_of(info)
            assert part.name == t.name and part.info.dtype == "uint8" and part.info.shape == t.data.shape
            source = part.info.storage.source
            assert info.quant.bits_per_weight == pytest.approx(8 * t.n_bytes / t.n_elements)
        else:
            assert info.dtype == {"F32": "float32", "F16": "float16"}[kind]
            assert info.nbytes == t.n_bytes
            source = info.storage.source
        assert isinstance(source, FileSlice)
        assert (source.offset, source.length) == (t.data_offset, t.n_bytes)
    assert ckpt.metadata["data_offset"] == reader.data_offset and ckpt.metadata["alignment"] == reader.alignment
    assert size_facts(ckpt).parameters == sum(t.n_elements for t in reader.tensors)
    ckpt.close()


def test_the_metadata_are_the_values_long_arrays_summarized(model):
    ckpt = open_checkpoint(str(model))
    values = {name: node.value for name, _path, node in ckpt.value_entries()}
    assert values["metadata.general.architecture"] == "llama"
    assert values["metadata.llama.context_length"] == 4096
    assert values["metadata.general.file_type"] == "15 (Q4_K_M)"
    assert values["metadata.llama.rope.sections"].whole == (4, 4, 8)  # short: kept whole
    assert repr(values["metadata.llama.rope.sections"]) == "[3 x int32: 4, 4, 8]"
    tokens = values["metadata.tokenizer.ggml.tokens"]
    assert repr(tokens) == "[5,003 x string: '<unk>', '<s>', '</s>', 'tok0', 'tok1', 'tok2', 'tok3', 'tok4', ...]"
    assert tokens.count == 5003 and tokens.whole is None
    assert repr(values["metadata.tokenizer.ggml.scores"]).startswith("[5,003 x float32: 0.0, 1.0,")
    types = {name: node.type_name for name, _path, node in ckpt.value_entries()}
    assert types["metadata.tokenizer.ggml.tokens"] == "array[string]"
    assert types["metadata.llama.block_count"] == "uint32"
    ckpt.close()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckptview", *args], capture_output=True, text=True, timeout=120)


def test_info_json_gives_each_quantized_tensors_scheme(model):
    proc = _cli("info", str(model), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    rows = [t for t in data["tensors"] if t["name"] == "blk.0.attn_q.weight"]
    logical, part = rows
    assert logical["shape"] == [256, 256] and logical["dtype"] == "float32" and "part_of" not in logical
    q = logical["quantization"]
    assert (q["scheme"], q["label"], q["bits"], q["group_size"], q["bits_per_weight"], q["ggml_type"]) == (
        "gguf", "gguf Q4_K", 4, 256, 4.5, "Q4_K")
    assert q["parts"] == ["blk.0.attn_q.weight"] and q["stored_bytes"] == 256 * 144
    assert part["part_of"] == "blk.0.attn_q.weight" and part["dtype"] == "uint8" and part["shape"] == [256, 144]
    assert data["parameters"] == sum(np.prod(t["shape"]) for t in data["tensors"] if "part_of" not in t)
    proc = _cli("info", str(model))
    assert "quantized: 14 weights (gguf Q4_K; gguf Q5_0; gguf Q6_K; gguf Q8_0)" in proc.stdout
    assert "metadata.tokenizer.ggml.tokens = [5,003 x string: '<unk>'" in proc.stdout


def test_export_writes_the_blocks_or_the_dequantized_weights(model, tmp_path):
    reader = gguf.GGUFReader(str(model))
    proc = _cli("export", str(model), "--out", str(tmp_path / "raw.safetensors"))
    assert proc.returncode == 0, proc.stderr
    raw = load_file(str(tmp_path / "raw.safetensors"))
    for t in reader.tensors:
        assert np.array_equal(raw[t.name], np.asarray(t.data)), t.name
    proc = _cli("export", str(model), "--out", str(tmp_path / "deq.safetensors"), "--dequantize", "float32")
    assert proc.returncode == 0, proc.stderr
    deq = load_file(str(tmp_path / "deq.safetensors"))
    for t in reader.tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type)
        got = deq[t.name].astype(np.float32)
        assert got.shape == ref.shape and np.array_equal(got.view(np.uint32), ref.view(np.uint32)), t.name


def test_a_big_endian_file_reads_as_gguf_reads_it(tmp_path):
    """gguf's writer byte-swaps plain arrays for a big-endian file and leaves blocks as they are: so does the read."""
    path = tmp_path / "be.gguf"
    writer = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG)
    writer.add_context_length(4096)
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    writer.add_tensor("f32", x.copy())
    writer.add_tensor("f16", x.astype(np.float16))
    writer.add_tensor("q8", gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    ckpt = open_checkpoint(str(path))
    assert ckpt.metadata["byte_order"] == "big"
    assert {n.key: n.value for n in ckpt.values()}["llama.context_length"] == 4096
    for t in gguf.GGUFReader(str(path)).tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type) if t.tensor_type.name == "Q8_0" else np.asarray(t.data)
        assert np.array_equal(read_values(ckpt.tensor(t.name)).astype(np.float32), ref.astype(np.float32)), t.name
    ckpt.close()

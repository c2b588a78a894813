"""What converting to GGUF cost: `diff base/ model.gguf` of a Hugging Face Llama and a GGUF made from it as llama.cpp's
converter makes it (names mapped by gguf's TensorNameMap, q/k rows permuted, quantized by gguf) aligns every tensor
by its Hugging Face name, undoes the permutation, and gives per-weight figures equal to a float64 computation on the
base and transformers' own GGUF loading (its dequantization and reverse permutation) of the same file."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ckptview.core.compare.diff import diff_checkpoints
from ckptview.core.compare.gguf_view import side_views
from ckptview.core.read import open_checkpoint
from tests.support.gguf_files import convert_llama

pytestmark = pytest.mark.slow  # a tiny Llama built and loaded by transformers: ~15 s for the module

TYPES = {"attn_q.weight": "Q4_0", "attn_k.weight": "Q5_1", "attn_v.weight": "Q8_0", "ffn_down.weight": "Q4_1",
         "ffn_up.weight": "Q5_0", "token_embd.weight": "F16"}


def tiny_llama(folder: Path, with_tokenizer: bool = False) -> None:
    """A tiny LlamaForCausalLM (4 heads, 2 kv heads, head dim 64) saved with save_pretrained in bf16."""
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"<0x{i:02X}>": 3 + i for i in range(256)}
    for ch in "\u2581abcdefghijklmnopqrstuvwxyz":
        vocab.setdefault(ch, len(vocab))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    if with_tokenizer:  # a byte-fallback BPE, as llama.cpp's converter reads a Llama tokenizer.json
        from tokenizers import Tokenizer, decoders, models, normalizers
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
        PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                unk_token="<unk>").save_pretrained(folder)


def transformers_reference(folder: Path, gguf_path: Path) -> dict[str, torch.Tensor]:
    """The GGUF's tensors as transformers loads them: HF names, dequantized by gguf, q/k rows reverse-permuted."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    model = LlamaForCausalLM(LlamaConfig.from_pretrained(folder))
    loaded = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=model)
    return {k: torch.as_tensor(np.asarray(v, dtype=np.float32)) for k, v in loaded["tensors"].items()}


def float64_figures(base: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    out = {}
    for name, q in ref.items():
        w, qd = base[name].double().reshape(-1), q.double().reshape(-1)
        err = qd - w
        out[name] = {"rel_error": float(err.norm() / w.norm()), "sqnr_db": 10 * math.log10(float(w.dot(w) / err.dot(err))),
                     "max_abs_error": float(err.abs().max()), "cosine": float(w.dot(qd) / (w.norm() * qd.norm()))}
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf_cost")
    tiny_llama(root / "base")
    mapping = convert_llama(root / "base", root / "model.gguf", TYPES)
    return root, mapping


def _check(base_dir: Path, gguf_path: Path, quantized: set[str]) -> None:
    base = load_file(str(base_dir / "model.safetensors"))
    ref = transformers_reference(base_dir, gguf_path)
    assert set(ref) == set(base)
    expected = float64_figures(base, ref)
    a, b = open_checkpoint(str(base_dir)), open_checkpoint(str(gguf_path))
    result = diff_checkpoints(a, b, views=side_views(a, b))
    data = json.loads(json.dumps(result.to_json()))
    rows = {t["name"]: t for t in data["tensors"]}
    assert set(rows) == set(base)  # every GGUF tensor aligned by its Hugging Face name
    assert not [t for t in data["tensors"] if t["status"] in ("only_a", "only_b", "shape_mismatch", "error")]
    for name, want in expected.items():
        assert rows[name]["rel_l2"] == pytest.approx(want["rel_error"], rel=1e-9, abs=1e-15), name
        assert rows[name]["max_abs_diff"] == pytest.approx(want["max_abs_error"], rel=1e-9, abs=1e-15), name
    cost = data["quantization"]
    assert {r["name"] for r in cost["worst"]} == quantized
    for row in cost["worst"]:
        for key in ("rel_error", "sqnr_db", "max_abs_error", "cosine"):
            assert row[key] == pytest.approx(expected[row["name"]][key], rel=1e-9, abs=1e-15), (row["name"], key)
    ww = sum(float(base[n].double().pow(2).sum()) for n in quantized)
    ee = sum(float((ref[n].double() - base[n].double()).pow(2).sum()) for n in quantized)
    assert cost["rel_error"] == pytest.approx(math.sqrt(ee / ww), rel=1e-9)
    a.close()
    b.close()


def test_each_weight_equals_float64_on_transformers_loading(pair):
    root, mapping = pair
    quantized = {hf for hf, kind in mapping.values() if kind not in ("F32", "F16")}
    _check(root / "base", root / "model.gguf", quantized)


def test_without_the_view_nothing_aligns_and_with_it_q_k_rows_are_the_models(pair):
    root, _mapping = pair
    a, b = open_checkpoint(str(root / "base")), open_checkpoint(str(root / "model.gguf"))
    plain = diff_checkpoints(a, b)
    assert {t.status for t in plain.tensors} == {"only_a", "only_b"}
    views = side_views(a, b)
    assert views[0] is None and views[1] is not None
    result = diff_checkpoints(a, b, views=views)
    q = next(t for t in result.tensors if t.name == "model.layers.0.self_attn.q_proj.weight")
    assert q.rel_l2 < 0.2  # Q4_0 of unpermuted rows; permuted rows would differ by ~1.4 (uncorrelated)
    a.close()
    b.close()


def test_the_command_line_says_what_converting_cost(pair):
    root, _mapping = pair
    proc = subprocess.run([sys.executable, "-m", "ckptview", "diff", str(root / "base"), str(root / "model.gguf")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert ("What quantization cost (gguf Q4_0; gguf Q4_1; gguf Q5_0; gguf Q5_1; gguf Q8_0): 15 quantized weights "
            "compared") in proc.stdout


LLAMA_CPP = os.environ.get("CKPTVIEW_LLAMA_CPP")  # a llama.cpp checkout (its convert_hf_to_gguf.py and gguf-py)


@pytest.mark.skipif(not LLAMA_CPP, reason="llama.cpp's converter is not committed: set CKPTVIEW_LLAMA_CPP to a "
                                          "llama.cpp checkout to run it on the tiny Llama")
def test_llama_cpps_own_converter(tmp_path):
    tiny_llama(tmp_path / "base", with_tokenizer=True)
    env = dict(os.environ)
    try:
        import sentencepiece  # noqa: F401
    except ImportError:  # older gguf-py imports it at the top; the tiny tokenizer.json never uses it
        (tmp_path / "stub").mkdir()
        (tmp_path / "stub" / "sentencepiece.py").write_text("class SentencePieceProcessor:\n    pass\n")
        env["PYTHONPATH"] = str(tmp_path / "stub")
    out = tmp_path / "model.gguf"
    proc = subprocess.run([sys.executable, str(Path(LLAMA_CPP) / "convert_hf_to_gguf.py"), str(tmp_path / "base"),
                           "--outfile", str(out), "--outtype", "q8_0"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    base = load_file(str(tmp_path / "base" / "model.safetensors"))
    _check(tmp_path / "base", out, {n for n, t in base.items() if t.dim() == 2})

"""Checkpoints the sweep tests read, written at test time by the libraries people use."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def llama_folder(tmp_path_factory):
    """A tiny Llama as transformers saves it: safetensors shards, an index, a config."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    folder = tmp_path_factory.mktemp("sweep") / "llama"
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="100KB")
    return folder


@pytest.fixture(scope="session")
def mixed_pt(tmp_path_factory):
    """A torch.save state dict of every kind of value the figures meet: float32 large enough to be cut in
    blocks, bf16, integers, NaN and infinities, a tied view, an empty tensor, a broken-free conv kernel."""
    torch.manual_seed(1)
    big = torch.randn(3_000_000)
    nan = torch.randn(1000, 8)
    nan[3, 1], nan[7, 2], nan[9, 0] = float("nan"), float("inf"), float("-inf")
    emb = torch.randn(300, 32)
    state = {"big": big, "emb.weight": emb, "head.weight": emb, "conv.weight": torch.randn(16, 8, 3, 3),
             "wide.weight": torch.randn(1024, 2048), "tall.weight": torch.randn(3000, 700),
             "bf16.weight": torch.randn(64, 48).bfloat16(), "steps": torch.arange(77), "nan": nan,
             "empty": torch.zeros(0, 4), "scalar": torch.tensor(3.5), "half": torch.randn(40, 40).half()}
    path = tmp_path_factory.mktemp("sweep") / "mixed.pt"
    torch.save(state, path)
    return path

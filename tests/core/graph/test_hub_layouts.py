"""Keys in the Hub's layout, placed as the library's loading converts them (issue 44, finding 5).

transformers 5 saves GPT-NeoX, Mixtral, ViT and Swin in their Hub key layout and converts the keys when it
loads them (renames, and Mixtral's experts merged into one tensor). `graph` peeled wrapper prefixes only: 1,
26, 32 and 26 keys were "unread" and the LM head, the experts and the attention projections read no tensor.
The worker now tells how the library's own rules convert the checkpoint's key names (names only, no file),
and every key is placed. Folders written by the library at test time, traced once each (a cache of the
module's own), then read again from the cache with no worker at all.
"""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from ckptview.core.graph import library as graph_library
from ckptview.core.graph import read_graph
from ckptview.core.graph.cache import GraphCache
from ckptview.core.read.open import open_checkpoint

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

MODELS = {
    "neox": lambda t: t.GPTNeoXForCausalLM(t.GPTNeoXConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64)),
    "mixtral": lambda t: t.MixtralForCausalLM(t.MixtralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64)),
    "vit": lambda t: t.ViTForImageClassification(t.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
        patch_size=8)),
    "swin": lambda t: t.SwinForImageClassification(t.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=2)),
}
CONVERTED = {"neox": 1, "mixtral": 26, "vit": 32, "swin": 26}  # the keys left unread before


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("hub")
    out = {}
    for name, make in MODELS.items():
        torch.manual_seed(0)
        make(transformers).save_pretrained(root / name)
        out[name] = str(root / name)
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    cache = GraphCache(str(tmp_path_factory.mktemp("cache") / "graphs.sqlite3"))
    yield cache
    cache.close()


def _graph(path: str, cache: GraphCache):
    checkpoint = open_checkpoint(path)
    try:
        return read_graph(checkpoint, cache=cache)
    finally:
        checkpoint.close()


def _file_keys(folder: str) -> set[str]:
    with safe_open(f"{folder}/model.safetensors", "pt") as f:
        return set(f.keys())


@pytest.mark.parametrize("name", list(MODELS))
def test_every_key_of_a_hub_layout_is_placed(folders, cache, name) -> None:
    keys = _file_keys(folders[name])
    model_keys = set(MODELS[name](transformers).state_dict())
    assert len(keys - model_keys) >= CONVERTED[name]  # the file is in the Hub's layout, not the model's
    graph = _graph(folders[name], cache)
    assert graph.unread == [] and set(graph.placed()) == keys
    assert any(f"{CONVERTED[name]} of the checkpoint's keys are in the Hub's layout" in n for n in graph.notes)
    readers = {n.module: n for n in graph.nodes if n.params}
    if name == "neox":  # the LM head reads its own tensor
        assert readers["lm_head"].params == ("embed_out.weight",)  # the Hub calls it embed_out
    elif name == "mixtral":  # the experts' merged tensors are read by the expert nodes, all 4 experts' keys
        read = {k for n in graph.nodes if n.module.endswith("mlp.experts") for k in n.params}
        assert {f"model.layers.0.block_sparse_moe.experts.{e}.w{w}.weight" for e in range(4) for w in (1, 2, 3)} <= read
    else:  # the attention projections read the Hub's query, key and value
        q = next(n for n in graph.nodes if n.module.endswith("layers.0.attention.q_proj")
                 or n.module.endswith("layers.0.blocks.0.attention.q_proj"))
        assert q.params and all("query" in k for k in q.params)


def test_a_hub_layout_read_again_needs_no_worker(folders, cache, monkeypatch) -> None:
    """The trace and the key map are both kept: the same folder draws again with no worker."""
    _graph(folders["mixtral"], cache)

    def no_worker(*args, **kwargs):
        raise AssertionError("a worker was started")
        yield

    monkeypatch.setattr(graph_library, "execute", no_worker)
    assert _graph(folders["mixtral"], cache).unread == []

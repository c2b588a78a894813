"""A state dict whose architecture an installed library names: traced on meta in the worker, every key placed.

One worker traces the tiny Llama of the module's fixture (cached in a database of the test's own); every
other check reads the cache, which is keyed by what was traced, not by the file: a training checkpoint of
the same architecture draws with no worker at all.
"""

from __future__ import annotations

import json
import operator
import os
import re
import shutil
from collections import Counter

import pytest
import torch
from safetensors.torch import save_file

from ckptview.core.errors import CheckpointError
from ckptview.core.graph import ModelGraph, graph_source, read_graph
from ckptview.core.graph import library as graph_library
from ckptview.core.graph.cache import GraphCache
from ckptview.core.read.open import open_checkpoint
from ckptview.core.run.architectures import recognize

transformers = pytest.importorskip("transformers")

CONFIG = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("llama")
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> GraphCache:
    cache = GraphCache(str(tmp_path_factory.mktemp("cache") / "graphs.sqlite3"))
    yield cache
    cache.close()


sent_requests: list[dict] = []  # the requests the module's one worker was sent


@pytest.fixture(scope="module")
def traced(llama: str, cache: GraphCache) -> ModelGraph:
    """The folder's graph, traced by a worker (the one of this module), its request kept in sent_requests."""
    real = graph_library.execute

    def spy(request, timeout, token=None):
        sent_requests.append(json.loads(json.dumps(request)))
        return (yield from real(request, timeout, token))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph_library, "execute", spy)
        return _graph(llama, cache)


def _graph(path: str, cache: GraphCache) -> ModelGraph:
    checkpoint = open_checkpoint(path)
    try:
        return read_graph(checkpoint, cache=cache)
    finally:
        checkpoint.close()


def _reference_ops(folder: str) -> list[str]:
    """torch.export of the same class built from the folder's config on meta, tied as the library ties it."""
    config = transformers.LlamaConfig.from_pretrained(folder)
    config.use_cache = False
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).eval()
    model.tie_weights()
    inputs = {"input_ids": torch.zeros((1, 8), dtype=torch.int64, device="meta"),
              "attention_mask": torch.ones((1, 8), dtype=torch.int64, device="meta")}
    with torch.no_grad():
        program = torch.export.export(model, (), inputs, strict=False)
    return ["getitem" if n.target is operator.getitem else str(n.target)
            for n in program.graph.nodes if n.op == "call_function"]


@pytest.mark.slow
def test_a_save_pretrained_folder_gets_its_librarys_graph_with_every_key_placed(llama: str, traced: ModelGraph) -> None:
    assert traced.source == "transformers:LlamaForCausalLM"
    ops = [n.op for n in traced.nodes if n.op not in ("input", "output")]
    assert ops == _reference_ops(llama)
    checkpoint = open_checkpoint(llama)
    keys = {e.name for e in checkpoint.tensors()}
    checkpoint.close()
    placed = traced.placed()
    assert set(placed) == keys and traced.unread == []
    # The LM head is tied to the embedding: the file keeps one name, and both nodes read it.
    head = next(n for n in traced.nodes if n.module == "lm_head")
    embedding = next(n for n in traced.nodes if n.op == "aten.embedding.default")
    assert head.params == embedding.params == ("model.embed_tokens.weight",)
    q = next(n for n in traced.nodes if n.module == "model.layers.1.self_attn.q_proj")
    assert q.op == "aten.linear.default" and q.params == ("model.layers.1.self_attn.q_proj.weight",)
    assert [n.id for n in traced.nodes if n.op == "input"] == ["input_ids", "attention_mask"]
    assert next(n for n in traced.nodes if n.id == "input_ids").shape == (1, 8)


def test_the_worker_is_told_the_architecture_and_shapes_never_the_file(llama: str, traced) -> None:
    """The request names no path: the worker has nothing to read, no weights, no pickle, no gate to pass."""
    checkpoint = open_checkpoint(llama)
    arch = recognize(llama, {e.name: e.info for e in checkpoint.tensors()})
    request = graph_library.trace_request(arch, graph_library.float_dtype(checkpoint))
    request["keys"] = [e.name for e in checkpoint.tensors()]  # names, so the worker says how the library converts them
    checkpoint.close()
    text = json.dumps(request)
    assert "path" not in request and llama not in text and os.path.basename(llama) not in text
    assert set(request) == {"op", "architecture", "preprocessor", "dtype", "keys", "expect"} and request["op"] == "graph"
    # What the build is held against (issue 43): the file's tensor count, elements and shapes, never a name.
    assert set(request["expect"]) == {"tensors", "elements", "shapes"} and "weight" not in json.dumps(request["expect"])
    assert sent_requests == [request]  # what the worker was sent, exactly
    assert set(request["architecture"]) == {"library", "class", "source", "config"}


def test_a_training_checkpoint_of_the_same_architecture_draws_from_the_cache(llama: str, cache: GraphCache, traced,
                                                                             tmp_path, monkeypatch) -> None:
    """Keyed by the config and the library's version, not the file: a prefixed training checkpoint beside the
    same config.json starts no worker; its keys are placed under their own names, an extra one is unread."""
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(os.path.join(llama, "config.json"), folder / "config.json")
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
    state = {f"module.{k}": v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    state["module.extra_probe.weight"] = torch.zeros(3)
    torch.save({"state_dict": state, "epoch": 3}, folder / "step.pt")

    def no_worker(*args, **kwargs):
        raise AssertionError("a worker was started for a cached architecture")
        yield

    monkeypatch.setattr(graph_library, "execute", no_worker)
    graph = _graph(str(folder / "step.pt"), cache)
    placed = graph.placed()
    assert placed["state_dict.module.model.layers.0.mlp.up_proj.weight"] == \
        traced.placed()["model.layers.0.mlp.up_proj.weight"]
    assert graph.unread == ["state_dict.module.extra_probe.weight"]
    assert set(placed) == {f"state_dict.{k}" for k in state} - {"state_dict.module.extra_probe.weight"}
    assert any("prefix 'module.'" in n for n in graph.notes)


def test_a_config_that_ships_its_own_code_gets_the_module_tree(tmp_path, monkeypatch) -> None:
    """auto_map names code beside the weights: refused as a run refuses it, no worker, the modules drawn."""
    folder = tmp_path / "remote_code"
    folder.mkdir()
    save_file({"encoder.layer.0.w": torch.zeros(2, 2), "encoder.layer.0.b": torch.zeros(2), "head.w": torch.zeros(2)},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architectures": ["EvilModel"], "model_type": "evil",
                                                    "auto_map": {"AutoModel": "modeling_evil.EvilModel"}}))

    def no_worker(*args, **kwargs):
        raise AssertionError("a worker was started")
        yield

    monkeypatch.setattr(graph_library, "execute", no_worker)
    graph = _graph(str(folder / "model.safetensors"), GraphCache(str(tmp_path / "c.sqlite3")))
    assert graph.source == "module-tree"
    assert [(n.id, n.op, n.params) for n in graph.nodes] == [
        ("encoder.layer.0", "module", ("encoder.layer.0.b", "encoder.layer.0.w")), ("head", "module", ("head.w",))]
    assert all(not n.inputs for n in graph.nodes)  # no edges invented
    assert "auto_map" in graph.notes[0] and "without data flow" in graph.notes[0]


def test_a_trace_that_fails_draws_the_module_tree_saying_why(llama: str, tmp_path, monkeypatch) -> None:
    from ckptview.core.run.process import RunError

    def failing(*args, **kwargs):
        raise RunError("cannot trace transformers LlamaForCausalLM: torch.export: boom", kind="exception")
        yield

    monkeypatch.setattr(graph_library, "execute", failing)
    graph = _graph(llama, GraphCache(str(tmp_path / "c.sqlite3")))
    assert graph.source == "inferred" and len(graph.nodes) > 5  # drawn from the names, said to be a guess
    assert graph.notes[0].startswith("transformers LlamaForCausalLM from config.json: no graph could be traced")
    assert "looks like a Llama-style decoder: 2 layers of attention + gated MLP (a guess" in graph.notes[-1]


def test_a_plain_state_dict_gets_a_graph_inferred_from_its_names(tmp_path) -> None:
    path = tmp_path / "plain.pth"
    torch.save({"conv.weight": torch.zeros(2, 1, 3, 3), "conv.bias": torch.zeros(2), "scale": torch.ones(1),
                "blocks.0.fc.weight": torch.zeros(2, 2)}, path)
    checkpoint = open_checkpoint(str(path))
    assert graph_source(checkpoint)[0] == "inferred"
    graph = read_graph(checkpoint)
    checkpoint.close()
    assert [(n.id, n.op, n.module, n.params) for n in graph.nodes] == [
        ("(input)", "input", "", ()), ("conv", "Conv2d", "conv", ("conv.weight", "conv.bias")),
        ("(top)", "module", "", ("scale",)), ("blocks.0.fc", "Linear", "blocks.0.fc", ("blocks.0.fc.weight",)),
        ("(output)", "output", "", ())]
    assert graph.nodes[1].inputs == ("(input)",) and graph.nodes[3].inputs == ("conv",)  # 2 channels in, 2 out
    assert graph.notes == ["a state dict holds no graph, and no installed library names this architecture",
                           "inferred from the key names and shapes alone (nothing traced, no code run): looks like "
                           "a convolutional network (a guess from the key names)"]
    assert graph.unread == [] and Counter(n.op for n in graph.nodes)["module"] == 1


def test_a_cache_entry_that_is_not_a_graph_is_traced_again(llama: str, tmp_path, traced, monkeypatch) -> None:
    """The cache is never the truth: a damaged entry is dropped and the architecture traced again."""
    cache = GraphCache(str(tmp_path / "c.sqlite3"))
    checkpoint = open_checkpoint(llama)
    arch = recognize(llama, {e.name: e.info for e in checkpoint.tensors()})
    key = graph_library.request_key(graph_library.trace_request(arch, graph_library.float_dtype(checkpoint)))
    checkpoint.close()
    cache.put(key, {"graph": {"source": "x", "nodes": [{"id": "a", "op": "b", "inputs": ["nowhere"]}]},
                    "model_keys": []})
    calls = []

    def fake(request, timeout, token=None):
        calls.append(request)
        return traced_json
        yield

    traced_json = graph_library.Traced(traced).to_json()
    monkeypatch.setattr(graph_library, "execute", fake)
    _graph(llama, cache)
    assert len(calls) == 1
    assert graph_library.Traced.from_json(cache.get(key)).graph.source == traced.source
    cache.close()


def test_a_malformed_answer_of_the_worker_is_one_line(llama: str, tmp_path, monkeypatch) -> None:
    def bad(*args, **kwargs):
        return {"graph": {"source": "x", "nodes": [{"id": "a", "op": 3}]}, "model_keys": []}
        yield

    monkeypatch.setattr(graph_library, "execute", bad)
    checkpoint = open_checkpoint(llama)
    arch = recognize(llama, {e.name: e.info for e in checkpoint.tensors()})
    with pytest.raises(CheckpointError, match=re.escape("malformed graph: traced graph.nodes[0].op: expected a string")):
        list(graph_library.library_graph(checkpoint, arch, cache=GraphCache(str(tmp_path / "c.sqlite3"))))
    checkpoint.close()


@pytest.mark.slow
def test_a_diffusers_unet_gets_its_graph_with_every_key_placed(tmp_path) -> None:
    """A UNet2DConditionModel folder: traced with a latent, a timestep and text states of its config's sizes."""
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    unet = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)
    unet.save_pretrained(tmp_path / "unet")
    cache = GraphCache(str(tmp_path / "c.sqlite3"))
    graph = _graph(str(tmp_path / "unet"), cache)
    cache.close()
    assert graph.source == "diffusers:UNet2DConditionModel"
    assert [(n.id, n.shape) for n in graph.nodes if n.op == "input"] == [
        ("sample", (1, 4, 8, 8)), ("timestep", ()), ("encoder_hidden_states", (1, 8, 32))]
    assert set(graph.placed()) == set(unet.state_dict()) and graph.unread == []
    assert Counter(n.op for n in graph.nodes)["aten.conv2d.default"] == sum(
        isinstance(m, torch.nn.Conv2d) for m in unet.modules())


def test_cancelling_a_trace_stops_its_worker(llama: str, tmp_path) -> None:
    from ckptview.core.errors import Cancelled
    from ckptview.core.jobs import CancelToken

    token = CancelToken()
    steps = []

    def cancel_once_started(step) -> None:
        steps.append(step)
        if step.message == "starting the worker to trace the architecture":
            token.cancel()

    cache = GraphCache(str(tmp_path / "c.sqlite3"))
    checkpoint = open_checkpoint(llama)
    try:
        with pytest.raises(Cancelled, match="cancelled during"):
            read_graph(checkpoint, token, on_progress=cancel_once_started, cache=cache)
    finally:
        checkpoint.close()
        cache.close()
    assert steps[0].message == "starting the worker to trace the architecture"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "inputs"), [("t5", ["input_ids", "attention_mask", "decoder_input_ids"]),
                                              ("whisper", ["input_features", "decoder_input_ids"])])
def test_a_model_is_traced_with_the_inputs_it_declares(name, inputs, tmp_path) -> None:
    """The trace feeds what a run feeds (`declared_inputs`): an encoder-decoder its decoder ids, Whisper its
    input_features. Token ids and a mask alone failed both traces, and the graph fell back to the module tree."""
    from tests.support.library_matrix import CASES, write_folder

    folder = write_folder(next(c for c in CASES if c.name == name), "safetensors fp32", str(tmp_path))
    cache = GraphCache(str(tmp_path / "c.sqlite3"))
    graph = _graph(folder, cache)
    cache.close()
    assert graph.source == f"transformers:{CASES[[c.name for c in CASES].index(name)].cls}"
    assert [n.id for n in graph.nodes if n.op == "input"] == inputs
    assert graph.unread == []

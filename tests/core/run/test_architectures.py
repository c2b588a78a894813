"""A forward pass with no code of the user's own: the architecture from the installed library that wrote the
folder, the outputs equal to the library's own loading path, and nothing from the folder ever run.

Each model here is tiny and built by its library in tmp_path; no download. Tests that run a worker import
the library twice (here for the reference, in the worker for the run), so each checks several things.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ckptview import cli
from ckptview.core.run.architectures import ArchitectureRefused, recognize
from ckptview.core.run.result import InputReport
from ckptview.core.worker.forward import output_stats
from tests.support.library_matrix import remade_inputs


def run_json(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, dict | None, str]:
    status = cli.main(["run", *args, "--json", "--runs", "1", "--warmup", "0"])
    out = capsys.readouterr()
    return status, (json.loads(out.out) if status == 0 else None), out.err


def assert_same_outputs(result: dict, reference: dict) -> None:
    """Each named output's shape and float64 statistics equal the reference's (bit-equal tensors give equal
    statistics; one changed value changes the mean)."""
    got = {o["name"]: o for o in result["outputs"]}
    for name, tensor in reference.items():
        assert name in got, (name, list(got))
        assert got[name]["shape"] == list(tensor.shape)
        stats = output_stats(tensor)
        assert got[name]["stats"]["mean"] == stats.mean and got[name]["stats"]["max"] == stats.max, name
        assert got[name]["stats"]["std"] == stats.std, name


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    folder = tmp_path_factory.mktemp("llama")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=True)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    # A word-level tokenizer over the same 64 ids, saved as data (tokenizer.json).
    words = ["[UNK]", "The", "capital", "of", "France", "is", "Paris"] + [f"w{i}" for i in range(57)]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    return str(folder)


@pytest.mark.slow
def test_llama_folder_runs_as_its_library_loads_it(llama, tmp_path, capsys):
    import transformers

    ids = np.array([[1, 2, 3, 4, 5, 9, 10, 11]], dtype=np.int64)
    mask = np.ones_like(ids)
    np.savez(tmp_path / "x.npz", input_ids=ids, attention_mask=mask)
    status, result, err = run_json(capsys, llama, "--input-file", str(tmp_path / "x.npz"))
    assert status == 0, err
    assert result["architecture"] == {"library": "transformers", "class": "LlamaForCausalLM",
                                      "source": "config.json"}
    assert result["source"] == "library"
    # The LM head is tied to the embedding: loaded through its twin, never "left at its initial value".
    assert result["warnings"] == [] and result["load"]["missing"] == []
    assert result["load"]["tied"] == {"lm_head.weight": "model.embed_tokens.weight"}
    assert [i["name"] for i in result["inputs"]] == ["input_ids", "attention_mask"]

    reference = transformers.LlamaForCausalLM.from_pretrained(llama).eval()
    with torch.no_grad():
        out = reference(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), use_cache=False)
    assert_same_outputs(result, {"logits": out.logits})

    # Next-token top-k from the folder's tokenizer, as the library's own model ranks them.
    tokens = result["next_tokens"]
    assert tokens["prompt"] == "The capital of France is"
    with torch.no_grad():
        logits = reference(input_ids=torch.tensor([[1, 2, 3, 4, 5]]), use_cache=False).logits[0, -1]
    probs = torch.softmax(logits.double(), -1)
    top = torch.topk(probs, 5)
    assert [t["id"] for t in tokens["top"]] == top.indices.tolist()
    assert [t["prob"] for t in tokens["top"]] == pytest.approx(top.values.tolist(), rel=1e-12)


@pytest.mark.slow
def test_default_inputs_come_from_the_config_and_meta_reads_no_weights(llama, capsys):
    status, result, err = run_json(capsys, llama, "--device", "meta")
    assert status == 0, err
    inputs = {i["name"]: i for i in result["inputs"]}
    assert inputs["input_ids"]["shape"] == [1, 8] and inputs["input_ids"]["dtype"] == "int64"
    assert inputs["input_ids"]["origin"] == ("input_ids: its main_input_name; ids below the config's "
                                             "vocab_size 64")
    assert inputs["input_ids"]["high"] == 64  # token ids inside the vocabulary
    assert inputs["input_ids"]["spec"] == "input_ids:1,8@int64=randint:0:64"
    assert result["load"]["bytes_moved"] == 0
    (logits,) = [o for o in result["outputs"] if o["name"] == "logits"]
    assert logits["shape"] == [1, 8, 64] and logits["stats"] is None and logits["device"] == "meta"
    assert "next_tokens" not in result  # nothing to rank on meta


@pytest.mark.slow
def test_bert_outputs_are_named_by_its_output_fields(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32)
    folder = tmp_path / "bert"
    transformers.BertModel(config).save_pretrained(folder)
    status, result, err = run_json(capsys, str(folder))
    assert status == 0, err
    assert result["architecture"]["class"] == "BertModel"
    assert {o["name"] for o in result["outputs"]} == {"last_hidden_state", "pooler_output"}
    inputs = remade_inputs([InputReport.from_json(i) for i in result["inputs"]])
    assert list(inputs) == ["input_ids", "attention_mask"]
    reference = transformers.BertModel.from_pretrained(folder).eval()
    with torch.no_grad():
        out = reference(**inputs)
    assert_same_outputs(result, {"last_hidden_state": out.last_hidden_state, "pooler_output": out.pooler_output})


@pytest.mark.slow
def test_diffusers_unet_runs_with_latents_and_a_timestep(tmp_path, capsys):
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(2)
    unet = diffusers.UNet2DModel(sample_size=8, in_channels=3, out_channels=3, block_out_channels=(8, 16),
                                 layers_per_block=1, norm_num_groups=4,
                                 down_block_types=("DownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "UpBlock2D"))
    folder = tmp_path / "unet"
    unet.save_pretrained(folder)
    status, result, err = run_json(capsys, str(folder))
    assert status == 0, err
    assert result["architecture"] == {"library": "diffusers", "class": "UNet2DModel", "source": "config.json"}
    assert [(i["name"], i["shape"]) for i in result["inputs"]] == [("sample", [1, 3, 8, 8]), ("timestep", [])]
    inputs = remade_inputs([InputReport.from_json(i) for i in result["inputs"]])
    # diffusers keeps the weights where safetensors' memory map put them (4 bytes off a 64-byte boundary here,
    # where CPU matrix kernels round differently); ckptview places them alike, so the outputs are its own.
    reference = diffusers.UNet2DModel.from_pretrained(folder).eval()
    with torch.no_grad():
        out = reference(**inputs)
    assert_same_outputs(result, {"sample": out.sample})


def test_auto_map_is_refused_and_nothing_from_the_folder_runs(tmp_path, capsys):
    folder = tmp_path / "remote-code"
    folder.mkdir()
    marker = tmp_path / "RAN"
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["EvilModel"], "model_type": "evil",
        "auto_map": {"AutoModel": "modeling_evil.EvilModel"}}))
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    status, _, err = run_json(capsys, str(folder))
    assert status == 2
    assert err.count("\n") == 1 and "auto_map" in err and "never runs code" in err
    assert not marker.exists()


@pytest.mark.slow
def test_unknown_architecture_is_refused_in_one_line(tmp_path, capsys):
    pytest.importorskip("transformers")
    folder = tmp_path / "unknown"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["NoSuchModelForCausalLM"],
                                                    "model_type": "llama"}))
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    status, _, err = run_json(capsys, str(folder))
    assert status == 2 and err.count("\n") == 1
    assert "does not know the model class NoSuchModelForCausalLM" in err


def test_a_library_that_is_not_installed_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    from ckptview.core.run import architectures

    real = architectures.importlib.util.find_spec
    monkeypatch.setattr(architectures.importlib.util, "find_spec",
                        lambda name, *a: None if name == "timm" else real(name, *a))
    folder = tmp_path / "timm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architecture": "resnet18", "num_classes": 10,
                                                    "pretrained_cfg": {"input_size": [3, 32, 32]}}))
    torch.save({"fc.weight": torch.zeros(10, 512)}, folder / "pytorch_model.bin")
    status, _, err = run_json(capsys, str(folder))
    assert status == 2 and err.count("\n") == 1
    # timm and torchvision are not in the models extra: the advice names the one that brings them.
    assert "timm resnet18 from config.json: timm is not installed (pip install 'ckptview[vision]'" in err


def test_recognition_reads_configs_as_data(tmp_path):
    def folder_with(config: dict) -> str:
        path = tmp_path / str(len(os.listdir(tmp_path)))
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
        return str(path)

    assert recognize(folder_with({"_class_name": "AutoencoderKL", "in_channels": 3})).describe() == \
        "diffusers AutoencoderKL from config.json"
    timm = recognize(folder_with({"architecture": "vit_tiny_patch16_224", "num_classes": 5,
                                  "pretrained_cfg": {"input_size": [3, 224, 224]}}))
    assert (timm.library, timm.cls) == ("timm", "vit_tiny_patch16_224")
    with pytest.raises(ArchitectureRefused, match="not a class name"):
        recognize(folder_with({"architectures": ["os.system"], "model_type": "llama"}))
    with pytest.raises(ArchitectureRefused, match="auto_map"):
        recognize(folder_with({"architectures": ["X"], "model_type": "x", "auto_map": {"AutoModel": "a.B"}}))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("[1, 2")
    with pytest.raises(ArchitectureRefused, match="not valid JSON"):
        recognize(str(tmp_path / "bad"))
    assert recognize(folder_with({"hidden": 3})) is None  # a config that names no architecture


def test_torchvision_resnets_are_recognised_by_keys_and_shapes():
    def info(*shape: int) -> SimpleNamespace:
        return SimpleNamespace(shape=shape)

    tensors = {"conv1.weight": info(64, 3, 7, 7), "fc.weight": info(10, 512)}
    for stage, count in enumerate((2, 2, 2, 2), start=1):
        for block in range(count):
            tensors[f"layer{stage}.{block}.conv1.weight"] = info(64, 64, 3, 3)
    arch = recognize("/nonexistent/weights.pth", tensors)
    assert arch is not None and arch.describe() == "torchvision resnet18 from keys and shapes"
    assert arch.config == {"num_classes": 10, "in_channels": 3}
    tensors["layer1.0.conv3.weight"] = info(256, 64, 1, 1)  # a bottleneck with 2-2-2-2 blocks: no ResNet
    assert recognize("/nonexistent/weights.pth", tensors) is None


@pytest.mark.slow
def test_a_remote_model_folder_runs_from_its_config_and_weights_only(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("fsspec")
    from tests.support.remote_server import RangeServer

    torch.manual_seed(4)
    config = transformers.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16)
    root = tmp_path / "served"
    folder = root / "bert"
    transformers.BertModel(config).save_pretrained(folder)
    (folder / "modeling_evil.py").write_text("raise SystemExit('never fetched, never run')\n")
    (folder / "optimizer.bin").write_bytes(b"\0" * (1 << 20))  # not a model file: not downloaded
    server = RangeServer(str(root))
    try:
        status, result, err = run_json(capsys, f"{server.url}/bert/")
        fetched = {path.rsplit("/", 1)[-1] for path in server.counters.paths}
    finally:
        server.stop()
    assert status == 0, err
    assert result["architecture"] == {"library": "transformers", "class": "BertModel", "source": "config.json"}
    assert {o["name"] for o in result["outputs"]} == {"last_hidden_state", "pooler_output"}
    assert "modeling_evil.py" not in fetched and "optimizer.bin" not in fetched
    assert {"config.json", "model.safetensors"} <= fetched


def _load_in_process(folder: str, monkeypatch) -> tuple[object, int, object]:
    """The worker's load of a transformers folder, in this process; the elements random-initialised meanwhile."""
    from transformers import initialization

    from ckptview.core.run.architectures import recognize
    from ckptview.core.run.protocol import Job
    from ckptview.core.worker.pretrained import load_library_model

    initialised = [0]
    for name, real in list(initialization.TORCH_INIT_FUNCTIONS.items()):  # what transformers' init calls
        def counting(tensor, *args, _real=real, **kwargs):
            initialised[0] += tensor.numel()
            return _real(tensor, *args, **kwargs)
        monkeypatch.setitem(initialization.TORCH_INIT_FUNCTIONS, name, counting)
    job = Job({"architecture": recognize(folder).payload()["architecture"]}, lambda event: None)
    model, report = load_library_model(job, os.path.join(folder, "model.safetensors"), "cpu")
    return model, initialised[0], report


def test_weights_the_checkpoint_holds_are_never_random_initialised(llama, monkeypatch):
    """As from_pretrained: building skips the random initialisation the checkpoint overwrites (a 1.1 B model
    spent 11 s on it); only what the file lacks is initialised, by the library (counted, not timed)."""
    model, initialised, _ = _load_in_process(llama, monkeypatch)
    total = sum(p.numel() for p in model.parameters())
    assert initialised < total // 20, (initialised, total)
    from safetensors.torch import load_file

    saved = load_file(os.path.join(llama, "model.safetensors"))
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved.items())


def test_a_weight_the_checkpoint_lacks_is_initialised_by_the_library(llama, tmp_path, monkeypatch):
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "partial"
    shutil.copytree(llama, folder)
    saved = load_file(str(folder / "model.safetensors"))
    gone = "model.layers.0.mlp.up_proj.weight"
    del saved[gone]
    save_file(saved, str(folder / "model.safetensors"), metadata={"format": "pt"})
    model, _, report = _load_in_process(str(folder), monkeypatch)
    weight = model.state_dict()[gone]
    import transformers

    _, info = transformers.LlamaForCausalLM.from_pretrained(str(folder), output_loading_info=True)
    assert report.missing == sorted(info["missing_keys"]) == [gone]  # reported as the library reports it
    assert report.tied == {"lm_head.weight": "model.embed_tokens.weight"} and not info["unexpected_keys"]
    # The library's init (normal, std = initializer_range 0.02), not whatever memory held.
    assert torch.isfinite(weight).all() and abs(float(weight.float().std()) - 0.02) < 0.006
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())

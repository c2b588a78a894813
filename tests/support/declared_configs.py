"""Folders whose config.json does not describe the checkpoint beside it (issue 43, findings 9 and 10), written by
transformers' own `save_pretrained` and edited: shared by the core and window tests."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from tests.hostile.config_loads import edit_config

# name: (model class, config class, its tiny config, its layer-count key, a size key)
MODELS = {
    "llama": ("LlamaForCausalLM", "LlamaConfig",
              dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=64), "num_hidden_layers", "intermediate_size"),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64),
             "n_layer", "n_embd"),
    "bert": ("BertForMaskedLM", "BertConfig",
             dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=64), "num_hidden_layers", "intermediate_size"),
}


def save_models(root: Path) -> dict[str, Path]:
    """Each tiny model as its library saves it (config.json + model.safetensors), under `root`."""
    import torch
    import transformers

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (cls, config_cls, kwargs, _, _) in MODELS.items():
            torch.manual_seed(0)
            model = getattr(transformers, cls)(getattr(transformers, config_cls)(**kwargs))
            model.save_pretrained(root / name)
            out[name] = root / name
    return out


def one_tensor(folder: Path, target: Path, change) -> Path:
    """`folder`'s config changed by `change`, beside a file of the model's first tensor only."""
    from safetensors.torch import load_file, save_file

    edit_config(folder, target, change)
    first = sorted(load_file(str(target / "model.safetensors")).items())[:1]
    save_file(dict(first), str(target / "model.safetensors"))
    return target


def nested(depth: int) -> dict:
    value: dict = {"x": 1}
    for _ in range(depth):
        value = {"x": value}
    return value


def hostile(saved, tmp_path, model: str, case: str) -> Path:
    """The edited folder of `case`: `layers` (20,000 layers beside one tensor), `size` (a size of 2e9 beside
    the whole file), `deep` (a sub-config nested 900 levels)."""
    _, _, _, layers_key, size_key = MODELS[model]
    target = tmp_path / f"{model}-{case}"
    if case == "layers":
        return one_tensor(saved[model], target, lambda c: c.update({layers_key: 20_000}))
    if case == "size":
        return edit_config(saved[model], target, lambda c: c.update({size_key: 2_000_000_000}))
    folder = edit_config(saved[model], target, lambda c: None)
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text[:-1] + ', "extra": ' + json.dumps(nested(900)) + "}")
    return folder


WORDS = {"layers": "20,000 layers", "size": "2,000,000,000", "deep": "nests deeper than 64 levels"}


def block_workers(monkeypatch) -> None:
    """A worker started for these configs fails the test: the parent refuses them from the config as data."""
    from ckptview.core.graph import library as graph_library
    from ckptview.core.run import request as run_request

    def refuse(*args, **kwargs):
        raise AssertionError("a worker was started")
        yield

    monkeypatch.setattr(run_request, "execute", refuse)
    monkeypatch.setattr(graph_library, "execute", refuse)

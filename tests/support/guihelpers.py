"""Helpers shared by the GUI tests (a module name of its own: `conftest` is taken by tests/)."""

from __future__ import annotations


def make_state_dict(path: str) -> str:
    """A small state dict with nested module names, tied (shared) weights and three dtypes."""
    import torch

    torch.manual_seed(0)
    embed = torch.randn(100, 16)
    state = {
        "encoder.layers.0.attn.q_proj.weight": torch.randn(8, 16),
        "encoder.layers.0.attn.q_proj.bias": torch.randn(8),
        "encoder.layers.1.attn.q_proj.weight": torch.randn(8, 16),
        "encoder.layers.1.mlp.fc.weight": torch.randn(32, 16).half(),
        "encoder.layers.10.mlp.fc.weight": torch.randn(768, 16).to(torch.bfloat16),
        "decoder.embed.weight": embed,
        "lm_head.weight": embed,  # tied: the same storage
        "step": torch.tensor(7),
    }
    torch.save(state, path)
    return path


def make_sharded_folder(folder) -> str:
    """An HF sharded safetensors folder: two shards and their index (`folder` is created)."""
    import json
    import os

    import torch
    from safetensors.torch import save_file

    os.makedirs(folder)
    shards = {"model-00001-of-00002.safetensors": {"a.weight": torch.ones(2, 3)},
              "model-00002-of-00002.safetensors": {"b.weight": torch.zeros(4)}}
    weight_map = {}
    for file, tensors in shards.items():
        save_file(tensors, os.path.join(folder, file))
        weight_map.update({name: file for name in tensors})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": weight_map}, fh)
    return str(folder)


def wait_settled(qtbot, tab, timeout: int = 10_000) -> None:
    """Wait until a tab has finished opening (ready or error)."""
    qtbot.waitUntil(lambda: tab.state != "loading", timeout=timeout)

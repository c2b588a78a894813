"""Sharded Hub folders as transformers writes them: safetensors shards (written by the safetensors library)
and a `model.safetensors.index.json` naming each tensor's shard, with names shaped like a large MoE model's."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np


@dataclass
class Shards:
    """What `write_shards` wrote: the folder, the shard file names and each shard's header bytes (8 + JSON)."""

    folder: str
    names: list[str]
    headers: dict[str, int]

    @property
    def index(self) -> str:
        return os.path.join(self.folder, "model.safetensors.index.json")


def tensor_names(shard: int, count: int) -> list[str]:
    """`count` names as a DeepSeek-V3-style checkpoint has them (experts' projections and their scales)."""
    names = []
    for i in range(count):
        expert, part = divmod(i, 6)
        proj = ("gate_proj", "up_proj", "down_proj")[part % 3]
        suffix = "weight" if part < 3 else "weight_scale_inv"
        names.append(f"model.layers.{shard}.mlp.experts.{expert}.{proj}.{suffix}")
    return names


def write_shards(folder: str, shards: int, per_shard: int, pad_bytes: int = 0) -> Shards:
    """`shards` safetensors files of `per_shard` tiny tensors each (plus, with `pad_bytes`, one tensor of
    that many bytes, so a shard is larger than its header), and their index."""
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    weight_map: dict[str, str] = {}
    names, headers = [], {}
    total = 0
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {t: np.full((2, 4), s, dtype=np.float16) for t in tensor_names(s, per_shard)}
        if pad_bytes:
            tensors[f"model.layers.{s}.pad"] = np.zeros(pad_bytes, dtype=np.uint8)
        path = os.path.join(folder, name)
        save_file(tensors, path, metadata={"format": "pt"})
        with open(path, "rb") as fh:
            headers[name] = 8 + int.from_bytes(fh.read(8), "little")
        weight_map.update(dict.fromkeys(tensors, name))
        total += sum(a.nbytes for a in tensors.values())
        names.append(name)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh)
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"}, fh)
    return Shards(folder, names, headers)

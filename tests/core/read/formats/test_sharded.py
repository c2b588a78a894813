"""Hugging Face sharded checkpoints (safetensors and .bin shards with an index.json, or a folder of
shards) open as one checkpoint whose tensors equal what safetensors / torch.load read."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from ckptview.core.errors import CheckpointError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_values
from tests.support.torch_compare import same_values


def _state(layers: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    sd = {f"model.layers.{i}.mlp.weight": torch.randn(5, 4, generator=g) for i in range(layers)}
    sd["model.embed.weight"] = torch.randn(7, 3, generator=g).to(torch.bfloat16)
    sd["model.norm.scale"] = torch.randn(4, generator=g).half()
    sd["lm_head.bias"] = torch.arange(3, dtype=torch.int64)
    return sd


def write_sharded(folder, kind: str, n_shards: int = 3, index: bool = True, layers: int = 6) -> dict[str, str]:
    """HF layout: model-0000k-of-0000n.safetensors / pytorch_model-0000k-of-0000n.bin + index.json."""
    folder.mkdir(parents=True, exist_ok=True)
    sd = _state(layers)
    keys = list(sd)
    weight_map = {}
    for k in range(n_shards):
        part = {key: sd[key].clone() for key in keys[k::n_shards]}
        if kind == "safetensors":
            name = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
            save_file(part, str(folder / name), metadata={"format": "pt"})
        else:
            name = f"pytorch_model-{k + 1:05d}-of-{n_shards:05d}.bin"
            torch.save(part, folder / name)
        weight_map.update(dict.fromkeys(part, name))
    if index:
        index_name = "model.safetensors.index.json" if kind == "safetensors" else "pytorch_model.bin.index.json"
        total = sum(t.nbytes for t in sd.values())
        (folder / index_name).write_text(json.dumps({"metadata": {"total_size": total},
                                                     "weight_map": dict(sorted(weight_map.items()))}))
    return weight_map


def _torch_read(folder, kind: str, shard: str) -> dict[str, torch.Tensor]:
    path = folder / shard
    return load_file(str(path)) if kind == "safetensors" else torch.load(path, weights_only=True)


@pytest.mark.parametrize("kind", ["safetensors", "bin"])
@pytest.mark.parametrize("open_what", ["folder", "index"])
def test_sharded_matches_torch(tmp_path, kind, open_what):
    folder = tmp_path / "model"
    weight_map = write_sharded(folder, kind)
    target = folder if open_what == "folder" else next(folder.glob("*.index.json"))
    ckpt = open_checkpoint(target)
    try:
        assert ckpt.format == ("hf-sharded-safetensors" if kind == "safetensors" else "hf-sharded-bin")
        assert ckpt.warnings == []
        assert sorted(e.name for e in ckpt.tensors()) == sorted(weight_map)
        loaded = {}
        for entry in ckpt.tensors():
            shard = weight_map[entry.name]
            assert entry.info.extra["shards"] == [{"file": shard}]
            if shard not in loaded:
                loaded[shard] = _torch_read(folder, kind, shard)
            theirs = loaded[shard][entry.name]
            assert list(entry.info.shape) == list(theirs.shape)
            assert same_values(read_values(entry.info), theirs), entry.name
            assert sum(c.size for c in iter_chunks(entry.info, chunk_elems=4)) == theirs.numel()
    finally:
        ckpt.close()


def test_folder_of_shards_without_index(tmp_path):
    folder = tmp_path / "model"
    weight_map = write_sharded(folder, "safetensors", index=False)
    ckpt = open_checkpoint(folder)
    assert ckpt.format == "hf-sharded-safetensors"
    assert sorted(e.name for e in ckpt.tensors()) == sorted(weight_map)
    assert ckpt.metadata["index"] is None
    ckpt.close()


def test_index_problems_are_warnings(tmp_path):
    folder = tmp_path / "model"
    write_sharded(folder, "safetensors")
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["ghost.weight"] = index["weight_map"]["lm_head.bias"]
    index["weight_map"]["lost.weight"] = "model-00009-of-00009.safetensors"
    index_path.write_text(json.dumps(index))
    ckpt = open_checkpoint(folder)
    text = "\n".join(ckpt.warnings)
    assert "'ghost.weight' is listed in the index but missing" in text
    assert "shard 'model-00009-of-00009.safetensors' is missing" in text
    assert "lm_head.bias" in {e.name for e in ckpt.tensors()}
    ckpt.close()


def test_index_cannot_point_outside_its_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    save_file({"w": torch.ones(2)}, str(tmp_path / "outside.safetensors"))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "../outside.safetensors"}}))
    with pytest.raises(CheckpointError, match="outside its folder"):
        open_checkpoint(folder)


def test_twenty_shards_info_json(tmp_path):
    folder = tmp_path / "big"
    weight_map = write_sharded(folder, "safetensors", n_shards=20, layers=40)
    assert len(set(weight_map.values())) == 20
    proc = subprocess.run([sys.executable, "-m", "ckptview", "info", str(folder), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["format"] == "hf-sharded-safetensors" and len(data["tensors"]) == 43
    assert all(len(t["shards"]) == 1 and t["shards"][0]["file"].endswith("-of-00020.safetensors")
               for t in data["tensors"])

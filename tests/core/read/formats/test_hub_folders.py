"""Hugging Face Hub folders as transformers, diffusers and peft write them: variants are separate checkpoints,
every library weight name is recognised; values equal what safetensors / torch.load read."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file, save_file

from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.torch_compare import same_values


def _unet_state(dtype=torch.float32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    sd = {"conv_in.weight": torch.randn(4, 3, 3, 3, generator=g), "conv_in.bias": torch.randn(4, generator=g),
          "down_blocks.0.norm.weight": torch.randn(4, generator=g), "conv_out.weight": torch.randn(3, 4, 1, 1, generator=g)}
    return {k: v.to(dtype) for k, v in sd.items()}


def _check_against(ckpt, reference: dict[str, torch.Tensor]) -> None:
    names = [e.name for e in ckpt.tensors()]
    assert sorted(names) == sorted(reference), names  # every name once
    for entry in ckpt.tensors():
        assert same_values(read_values(entry.info), reference[entry.name]), entry.name


def test_diffusers_variant_is_a_separate_checkpoint(tmp_path) -> None:
    folder = tmp_path / "unet"
    folder.mkdir()
    save_file(_unet_state(), str(folder / "diffusion_pytorch_model.safetensors"))
    save_file(_unet_state(torch.float16), str(folder / "diffusion_pytorch_model.fp16.safetensors"))
    save_file(_unet_state(), str(folder / "diffusion_pytorch_model.ema.safetensors"))
    (folder / "config.json").write_text(json.dumps({"_class_name": "UNet2DModel"}))
    ckpt = open_checkpoint(str(folder))
    _check_against(ckpt, load_file(str(folder / "diffusion_pytorch_model.safetensors")))
    assert {e.info.dtype for e in ckpt.tensors()} == {"float32"}
    note = next(w for w in ckpt.warnings if "variants" in w)
    assert "fp16 (diffusion_pytorch_model.fp16.safetensors)" in note and "ema (" in note
    ckpt.close()
    variant = open_checkpoint(str(folder / "diffusion_pytorch_model.fp16.safetensors"))
    _check_against(variant, load_file(str(folder / "diffusion_pytorch_model.fp16.safetensors")))
    assert {e.info.dtype for e in variant.tensors()} == {"float16"}
    variant.close()


def test_folder_with_only_a_diffusers_bin(tmp_path) -> None:
    folder = tmp_path / "vae"
    folder.mkdir()
    torch.save(_unet_state(), folder / "diffusion_pytorch_model.bin")
    ckpt = open_checkpoint(str(folder))
    _check_against(ckpt, torch.load(folder / "diffusion_pytorch_model.bin", weights_only=True))
    assert not ckpt.warnings
    ckpt.close()


def test_peft_adapter_folder(tmp_path) -> None:
    folder = tmp_path / "lora"
    folder.mkdir()
    g = torch.Generator().manual_seed(1)
    sd = {"base_model.model.q_proj.lora_A.weight": torch.randn(2, 8, generator=g),
          "base_model.model.q_proj.lora_B.weight": torch.zeros(8, 2)}
    torch.save(sd, folder / "adapter_model.bin")
    (folder / "adapter_config.json").write_text("{}")
    ckpt = open_checkpoint(str(folder))
    _check_against(ckpt, sd)
    ckpt.close()


def test_sharded_variant_with_its_own_index(tmp_path) -> None:
    """transformers' `save_pretrained(variant="fp16")`: `model.fp16-0000k-of-0000n` + `model.safetensors.index.fp16.json`."""
    folder = tmp_path / "llm"
    folder.mkdir()
    full = _unet_state()
    for variant, dtype in ((None, torch.float32), ("fp16", torch.float16)):
        sd = {k: v.to(dtype) for k, v in full.items()}
        keys = list(sd)
        weight_map = {}
        for k in range(2):
            stem = "model" if variant is None else f"model.{variant}"
            name = f"{stem}-{k + 1:05d}-of-00002.safetensors"
            save_file({key: sd[key] for key in keys[k::2]}, str(folder / name))
            weight_map.update(dict.fromkeys(keys[k::2], name))
        index = "model.safetensors.index.json" if variant is None else f"model.safetensors.index.{variant}.json"
        total = sum(t.nbytes for t in sd.values())
        (folder / index).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    ckpt = open_checkpoint(str(folder))
    _check_against(ckpt, full)
    assert ckpt.metadata["index"] == "model.safetensors.index.json"
    assert any("fp16 (model.safetensors.index.fp16.json)" in w for w in ckpt.warnings), ckpt.warnings
    assert not any("total_size" in w for w in ckpt.warnings)
    ckpt.close()
    variant = open_checkpoint(str(folder / "model.safetensors.index.fp16.json"))
    assert {e.info.dtype for e in variant.tensors()} == {"float16"}
    variant.close()


def test_total_size_counts_tied_weights_once(tmp_path) -> None:
    """A `.bin` shard keeps tied tensors on one storage; the index's total_size counts that storage once."""
    folder = tmp_path / "tied"
    folder.mkdir()
    embed = torch.randn(10, 4)
    shard1 = {"model.embed_tokens.weight": embed, "lm_head.weight": embed}
    shard2 = {"model.norm.weight": torch.ones(4)}
    torch.save(shard1, folder / "pytorch_model-00001-of-00002.bin")
    torch.save(shard2, folder / "pytorch_model-00002-of-00002.bin")
    weight_map = {**dict.fromkeys(shard1, "pytorch_model-00001-of-00002.bin"),
                  **dict.fromkeys(shard2, "pytorch_model-00002-of-00002.bin")}
    total = embed.nbytes + 16  # what huggingface_hub's split_torch_state_dict_into_shards records
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                     "weight_map": weight_map}))
    ckpt = open_checkpoint(str(folder))
    assert not any("total_size" in w for w in ckpt.warnings), ckpt.warnings
    assert len(ckpt.tensors()) == 3
    ckpt.close()
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {"total_size": total + 4},
                                                                     "weight_map": weight_map}))
    ckpt = open_checkpoint(str(folder))
    assert any(f"total_size {total + 4}" in w and f"{total} bytes" in w for w in ckpt.warnings), ckpt.warnings
    ckpt.close()

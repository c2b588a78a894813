"""A folder of many checkpoints says so (issue 45, defect 3).

A folder of sixteen unrelated checkpoints was reported as `hf-sharded-safetensors, 2 tensors` (one stray
bf16 file), the other fifteen only in a warning; a one-file `save_pretrained` folder was called "sharded".
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from ckptview.cli import main
from ckptview.commands.wording import cli_words
from ckptview.core.errors import FolderOfCheckpoints
from ckptview.core.read.open import open_checkpoint


def unrelated(folder, stray: str) -> list[str]:
    """Fifteen `torch.save` files of different small models and one bf16 safetensors file named `stray`."""
    folder.mkdir()
    torch.manual_seed(0)
    names = []
    for i in range(15):
        model = torch.nn.Sequential(torch.nn.Linear(3 + i, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        name = f"{['mlp', 'probe', 'head'][i % 3]}_{i}.pt"
        torch.save(model.state_dict(), folder / name)
        names.append(name)
    save_file({"emb": torch.zeros(4, 2, dtype=torch.bfloat16), "proj": torch.ones(2, dtype=torch.bfloat16)},
              str(folder / stray))
    return sorted(names + [stray])


@pytest.mark.parametrize("stray", ["stray.safetensors", "model.safetensors"])
def test_a_folder_of_unrelated_checkpoints_is_a_folder_of_them(tmp_path, stray):
    folder = tmp_path / "zoo"
    names = unrelated(folder, stray)
    with pytest.raises(FolderOfCheckpoints) as raised:
        open_checkpoint(str(folder))
    assert sorted(raised.value.names) == names  # every one, the safetensors file among them
    assert "16 checkpoints" in str(raised.value)


def test_the_command_line_says_it_in_one_line_with_what_to_run(tmp_path, capsys):
    folder = tmp_path / "zoo"
    unrelated(folder, "stray.safetensors")
    assert main(["info", str(folder)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "16 checkpoints" in err and "hf-sharded" not in err
    assert f"ckptview series {folder}" in err and "ckptview diff " in err and "ckptview info " in err
    assert main(["info", str(folder), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "folder_of_checkpoints"


def test_the_latest_checkpoint_is_the_one_offered(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    for step in (1, 2, 9, 10, 11):
        torch.save({"step": step, "w": torch.ones(2)}, folder / f"step{step}.pt")
    with pytest.raises(FolderOfCheckpoints) as raised:
        open_checkpoint(str(folder))
    assert raised.value.names == [f"step{s}.pt" for s in (1, 2, 9, 10, 11)]  # in the run's order
    said = cli_words(raised.value)  # the command line names the commands; the core's text names none
    assert f"ckptview info {folder / 'step11.pt'}" in said and "ckptview" not in str(raised.value)
    assert f"ckptview diff {folder / 'step1.pt'} {folder / 'step11.pt'}" in said


def test_a_one_file_save_pretrained_folder_is_not_called_sharded(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(tmp_path / "one")
    # transformers before 5 wrote pytorch_model.bin with safe_serialization=False: torch.save of the state dict
    (tmp_path / "bin").mkdir()
    torch.save(model.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    (tmp_path / "bin" / "config.json").write_text((tmp_path / "one" / "config.json").read_text())
    model.save_pretrained(tmp_path / "shards", max_shard_size="4KB")
    expected = {"one": "hf-safetensors", "bin": "hf-bin", "shards": "hf-sharded-safetensors"}
    for name, fmt in expected.items():
        ckpt = open_checkpoint(str(tmp_path / name))
        try:
            assert ckpt.format == fmt, name
            assert {e.name for e in ckpt.tensors()} == set(model.state_dict()) - {"lm_head.weight"} or \
                {e.name for e in ckpt.tensors()} == set(model.state_dict())
        finally:
            ckpt.close()


def test_a_hub_folder_with_other_checkpoints_still_opens_its_weights(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    save_file({"w": torch.ones(2)}, str(folder / "model.safetensors"))
    torch.save({"w": torch.ones(3)}, folder / "ema.pt")
    (folder / "config.json").write_text("{}")
    ckpt = open_checkpoint(str(folder))
    try:
        assert ckpt.format == "hf-safetensors" and [e.name for e in ckpt.tensors()] == ["w"]
        assert any("ema.pt" in w for w in ckpt.warnings)
    finally:
        ckpt.close()

"""An HF Trainer / accelerate folder whose model is a safetensors file: the file stores names sorted, so
the model's parameter order is not in it. A name the order decides is marked guessed in every view,
never shown as a confident wrong name (issue 25, finding 4)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from ckptview.cli import main
from ckptview.core.compare.sections import optimizer_labels
from ckptview.core.inspect.optimizer import find_optimizers, state_labels
from ckptview.core.read.open import open_checkpoint


class SelfAttention(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)


class Output(nn.Module):
    def __init__(self, d_in: int, d: int) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, d)
        self.LayerNorm = nn.LayerNorm(d)


class Attention(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.self = SelfAttention(d)
        self.output = Output(d, d)


class Layer(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.attention = Attention(d)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(d, 4 * d)
        self.output = Output(4 * d, d)


class BertLike(nn.Module):
    """BERT's module names and definition order (query before key before value), plain torch."""

    def __init__(self, d: int = 8, layers: int = 2) -> None:
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(30, d)
        self.embeddings.position_embeddings = nn.Embedding(16, d)
        self.embeddings.token_type_embeddings = nn.Embedding(2, d)
        self.embeddings.LayerNorm = nn.LayerNorm(d)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(Layer(d) for _ in range(layers))
        self.pooler = nn.Module()
        self.pooler.dense = nn.Linear(d, d)


def _trainer_folder(tmp_path, optimizer_file: str = "optimizer.pt"):
    torch.manual_seed(0)
    model = BertLike()
    named = list(model.named_parameters())
    decay = [p for n, p in named if "bias" not in n and "LayerNorm" not in n]
    no_decay = [p for n, p in named if "bias" in n or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}])
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    by_id = {id(p): n for n, p in named}
    truth = [by_id[id(p)] for g in opt.param_groups for p in g["params"]]
    folder = tmp_path / "checkpoint-10"
    folder.mkdir()
    save_file(model.state_dict(), str(folder / "model.safetensors"))
    torch.save(opt.state_dict(), folder / optimizer_file)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
    return folder, truth


@pytest.mark.parametrize("optimizer_file", ["optimizer.pt", "optimizer.bin"])
def test_no_confident_wrong_name(tmp_path, optimizer_file) -> None:
    folder, truth = _trainer_folder(tmp_path, optimizer_file)
    ckpt = open_checkpoint(str(folder))
    try:
        (found,) = find_optimizers(ckpt)
        assert found.mapping == "guessed", found.note
        assert "guessed" in found.note
        sure = [(p.name, truth[p.index]) for p in found.params if not p.guessed]
        assert sure and all(name == right for name, right in sure)  # what is not marked is right
        guessed = [p for p in found.params if p.guessed]
        assert any(p.name != truth[p.index] for p in guessed)  # the guess is wrong somewhere: marked
        # The window's tree and the diff's rows say so too.
        labels = state_labels(ckpt)
        for p in guessed:
            assert labels[id(p.node)].endswith("(guessed)")
        diff_labels, _ = optimizer_labels(ckpt)
        exp_avg = guessed[0].entry("exp_avg")
        assert diff_labels[id(exp_avg.tensor)] == f"exp_avg of {guessed[0].name} (guessed)"
    finally:
        ckpt.close()


def test_info_prints_the_mapping_note_and_flags(tmp_path, capsys) -> None:
    folder, truth = _trainer_folder(tmp_path)
    assert main(["info", str(folder), "--json"]) == 0
    (opt,) = json.loads(capsys.readouterr().out)["optimizers"]
    assert opt["mapping"] == "guessed" and "guessed" in opt["note"]
    for i, p in enumerate(opt["params"]):
        assert p["name_guessed"] or p["name"] == truth[i]
    assert any(p["name_guessed"] for p in opt["params"])
    assert main(["info", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "(guessed)" in out and opt["note"] in out


_BERT_SCRIPT = """
import json, sys, torch, transformers
folder = sys.argv[1]
config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=24, num_labels=3)
torch.manual_seed(0)
model = transformers.BertForSequenceClassification(config)
model.save_pretrained(folder)
named = list(model.named_parameters())
decay = [p for n, p in named if "bias" not in n and "LayerNorm" not in n]
no_decay = [p for n, p in named if "bias" in n or "LayerNorm" in n]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}])
for p in model.parameters():
    p.grad = torch.randn_like(p)
opt.step()
torch.save(opt.state_dict(), folder + "/optimizer.pt")
by_id = {id(p): n for n, p in named}
print(json.dumps([by_id[id(p)] for g in opt.param_groups for p in g["params"]]))
"""


@pytest.mark.slow
def test_installed_transformers_tells_the_order(tmp_path, transformers_unimported) -> None:
    """With transformers installed, the model config.json names is built on the meta device (in a child
    process) and its named_parameters() order names every parameter for sure. transformers is never imported
    in this process (the folder is made by a child too)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    proc = subprocess.run([sys.executable, "-c", _BERT_SCRIPT, str(folder)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    truth = json.loads(proc.stdout.strip().splitlines()[-1])
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    ckpt = open_checkpoint(str(folder))
    try:
        (found,) = find_optimizers(ckpt)
    finally:
        ckpt.close()
    assert found.mapping in ("exact", "by-order"), found.note
    assert "BertForSequenceClassification" in found.note
    assert not any(p.guessed for p in found.params)
    assert [p.name for p in found.params] == truth
    assert "transformers" not in sys.modules

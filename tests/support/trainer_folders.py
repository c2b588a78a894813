"""A Hugging Face Trainer-style step folder written by the libraries themselves, in a child process (so the
test process never imports transformers): `model.safetensors` and `config.json` by `save_pretrained`, the
AdamW state of two param groups (decay, no decay) by `torch.save`, `trainer_state.json`."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

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


def write_bert_trainer(folder: os.PathLike[str] | str) -> list[str]:
    """Write the folder (skips the test without transformers); the parameter names in the optimizer's order."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    os.makedirs(folder, exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", _BERT_SCRIPT, str(folder)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(os.path.join(folder, "trainer_state.json"), "w") as fh:
        json.dump({"global_step": 2}, fh)
    names: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return names

"""`diff` compares model weights: tied copies match their twin, optimizer state / sample inputs / counters are
their own section (named by parameter) and leave the exit status alone unless --all."""

from __future__ import annotations

import json
import math

import torch
from safetensors.torch import save_file

from ckptview.cli import main
from ckptview.core import open_checkpoint
from ckptview.core.compare.diff import diff_checkpoints


class TiedLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(10, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.lm_head = torch.nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.embed_tokens.weight  # tied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(self.embed_tokens(x)))


def test_tied_copy_matches_its_twin(tmp_path, capsys) -> None:
    torch.manual_seed(0)
    model = TiedLM()
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")  # keeps both names over one storage
    untied = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(untied, str(tmp_path / "model.safetensors"))  # what save_pretrained writes: one copy
    for a, b in (("pytorch_model.bin", "model.safetensors"), ("model.safetensors", "pytorch_model.bin")):
        result = diff_checkpoints(open_checkpoint(tmp_path / a), open_checkpoint(tmp_path / b))
        rows = {t.name: t for t in result.tensors}
        assert rows["lm_head.weight"].status == "identical"
        assert rows["lm_head.weight"].tied_to == "embed_tokens.weight"
        assert result.summary() == {"identical": 4} and result.identical
        assert main(["diff", str(tmp_path / a), str(tmp_path / b)]) == 0
        assert "tied copy, compared with embed_tokens.weight" not in capsys.readouterr().out  # identical: hidden
    assert main(["diff", str(tmp_path / "pytorch_model.bin"), str(tmp_path / "model.safetensors"), "--all"]) == 0
    assert "tied copy, compared with embed_tokens.weight" in capsys.readouterr().out
    # A tied copy whose twin changed is changed too.
    changed = dict(untied)
    changed["embed_tokens.weight"] = changed["embed_tokens.weight"] + 1
    save_file(changed, str(tmp_path / "changed.safetensors"))
    result = diff_checkpoints(open_checkpoint(tmp_path / "pytorch_model.bin"),
                              open_checkpoint(tmp_path / "changed.safetensors"))
    assert {t.name: t.status for t in result.tensors}["lm_head.weight"] == "changed"


def training_checkpoint(seed_steps: int) -> tuple[dict, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(seed_steps):
        opt.zero_grad()
        net(torch.randn(4, 6)).pow(2).mean().backward()
        opt.step()
    return ({"model_state_dict": net.state_dict(), "optimizer_state_dict": opt.state_dict(),
             "global_step": torch.tensor(seed_steps)}, net, opt)


def test_headline_and_exit_status_are_about_weights(tmp_path, capsys) -> None:
    ckpt_a, net_a, _ = training_checkpoint(2)
    ckpt_b, net_b, _ = training_checkpoint(5)
    torch.save(ckpt_a, tmp_path / "a.pt")
    torch.save(ckpt_b, tmp_path / "b.pt")
    result = diff_checkpoints(open_checkpoint(tmp_path / "a.pt"), open_checkpoint(tmp_path / "b.pt"))
    sa, sb = net_a.state_dict(), net_b.state_dict()
    dd = sum(float((sb[k].double() - sa[k].double()).pow(2).sum()) for k in sa)
    aa = sum(float(sa[k].double().pow(2).sum()) for k in sa)
    assert math.isclose(result.overall_rel_l2(), math.sqrt(dd / aa), rel_tol=1e-9)
    assert {t.name for t in result.weights} == set(sa)
    labels = {t.label for t in result.other}
    assert {"exp_avg of 0.weight", "exp_avg_sq of 2.bias", "step of 0.bias"} <= labels
    assert any(t.name == "global_step" for t in result.other)
    assert main(["diff", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert {t["name"] for t in data["tensors"]} == set(sa)
    assert all(t["section"] == "other" for t in data["other"])
    assert data["summary"]["changed"] == 4 and data["other_summary"]["changed"] == len(data["other"])
    assert math.isclose(data["overall_rel_l2"], math.sqrt(dd / aa), rel_tol=1e-9)
    # Same weights, different optimizer state and step: identical by default, different with --all.
    same_weights = dict(ckpt_b, model_state_dict=net_a.state_dict())
    torch.save(same_weights, tmp_path / "c.pt")
    assert main(["diff", str(tmp_path / "a.pt"), str(tmp_path / "c.pt")]) == 0
    out = capsys.readouterr().out
    assert "Other entries" in out and "exp_avg of 0.weight" in out
    assert main(["diff", str(tmp_path / "a.pt"), str(tmp_path / "c.pt"), "--all"]) == 1


def test_state_dict_against_its_pt2(tmp_path, capsys) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).eval()
    model[0].register_buffer("scale", torch.full((4,), 2.0), persistent=False)  # a .pt2 constant only
    model[0].forward = lambda x, m=model[0]: torch.nn.functional.linear(x, m.weight, m.bias) * m.scale
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    program = torch.export.export(model, (torch.randn(4, 3),))
    torch.export.save(program, tmp_path / "model.pt2")
    result = diff_checkpoints(open_checkpoint(tmp_path / "sd.pt"), open_checkpoint(tmp_path / "model.pt2"))
    assert result.summary() == {"identical": 4}
    assert all(t.section == "other" for t in result.tensors if "sample_inputs" in t.name)
    assert any("sample_inputs" in t.name for t in result.other)
    assert any("constants" in t.name and t.status == "only_b" for t in result.other), [t.name for t in result.tensors]
    assert main(["diff", str(tmp_path / "sd.pt"), str(tmp_path / "model.pt2")]) == 0

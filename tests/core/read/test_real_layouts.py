"""Layouts as their library means them (issue 25, finding 5): a pickled module against its own state
dict, training folders, .pt2 placeholders, tensor subclasses, tied weights."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

from ckptview.cli import main
from ckptview.core import open_checkpoint
from ckptview.core.inspect.summary import size_facts


class Rotary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", torch.arange(4.0), persistent=False)


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.rotary_emb = Rotary()
        self.norm = nn.BatchNorm1d(4)


class CausalLM(nn.Module):
    """Top-level children named `model` and `lm_head`, as a Hugging Face causal LM has them."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Inner()
        self.lm_head = nn.Linear(4, 10, bias=False)


def test_pickled_module_equals_its_state_dict(tmp_path, capsys):
    torch.manual_seed(0)
    model = CausalLM()
    torch.save(model, tmp_path / "full.pt")
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    assert main(["diff", "--json", str(tmp_path / "full.pt"), str(tmp_path / "sd.pt")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(t["name"] for t in data["tensors"]) == sorted(model.state_dict())
    assert data["strip"] == {"a": "", "b": ""}
    assert [t["name"] for t in data["other"]] == ["model.rotary_emb.inv_freq"]  # not in a state dict
    ckpt = open_checkpoint(tmp_path / "full.pt")
    try:
        facts = size_facts(ckpt)
    finally:
        ckpt.close()
    assert facts.parameters == sum(p.numel() for p in model.parameters())
    assert facts.buffers == sum(b.numel() for b in model.buffers())


class Small(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.hidden = nn.Linear(6, width)
        self.output = nn.Linear(width, 3)


def _stepped(model: nn.Module) -> torch.optim.Optimizer:
    """An Adam stepped once over a copy of `model` (the model itself keeps its weights)."""
    opt = torch.optim.Adam(copy.deepcopy(model).parameters())
    for group in opt.param_groups:
        for p in group["params"]:
            p.grad = torch.randn_like(p)
    opt.step()
    return opt


def _accelerate_two_models(folder, first: nn.Module, second: nn.Module) -> None:
    """accelerate's save_state with two prepared models and optimizers."""
    from safetensors.torch import save_file

    folder.mkdir()
    save_file(first.state_dict(), str(folder / "model.safetensors"))
    save_file(second.state_dict(), str(folder / "model_1.safetensors"))
    torch.save(_stepped(first).state_dict(), folder / "optimizer.bin")
    torch.save(_stepped(second).state_dict(), folder / "optimizer_1.bin")
    torch.save({"step": 1}, folder / "random_states_0.pkl")


def test_accelerate_second_optimizer_is_named_by_the_second_model(tmp_path):
    from ckptview.core.inspect.optimizer import find_optimizers

    torch.manual_seed(0)
    first, second = Small(), Small(width=5)
    _accelerate_two_models(tmp_path / "step", first, second)
    ckpt = open_checkpoint(tmp_path / "step")
    try:
        found = {opt.label: opt for opt in find_optimizers(ckpt)}
    finally:
        ckpt.close()
    for key, model in (("optimizer.bin", first), ("optimizer_1.bin", second)):
        assert found[key].mapping != "none", found[key].note
        names = [n for n, _ in model.named_parameters()]
        sure = [p for p in found[key].params if not p.guessed]
        assert sure and all(p.name == names[p.index] for p in sure)
    assert found["optimizer_1.bin"].model is not None and found["optimizer_1.bin"].model.key == "model_1.safetensors"


def test_a_diff_where_only_the_second_model_changed_differs(tmp_path, capsys):
    torch.manual_seed(0)
    first, second = Small(), Small(width=5)
    _accelerate_two_models(tmp_path / "a", first, second)
    with torch.no_grad():
        second.output.weight.add_(1.0)
    _accelerate_two_models(tmp_path / "b", first, second)
    assert main(["diff", "--json", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    data = json.loads(capsys.readouterr().out)
    sections = {t["name"]: t["section"] for t in data["tensors"] + data["other"]}
    assert sections["model_1.safetensors.output.weight"] == "weights"
    changed = [t["name"] for t in data["tensors"] if t["status"] == "changed"]
    assert changed == ["model_1.safetensors.output.weight"]


def test_run_loads_a_training_folder_model_without_its_file_prefix(tmp_path):
    """`run` on an accelerate or Trainer folder: the weights file's name is no part of the state dict keys."""
    from safetensors.torch import save_file

    from ckptview.core.worker.loading import load_weights

    torch.manual_seed(0)
    trained = Small()
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    save_file(trained.state_dict(), str(folder / "model.safetensors"))
    torch.save(_stepped(trained).state_dict(), folder / "optimizer.pt")
    (folder / "trainer_state.json").write_text("{}")
    fresh = Small()
    report = load_weights(fresh, str(folder), "cpu")
    assert report.unexpected == [] and report.missing == [] and report.tensors == 4
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, trained.state_dict()[name]), name


class Projection(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def test_pt2_placeholder_shape_is_shown_whole(tmp_path):
    """A derived dynamic size (`2*s94`) reads as torch prints it, not as its first symbol."""
    s = torch.export.Dim("s", min=2, max=64)
    program = torch.export.export(Projection(), (torch.randn(2, 8, 3),), dynamic_shapes={"x": {1: 2 * s}})
    torch.export.save(program, tmp_path / "dyn.pt2")
    (placeholder,) = [n for n in program.graph.nodes if n.op == "placeholder" and n.name == "x"]
    expected = [int(d) if isinstance(d, int) else str(d) for d in placeholder.meta["val"].shape]
    assert "*" in expected[1]
    ckpt = open_checkpoint(tmp_path / "dyn.pt2")
    try:
        (user,) = [i for i in ckpt.metadata["signature"]["inputs"] if i["kind"] == "user_input"]
        assert user["shape"] == expected
        values = {n.name: n.value for n in ckpt.values()}
        assert values["signature.inputs.0"] == f"x: float32[{', '.join(map(str, expected))}]"
        roles = {e.name: e.info.extra.get("module_part") for e in ckpt.tensors() if e.name.startswith("proj.")}
    finally:
        ckpt.close()
    assert roles == {"proj.weight": "parameter", "proj.bias": "parameter"}


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(12, 4)
        self.lm_head = nn.Linear(4, 12, bias=False)
        self.lm_head.weight = self.embed_tokens.weight  # tied, as HF ties word embeddings


def test_tied_weight_is_not_reported_left_at_its_initial_value(tmp_path):
    """safetensors keeps one name of a tied pair; loading it loads both (the model's own Parameter)."""
    from safetensors.torch import save_model

    from ckptview.core.worker.loading import load_weights

    torch.manual_seed(0)
    trained = TiedLM()
    save_model(trained, str(tmp_path / "model.safetensors"))
    fresh = TiedLM()
    report = load_weights(fresh, str(tmp_path / "model.safetensors"), "cpu")
    assert report.missing == [] and report.unexpected == []
    assert torch.equal(fresh.lm_head.weight, trained.lm_head.weight)


class Packed(torch.Tensor):
    """A wrapper tensor subclass holding its data in inner tensors, as torchao's quantized weights do."""

    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(cls, qdata.shape, dtype=torch.float32, device=qdata.device)

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor) -> None:
        self.qdata, self.scale = qdata, scale

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(str(func))

    def __repr__(self) -> str:
        return "Packed()"


def test_wrapper_subclass_is_listed_with_the_tensors_the_file_holds(tmp_path):
    from ckptview.core.read.values.reading import read_values
    from tests.support.torch_compare import same_values

    g = torch.Generator().manual_seed(0)
    weight = Packed(torch.randint(-128, 127, (4, 6), dtype=torch.int8, generator=g), torch.rand(4, generator=g))
    torch.save({"linear.weight": weight}, tmp_path / "q.pt")
    with torch.serialization.safe_globals([Packed]):
        theirs = torch.load(tmp_path / "q.pt", weights_only=True)["linear.weight"]
    ckpt = open_checkpoint(tmp_path / "q.pt")
    try:
        tensors = {e.name: e.info for e in ckpt.tensors()}
        assert set(tensors) == {"linear.weight.qdata", "linear.weight.scale"}
        assert same_values(read_values(tensors["linear.weight.qdata"]), theirs.qdata)
        assert same_values(read_values(tensors["linear.weight.scale"]), theirs.scale)
        values = {n.name: n.value for n in ckpt.values()}
        assert tuple(values["linear.weight.shape"]) == (4, 6) and values["linear.weight.dtype"] == "float32"
    finally:
        ckpt.close()


_DTENSOR_SCRIPT = """
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
mesh = init_device_mesh("cpu", (1,))
local = torch.arange(12.0).reshape(4, 3)
# Rank 0's file of a weight sharded by rows over 2 ranks (FSDP2 saves each rank's DTensor shards).
weight = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size([8, 3]), stride=(3, 1))
torch.save({"layer.weight": weight}, sys.argv[2])
torch.save(local, sys.argv[3])
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.slow
def test_dtensor_file_shows_its_local_shard_and_is_not_unsafe(tmp_path, capsys):
    import subprocess
    import sys

    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        import pytest

        pytest.skip("torch.distributed with the gloo backend is not available in this build")
    script = tmp_path / "rank.py"
    script.write_text(_DTENSOR_SCRIPT)
    out, ref = tmp_path / "rank0.pt", tmp_path / "local.pt"
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), str(out), str(ref)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from ckptview.core.read.values.reading import read_values
    from tests.support.torch_compare import same_values

    local = torch.load(ref, weights_only=True)
    ckpt = open_checkpoint(out)
    try:
        info = ckpt.tensor("layer.weight")
        assert list(info.shape) == list(local.shape) and same_values(read_values(info), local)
        assert ckpt.unsafe_globals == []
    finally:
        ckpt.close()
    assert main(["info", "--json", str(out)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["tensors"]
    assert row["shape"] == [4, 3] and row["global_shape"] == [8, 3]
    assert row["subclass"] == "torch.distributed.tensor.DTensor"


_SHARDED_SCRIPT = """
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor
flat = torch.arange(20.0) / 7
# FSDP1's LOCAL_STATE_DICT: each rank's `_flat_param` as a ShardedTensor of its local shard.
shards = [Shard(flat, ShardMetadata([0], [20], "rank:0/cpu"))]
torch.save({"_fsdp_wrapped_module._flat_param": ShardedTensor._init_from_local_shards(shards, (20,))}, sys.argv[2])
torch.save(flat, sys.argv[3])
sys.stdout.flush()
os._exit(0)
"""


def test_fsdp1_flat_param_shard_is_listed_with_its_values(tmp_path):
    import subprocess
    import sys

    import pytest
    import torch.distributed as dist

    from ckptview.core.read.values.reading import read_values
    from tests.support.torch_compare import same_values

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available in this build")
    script = tmp_path / "rank.py"
    script.write_text(_SHARDED_SCRIPT)
    out, ref = tmp_path / "rank0.pt", tmp_path / "flat.pt"
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), str(out), str(ref)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ckpt = open_checkpoint(out)
    try:
        info = ckpt.tensor("_fsdp_wrapped_module._flat_param")
        assert info.storage is not None
        assert same_values(read_values(info), torch.load(ref, weights_only=True))
        assert info.extra["subclass"].endswith("ShardedTensor") and info.extra["global_shape"] == [20]
    finally:
        ckpt.close()

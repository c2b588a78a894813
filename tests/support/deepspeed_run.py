"""DeepSpeed output folders in the layout DeepSpeed 0.19 writes, built with torch alone (test helper).

`engine.save_checkpoint(OUT)` writes ``OUT/latest`` (the tag's name), ``OUT/zero_to_fp32.py`` and
``zero_to_torch.py`` (its recovery scripts) and a folder per tag, ``OUT/global_stepN/`` (deepspeed/runtime/engine.py, checkpoint/constants.py):

- ``mp_rank_00_model_states.pt`` (ZeRO-3: ``zero_pp_rank_R_mp_rank_00_model_states.pt`` per rank): the dict
  of ``_common_checkpoint_state``: ``module`` (the state dict; ZeRO-3 keeps empty placeholders for the
  partitioned parameters), ``buffer_names``, ``optimizer`` (ZeRO: None), ``param_shapes`` (ZeRO: one
  OrderedDict name -> torch.Size per param group, in the order of the flat groups), ``frozen_param_shapes``,
  ``shared_params``, ``frozen_param_fragments``, ``lr_scheduler``, ..., ``global_steps``, ``global_samples``,
  ``dp_world_size``, ``mp_world_size``, ``checkpoint_parallel_dimensions``, ``ds_config``, ``ds_version``;
- ``zero_pp_rank_R_mp_rank_00_optim_states.pt`` (``bf16_`` in front with bf16) per data-parallel rank:
  ``{"optimizer_state_dict": ..., "ds_config": ..., "ds_version": ...}``. ZeRO-1/2 (stage_1_and_2.py
  ``state_dict``): ``loss_scaler``, ``dynamic_loss_scale``, ``overflow``, ``clip_grad``,
  ``base_optimizer_state`` (torch's optimizer over the rank's flat fp32 partitions, padding kept),
  ``single_partition_of_fp32_groups`` (the master weights, padding cut), ``zero_stage``, ``group_paddings``,
  ``param_alignment_paddings``, ``partition_count``, ``ds_version``, ``param_slice_mappings`` (per group: name -> fragment_address(numel,
  start) inside the partition). ZeRO-3 (stage3.py ``_rigid_state_dict``): ``zero_stage``, ``loss_scaler``,
  ``dynamic_loss_scale``, ``overflow``, ``partition_count``, ``optimizer_state_dict`` (torch's, over the
  flat partitions), ``fp32_flat_groups`` (each parameter's 1/W slice, ceil-divided, back to back).

DeepSpeed's own classes (``ZeroStageEnum``, ``LossScaler``, ``fragment_address``) are pickled by name: the
modules are put in ``sys.modules`` (``deepspeed_classes``) so torch.save writes and torch.load reads them.
Checked against what DeepSpeed 0.19.8 itself wrote (ZeRO-1/2/3, bf16, CPU accelerator, gloo): the same
files, keys in the same order, the same classes.
"""

from __future__ import annotations

import enum
import math
import os
import sys
import types
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

DS_VERSION = "0.19.8"


class Net(nn.Module):
    """A small model with a LayerNorm, a BatchNorm (buffers, a counter) and shapes that repeat."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8))
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.features(x)))


def _module(monkeypatch: Any, name: str) -> types.ModuleType:
    parts = name.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if parent not in sys.modules:
            monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def deepspeed_classes(monkeypatch: Any) -> types.SimpleNamespace:
    """DeepSpeed's pickled classes under their own module names (undone by `monkeypatch`)."""
    config = _module(monkeypatch, "deepspeed.runtime.zero.config")

    class ZeroStageEnum(int, enum.Enum):
        disabled = 0
        optimizer_states = 1
        gradients = 2
        weights = 3

    fragments = _module(monkeypatch, "deepspeed.utils.tensor_fragment")

    @dataclass
    class fragment_address:  # noqa: N801 - DeepSpeed's name
        numel: int
        start: int

    scaler = _module(monkeypatch, "deepspeed.runtime.fp16.loss_scaler")

    class LossScaler:
        def __init__(self, scale: float = 1.0) -> None:
            self.cur_scale = scale
            self.dynamic = False

    for cls, module in ((ZeroStageEnum, config), (fragment_address, fragments), (LossScaler, scaler)):
        cls.__module__ = module.__name__
        cls.__qualname__ = cls.__name__
        setattr(module, cls.__name__, cls)
    return types.SimpleNamespace(ZeroStageEnum=ZeroStageEnum, fragment_address=fragment_address,
                                 LossScaler=LossScaler)


@dataclass
class Step:
    """What one tag folder holds, as the test needs to check it."""

    folder: str
    step: int
    params: dict[str, torch.Tensor]  # name -> the fp32 master weight after the step
    state: dict[str, dict[str, torch.Tensor]]  # name -> {"exp_avg": ..., "exp_avg_sq": ...} (whole parameter)
    files: list[str] = field(default_factory=list)


def _config(stage: int, bf16: bool, world: int) -> dict[str, Any]:
    return {"train_batch_size": 4 * world, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "bf16": {"enabled": bf16},
            "zero_optimization": {"stage": stage}, "steps_per_print": 10}


def write_run(out: str | os.PathLike[str], monkeypatch: Any, *, steps: tuple[int, ...] = (10, 20), stage: int = 2,
              world: int = 1, bf16: bool = False) -> list[Step]:
    """Train `Net` with Adam on flat fp32 partitions as ZeRO does and save each step as DeepSpeed does."""
    ds = deepspeed_classes(monkeypatch)
    out = os.fspath(out)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    groups = [[n for n in names if not n.endswith("bias")], [n for n in names if n.endswith("bias")]]
    params = dict(net.named_parameters())
    shapes = {n: p.shape for n, p in params.items()}
    layout = _Flat(groups, shapes, stage, world)
    # Each rank's flat fp32 partition of each group, an Adam over them (one param per group, as ZeRO's)
    masters = [[torch.zeros(layout.partition_numel(g, r)) for g in range(len(groups))] for r in range(world)]
    for r in range(world):
        for g in range(len(groups)):
            masters[r][g].copy_(layout.scatter(g, r, {n: params[n].detach() for n in groups[g]}))
    flats = [[nn.Parameter(t) for t in ranks] for ranks in masters]
    opts = [torch.optim.Adam([{"params": [flats[r][g]]} for g in range(len(groups))], lr=1e-3, foreach=False)
            for r in range(world)]
    gen = torch.Generator().manual_seed(1)
    written: list[Step] = []
    for step in range(1, max(steps) + 1):
        net.zero_grad()
        net(torch.randn(4, 6, generator=gen)).pow(2).mean().backward()
        grads = {n: p.grad.detach() for n, p in params.items()}
        for r in range(world):
            for g in range(len(groups)):
                flats[r][g].grad = layout.scatter(g, r, {n: grads[n] for n in groups[g]})
            opts[r].step()
        with torch.no_grad():  # the ranks' updated partitions back into the model's parameters
            for g in range(len(groups)):
                for name, value in layout.gather(g, [flats[r][g].detach() for r in range(world)]).items():
                    params[name].copy_(value)
        if step in steps:
            written.append(_save(out, step, net, layout, flats, opts, ds, _config(stage, bf16, world), bf16))
    with open(os.path.join(out, "latest"), "w") as fh:
        fh.write(f"global_step{max(steps)}")
    for script in ("zero_to_fp32.py", "zero_to_torch.py"):  # DeepSpeed's recovery scripts, beside the tags
        with open(os.path.join(out, script), "w") as fh:
            fh.write("#!/usr/bin/env python\n# DeepSpeed's recovery script\n")
    return written


class _Flat:
    """Where each parameter's elements sit in each rank's flat partition (ZeRO-1/2 or ZeRO-3)."""

    def __init__(self, groups: list[list[str]], shapes: dict[str, torch.Size], stage: int, world: int) -> None:
        self.groups, self.shapes, self.stage, self.world = groups, shapes, stage, world
        self.padded = []  # ZeRO-1/2: each group's flat length, aligned to 2 * world (nccl_start_alignment_factor)
        for names in groups:
            total = sum(shapes[n].numel() for n in names)
            align = 2 * world
            self.padded.append(align * math.ceil(total / align))

    def piece(self, name: str) -> int:
        """ZeRO-3: the elements of `name` each rank holds (ceil-divided, the last rank padded)."""
        return math.ceil(self.shapes[name].numel() / self.world)

    def partition_numel(self, g: int, rank: int) -> int:
        if self.stage == 3:
            return sum(self.piece(n) for n in self.groups[g])
        return self.padded[g] // self.world

    def offsets(self, g: int) -> dict[str, int]:
        out, at = {}, 0
        for name in self.groups[g]:
            out[name] = at
            at += self.shapes[name].numel()
        return out

    def scatter(self, g: int, rank: int, values: dict[str, torch.Tensor]) -> torch.Tensor:
        """Rank `rank`'s flat partition of group `g` from whole tensors."""
        if self.stage == 3:
            pieces = []
            for name in self.groups[g]:
                flat, n = values[name].reshape(-1).float(), self.piece(name)
                padded = torch.cat([flat, flat.new_zeros(n * self.world - flat.numel())])
                pieces.append(padded[rank * n:(rank + 1) * n])
            return torch.cat(pieces)
        flat = torch.cat([values[n].reshape(-1).float() for n in self.groups[g]])
        flat = torch.cat([flat, flat.new_zeros(self.padded[g] - flat.numel())])
        size = self.padded[g] // self.world
        return flat[rank * size:(rank + 1) * size].clone()

    def gather(self, g: int, partitions: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """Whole tensors of group `g` from every rank's partition."""
        out = {}
        if self.stage == 3:
            at = 0
            for name in self.groups[g]:
                n = self.piece(name)
                whole = torch.cat([p[at:at + n] for p in partitions])[: self.shapes[name].numel()]
                out[name] = whole.view(self.shapes[name])
                at += n
            return out
        flat = torch.cat(partitions)
        for name, at in self.offsets(g).items():
            out[name] = flat[at:at + self.shapes[name].numel()].view(self.shapes[name])
        return out

    def slice_mappings(self, g: int, rank: int, fragment_address: type) -> OrderedDict[str, Any]:
        """ZeRO-1/2's ``param_slice_mappings[g]`` of one rank: the parameters its partition holds a piece of."""
        size = self.padded[g] // self.world
        lo, hi = rank * size, (rank + 1) * size
        out: OrderedDict[str, Any] = OrderedDict()
        for name, start in self.offsets(g).items():
            end = start + self.shapes[name].numel()
            if start < hi and end > lo:
                first, last = max(start, lo), min(end, hi)
                out[name] = fragment_address(numel=last - first, start=first - lo)
        return out

    def padding(self, g: int, rank: int) -> int:
        """ZeRO-1/2's ``groups_padding[g]``: the padding of the last rank's partition."""
        total = sum(self.shapes[n].numel() for n in self.groups[g])
        return self.padded[g] - total if rank == self.world - 1 else 0


def _save(out: str, step: int, net: Net, layout: _Flat, flats: list[list[nn.Parameter]], opts: list[Any],
          ds: types.SimpleNamespace, config: dict[str, Any], bf16: bool) -> Step:
    tag = os.path.join(out, f"global_step{step}")
    os.makedirs(tag, exist_ok=True)
    stage, world = layout.stage, layout.world
    module = OrderedDict((k, v.detach().clone().to(torch.bfloat16) if bf16 and v.is_floating_point() else
                          v.detach().clone()) for k, v in net.state_dict().items())
    if stage == 3:  # partitioned parameters are empty placeholders in the module's state dict
        for name, _ in net.named_parameters():
            module[name] = torch.empty(0, dtype=module[name].dtype)
    buffer_names = [n for n, _ in net.named_buffers()]
    param_shapes = [OrderedDict((n, layout.shapes[n]) for n in names) for names in layout.groups]
    frozen = OrderedDict() if stage >= 2 else None
    common = dict(module=module, buffer_names=buffer_names, optimizer=None, param_shapes=param_shapes,
                  frozen_param_shapes=frozen, shared_params={}, frozen_param_fragments=frozen, lr_scheduler=None,
                  data_sampler=None, random_ltd=None, skipped_steps=0,
                  global_steps=step, global_samples=step * 4 * world, dp_world_size=world, mp_world_size=1,
                  checkpoint_parallel_dimensions={"pp_degree": 1, "tp_degree": 1}, ds_config=config,
                  ds_version=DS_VERSION)
    files = []
    model_files = [f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in range(world)] if stage == 3 else [
        "mp_rank_00_model_states.pt"]
    for name in model_files:
        torch.save(common, os.path.join(tag, name))
        files.append(name)
    prefix = "bf16_" if bf16 else ""
    for r in range(world):
        base = opts[r].state_dict()
        if stage == 3:
            inner = {"zero_stage": ds.ZeroStageEnum.weights, "loss_scaler": ds.LossScaler(1.0),
                     "dynamic_loss_scale": False, "overflow": False, "partition_count": world,
                     "optimizer_state_dict": base, "fp32_flat_groups": [p.detach().clone() for p in flats[r]]}
        else:
            lean = [p.detach()[: p.numel() - layout.padding(g, r)].clone() for g, p in enumerate(flats[r])]
            inner = {"loss_scaler": ds.LossScaler(1.0), "dynamic_loss_scale": False, "overflow": False,
                     "clip_grad": 0.0, "base_optimizer_state": base, "single_partition_of_fp32_groups": lean,
                     "zero_stage": ds.ZeroStageEnum(stage),
                     "group_paddings": [layout.padding(g, r) for g in range(len(flats[r]))],
                     "param_alignment_paddings": [[0] * len(names) for names in layout.groups],
                     "partition_count": [world] * len(flats[r]), "ds_version": DS_VERSION,
                     "param_slice_mappings": [layout.slice_mappings(g, r, ds.fragment_address)
                                              for g in range(len(flats[r]))]}
        name = f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt"
        torch.save({"optimizer_state_dict": inner, "ds_config": config, "ds_version": DS_VERSION},
                   os.path.join(tag, name))
        files.append(name)
    whole: dict[str, torch.Tensor] = {}
    state: dict[str, dict[str, torch.Tensor]] = {}
    for g in range(len(layout.groups)):
        whole.update(layout.gather(g, [flats[r][g].detach() for r in range(world)]))
        for key in ("exp_avg", "exp_avg_sq"):
            parts = [opts[r].state[flats[r][g]][key] for r in range(world)]
            for name, value in layout.gather(g, parts).items():
                state.setdefault(name, {})[key] = value.clone()
    return Step(tag, step, {n: t.clone() for n, t in whole.items()}, state, files)


__all__ = ["Net", "Step", "deepspeed_classes", "write_run"]

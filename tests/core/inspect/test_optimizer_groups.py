"""Optimizer param groups as real libraries build them, mapped by one search over all groups together."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from ckptview.core import open_checkpoint
from ckptview.core.inspect.optimizer import find_optimizers
from ckptview.core.inspect.optimizer_align import align_groups


def step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, steps: int = 2) -> None:
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def torch_names(model: nn.Module, opt: torch.optim.Optimizer) -> dict[int, str]:
    """Optimizer id -> parameter name, the ground truth from the live objects."""
    by_param = {id(p): n for n, p in model.named_parameters()}
    ids = [i for g in opt.state_dict()["param_groups"] for i in g["params"]]
    params = [p for g in opt.param_groups for p in g["params"]]
    return {i: by_param[id(p)] for i, p in zip(ids, params, strict=True)}


def mapped(tmp_path, model: nn.Module, opt: torch.optim.Optimizer, name: str = "ckpt.pt"):
    path = tmp_path / name
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
    ckpt = open_checkpoint(str(path))
    (found,) = find_optimizers(ckpt)
    return ckpt, found


def check_names(found, want: dict[int, str]) -> None:
    assert found.mapping in ("exact", "by-order"), found.note
    got = {p.id: p.name for p in found.params}
    assert got == want, found.note


class FrozenUnused(nn.Module):
    """A frozen layer kept in its group and a module never used in forward: both have no state."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 8)
        self.frozen = nn.Linear(8, 8)
        self.unused = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.hidden = nn.Linear(8, 8)
        self.head = nn.Linear(8, 8)
        self.frozen.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.hidden(self.norm(self.frozen(self.embed(x))))))


def test_interleaved_decay_groups_with_frozen_and_unused(tmp_path) -> None:
    torch.manual_seed(0)
    model = FrozenUnused()
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if p.ndim > 1], "weight_decay": 0.05},
              {"params": [p for n, p in named if p.ndim <= 1], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3)
    step(model, opt, torch.randn(4, 6))
    state = opt.state_dict()["state"]
    assert len(state) < len(named)  # frozen and unused parameters really have no state
    ckpt, found = mapped(tmp_path, model, opt)
    check_names(found, torch_names(model, opt))
    assert "do not fit" not in found.note
    ckpt.close()


def _layer_id(name: str, depth: int) -> int:
    if name.startswith(("cls_token", "pos_embed", "patch_embed")):
        return 0
    if name.startswith("blocks."):
        return int(name.split(".")[1]) + 1
    return depth + 1


class TinyViT(nn.Module):
    """The parameter layout of timm's VisionTransformer (names and order), small."""

    def __init__(self, dim: int = 8, depth: int = 2) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, 5, dim) * 0.02)
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, dim, 2, 2)
        self.blocks = nn.ModuleList()
        for _ in range(depth):
            block = nn.Module()
            block.norm1 = nn.LayerNorm(dim)
            block.attn = nn.Module()
            block.attn.qkv = nn.Linear(dim, 3 * dim)
            block.attn.proj = nn.Linear(dim, dim)
            block.norm2 = nn.LayerNorm(dim)
            block.mlp = nn.Module()
            block.mlp.fc1 = nn.Linear(dim, 4 * dim)
            block.mlp.fc2 = nn.Linear(4 * dim, dim)
            self.blocks.append(block)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for b in self.blocks:
            q, k, v = b.attn.qkv(b.norm1(x)).chunk(3, dim=-1)
            att = torch.softmax(q @ k.transpose(1, 2), dim=-1)
            x = x + b.attn.proj(att @ v)
            x = x + b.mlp.fc2(torch.relu(b.mlp.fc1(b.norm2(x))))
        return self.head(self.norm(x)[:, 0])


def layer_decay_groups(model: TinyViT, depth: int, decay: float = 0.75) -> list[dict]:
    """What timm's ``param_groups_layer_decay`` builds: groups in order of first appearance."""
    no_wd = {"cls_token", "pos_embed"}
    scales = [decay ** (depth + 1 - i) for i in range(depth + 2)]
    groups: dict[str, dict] = {}
    for name, param in model.named_parameters():
        kind = "no_decay" if param.ndim == 1 or name in no_wd else "decay"
        layer = _layer_id(name, depth)
        group = groups.setdefault(f"layer_{layer}_{kind}", {
            "lr_scale": scales[layer], "weight_decay": 0.0 if kind == "no_decay" else 0.05, "params": []})
        group["params"].append(param)
    return list(groups.values())


def test_timm_layer_decay_eight_groups(tmp_path) -> None:
    torch.manual_seed(0)
    model = TinyViT(depth=2)
    groups = layer_decay_groups(model, depth=2)
    assert len(groups) == 8
    opt = torch.optim.AdamW(groups, lr=1e-3)
    step(model, opt, torch.randn(2, 3, 4, 4))
    ckpt, found = mapped(tmp_path, model, opt)
    check_names(found, torch_names(model, opt))
    assert "8 param groups" in found.note
    ckpt.close()


def test_timm_layer_decay_deep_is_bounded(tmp_path) -> None:
    torch.manual_seed(0)
    model = TinyViT(depth=12)
    opt = torch.optim.AdamW(layer_decay_groups(model, depth=12), lr=1e-3)
    step(model, opt, torch.randn(2, 3, 4, 4), steps=1)
    ckpt, found = mapped(tmp_path, model, opt)
    check_names(found, torch_names(model, opt))
    ckpt.close()


def brute_force(groups: list[list], shapes: list) -> int:
    """Number of alignments (capped at 2) by enumeration: the reference for the search."""
    sizes = [len(g) for g in groups]
    flat = [h for g in groups for h in g]
    count = 0
    for combo in itertools.permutations(range(len(shapes)), len(flat)):
        if any(h is not None and shapes[j] != h for h, j in zip(flat, combo, strict=True)):
            continue
        pos, ok = 0, True
        for s in sizes:
            part = combo[pos:pos + s]
            ok &= list(part) == sorted(part)
            pos += s
        count += ok
        if count >= 2:
            return 2
    return count


def test_search_agrees_with_enumeration() -> None:
    a, b = (2,), (3,)
    cases = [
        ([[a, b], [a]], [a, a, b]),
        ([[a, None], [b]], [b, a, a]),
        ([[a], [a]], [a, a]),
        ([[b, a], [a]], [a, b, a]),
        ([[a, a], [b, b]], [a, b, a]),
        ([[None], [a, b]], [a, b, a, b]),
        ([[a, b], [b, a]], [a, b, b, a]),
        ([[], [a]], [b, a]),
    ]
    for groups, shapes in cases:
        got = align_groups(groups, shapes)
        want = brute_force(groups, shapes)
        assert (got.solutions, got.complete) == (want, True), (groups, shapes)
        if got.picked is not None:
            flat = [h for g in groups for h in g]
            assert all(h is None or shapes[j] == h for h, j in zip(flat, got.picked, strict=True))
            assert len(set(got.picked)) == len(flat)


def test_no_fit_says_which_shape(tmp_path) -> None:
    torch.manual_seed(0)
    model = FrozenUnused()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step(model, opt, torch.randn(4, 6))
    path = tmp_path / "ckpt.pt"
    other = nn.Sequential(nn.Linear(6, 8), nn.Linear(8, 8), nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 8),
                          nn.Linear(8, 3))
    torch.save({"model": other.state_dict(), "optimizer": opt.state_dict()}, path)
    ckpt = open_checkpoint(str(path))
    (found,) = find_optimizers(ckpt)
    assert found.mapping == "none"
    assert "parameter 10 (state shape (8, 8))" in found.note, found.note
    assert "do not fit the" not in found.note
    ckpt.close()


def test_tree_rows_named_by_parameter(tmp_path) -> None:
    from ckptview.core.inspect.grouping import find_row, group_tree
    from ckptview.core.inspect.optimizer import label_state_rows

    torch.manual_seed(0)
    model = FrozenUnused()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    step(model, opt, torch.randn(4, 6))
    ckpt, found = mapped(tmp_path, model, opt)
    top = group_tree(ckpt.root)
    label_state_rows(top, ckpt)
    want = torch_names(model, opt)
    row = find_row(top, "optimizer.state.0.exp_avg")
    assert row.label == "exp_avg"  # under its parameter's row, which names it
    assert find_row(top, "optimizer.state.0").label == f"0 · {want[0]}"
    assert f"exp_avg of {want[0]}".lower() in row.search_name and row.search_name.endswith("optimizer.state.0.exp_avg")
    ckpt.close()


def test_search_work_is_bounded() -> None:
    """Fifty groups whose last parameters compete for too few tensors: the search gives up within its budget."""
    groups = [[None] * 9 + [(3,)] for _ in range(50)]
    got = align_groups(groups, [(3,)] * 60 + [(2,)] * 500, work_limit=20_000)
    assert got.picked is None and not got.complete and got.states <= 20_000
    # The same with too few tensors of the needed shape early on is refused without searching.
    got = align_groups(groups, [(3,)] * 50 + [(2,)] * 500)
    assert got.picked is None and got.complete and got.states == 0

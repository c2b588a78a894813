"""Size facts count each distinct view once: tied weights, repeated views and meta tensors."""

from __future__ import annotations

import torch

from ckptview.core import open_checkpoint
from ckptview.core.inspect.summary import size_facts


def _reference(ckpt) -> tuple[int, dict[str, int]]:
    """The facts by the plain rule: one count per (storage, offset, shape, stride), or per tensor object."""
    seen, params, sizes = set(), 0, {}
    for entry in ckpt.tensors():
        info = entry.info
        key = (id(info.storage), info.offset, info.shape, info.stride) if info.storage is not None else id(info)
        if key in seen:
            continue
        seen.add(key)
        if "optim" not in (str(entry.path[0]).lower() if entry.path else ""):
            params += info.numel
        sizes[info.dtype] = sizes.get(info.dtype, 0) + info.nbytes
    return params, sizes


def test_tied_and_repeated_views_count_once(tmp_path):
    base = torch.arange(24, dtype=torch.float32)
    embed = torch.randn(5, 3)
    meta = torch.empty(4, 4, device="meta")
    state = {
        "embed.weight": embed, "lm_head.weight": embed,  # tied: one object under two names
        "a": base[:6], "b": base[:6].view(2, 3), "c": base[6:12], "d": base[:6], "e": base.view(4, 6),
        "half": torch.ones(3, dtype=torch.float16), "meta": meta, "meta_again": meta,
        "other_meta": torch.empty(2, device="meta"),
        "optimizer": {"state": {0: {"exp_avg": torch.zeros(5, 3)}}},
    }
    path = tmp_path / "tied.pt"
    torch.save(state, path)
    ckpt = open_checkpoint(path)
    try:
        facts = size_facts(ckpt)
        params, sizes = _reference(ckpt)
        assert facts.parameters == params
        assert dict(facts.bytes_by_dtype) == sizes
        assert params == 15 + 6 + 6 + 6 + 24 + 3 + 16 + 2  # a, b, c differ; d repeats a; meta once
    finally:
        ckpt.close()

"""The summary's size facts: tied weights and repeated views counted once, optimizer state left out of
the parameter count, bytes by dtype over the distinct tensors."""

from __future__ import annotations

import torch

from ckptview.core import open_checkpoint
from ckptview.core.inspect.summary import size_facts


def test_tied_weights_views_and_optimizer_state(tmp_path) -> None:
    w = torch.randn(10, 4)
    state = {
        "embed.weight": w, "lm_head.weight": w,  # tied: one tensor under two names
        "view": w[2:5], "view2": w[2:5],  # the same view twice
        "t": w.t(),  # another view of the same storage: counted
        "b": torch.zeros(3, dtype=torch.float16),
        "optimizer": {"state": {0: {"exp_avg": torch.zeros(10, 4)}}},  # bytes yes, parameters no
    }
    torch.save(state, tmp_path / "m.pt")
    ckpt = open_checkpoint(str(tmp_path / "m.pt"))
    try:
        facts = size_facts(ckpt)
    finally:
        ckpt.close()
    assert facts.parameters == 40 + 12 + 40 + 3
    assert facts.bytes_by_dtype == [("float32", (40 + 12 + 40 + 40) * 4), ("float16", 6)]

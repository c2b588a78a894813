"""A checkpoint owns the files its reader opened (OpenFiles), and closing it closes every one."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import save_file

from ckptview.core import open_checkpoint
from ckptview.core.read.values import read_values


def fds_under(folder) -> list[str]:
    """The files under *folder* this process holds open: counting every descriptor would also count the
    ones earlier tests left to the garbage collector, which may close them in the middle of this test."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder) + os.sep):
            found.append(target)
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("layout", ["zip", "sharded", "training-folder"])
def test_closing_a_checkpoint_closes_every_file_it_opened(tmp_path, layout) -> None:
    a, b = torch.randn(4, 3), torch.randn(5)
    if layout == "zip":
        torch.save({"a": a, "b": b}, tmp_path / "m.pt")
        path = tmp_path / "m.pt"
    else:
        folder = tmp_path / "checkpoint-10"
        folder.mkdir()
        save_file({"a": a}, str(folder / "model-00001-of-00002.safetensors"))
        save_file({"b": b}, str(folder / "model-00002-of-00002.safetensors"))
        index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                "b": "model-00002-of-00002.safetensors"}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        if layout == "training-folder":
            (folder / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
        path = folder
    assert fds_under(tmp_path) == []
    ckpt = open_checkpoint(str(path))
    try:
        assert "_file_maps" not in ckpt.metadata  # resources live in their owner, not in a metadata dict
        for entry in ckpt.tensors():
            read_values(entry.info)
        assert len(list(ckpt.files)) >= 1
        assert fds_under(tmp_path)  # the reader does hold the files while the checkpoint is open
    finally:
        ckpt.close()
    assert fds_under(tmp_path) == []

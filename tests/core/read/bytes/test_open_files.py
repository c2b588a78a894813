"""A checkpoint owns the files its reader opened (OpenFiles), and closing it closes every one."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from ckptview.core import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.descriptors import HAVE_PROC_FDS, fds_under


@pytest.mark.skipif(not HAVE_PROC_FDS, reason="needs /proc/self/fd")
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

"""A reader reads the file the open found: its `Source` (path, head, identity), through the byte layer.

`open_checkpoint` stats the path, reads its first bytes and takes its identity; the reader then opens
the file again. A file swapped in between (a training loop renaming a new save over the path) must
fail the open with the byte layer's one-line "changed" error, never be listed in place of the file
whose head chose the reader.
"""

from __future__ import annotations

import json
import os
import pickle
import warnings

import pytest
import torch
from safetensors.torch import save_file

from ckptview.core.errors import FileChangedError
from ckptview.core.read import open as open_module
from ckptview.core.read.open import open_checkpoint

FORMATS = ("torch-zip", "torch-legacy", "safetensors", "plain-pickle", "hf-index", "torch-export")


def _write(fmt: str, path: str, name: str) -> None:
    state = {name: torch.arange(4, dtype=torch.float32)}
    if fmt == "torch-zip":
        torch.save(state, path)
    elif fmt == "torch-legacy":
        torch.save(state, path, _use_new_zipfile_serialization=False)
    elif fmt == "safetensors":
        save_file(state, path)
    elif fmt == "torch-export":
        module = torch.nn.Module()
        module.register_parameter(name, torch.nn.Parameter(torch.ones(4)))
        module.forward = lambda x: x * getattr(module, name)  # type: ignore[method-assign]
        torch.export.save(torch.export.export(module, (torch.ones(4),)), path)
    elif fmt == "plain-pickle":
        with open(path, "wb") as fh:
            pickle.dump({name: [1, 2, 3]}, fh)
    else:  # an index file naming one shard beside it
        folder = os.path.dirname(path)
        shard = f"{name}.safetensors"
        save_file(state, os.path.join(folder, shard))
        with open(path, "w") as fh:
            json.dump({"metadata": {}, "weight_map": {name: shard}}, fh)


def _pair(fmt: str, tmp_path) -> tuple[str, str]:
    """The file opened (holding 'first') and another of the same format (holding 'second')."""
    ext = {"safetensors": ".safetensors", "hf-index": ".index.json", "torch-export": ".pt2"}.get(fmt, ".pt")
    path, other = str(tmp_path / f"model{ext}"), str(tmp_path / f"other{ext}")
    _write(fmt, path, "first")
    _write(fmt, other, "second")
    return path, other


def _names(path: str) -> list[str]:
    ckpt = open_checkpoint(path)
    try:
        return [str(node.key) for node in ckpt.root.children]
    finally:
        ckpt.files.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_file_is_listed_when_nothing_changes(tmp_path, fmt):
    path, _ = _pair(fmt, tmp_path)
    names = _names(path)
    assert "first" in names and "second" not in names


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_file_replaced_after_its_head_was_read_is_refused(tmp_path, monkeypatch, fmt):
    path, other = _pair(fmt, tmp_path)
    real_read_head = open_module._read_head

    def read_head_then_swap(p: str, st: os.stat_result) -> bytes:
        head = real_read_head(p, st)
        os.replace(other, p)  # another file of the same format, renamed over the path
        return head

    monkeypatch.setattr(open_module, "_read_head", read_head_then_swap)
    with pytest.raises(FileChangedError) as info:
        open_checkpoint(path)
    message = str(info.value)
    assert message == f"the file changed on disk since it was opened (replaced by another file): {path}"
    assert "\n" not in message


def _save_dcp(state: dict, folder: str) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=folder)


def test_a_dcp_metadata_replaced_after_the_folder_was_looked_at_is_refused(tmp_path, monkeypatch):
    """A folder's files are read as the open found them: a `.metadata` renamed over after the folder's
    identities were taken fails the open instead of listing another checkpoint's tensors."""
    folder, other = str(tmp_path / "step_1"), str(tmp_path / "step_2")
    _save_dcp({"first": torch.ones(4)}, folder)
    _save_dcp({"second": torch.ones(4)}, other)
    assert "first" in _names(folder)
    real_identities = open_module.folder_identities

    def identities_then_swap(path: str):
        found = real_identities(path)
        os.replace(os.path.join(other, ".metadata"), os.path.join(folder, ".metadata"))
        return found

    monkeypatch.setattr(open_module, "folder_identities", identities_then_swap)
    with pytest.raises(FileChangedError) as info:
        open_checkpoint(folder)
    assert str(info.value) == ("the file changed on disk since it was opened (replaced by another file): "
                               f"{os.path.join(folder, '.metadata')}")

"""Truncated downloads (issue 45, defect 7): what can be read is listed, marked as salvaged.

A torch.save file cut short said `truncated or corrupt zip: end of central directory not found` and nothing
else. torch's zip stores every record uncompressed after a local header, data.pkl first: the records before
the cut are found by those headers (bounded by the work budget), their tensors read as torch would, the
others marked broken; a warning says it looks like an incomplete download, with the size the file's own
records need. A cut safetensors file says so too and lists its complete tensors.
"""

from __future__ import annotations

import json
import os
import zipfile

import pytest
import torch
from safetensors.torch import load_file, save_file

from ckptview.cli import main
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.torch_compare import same_values


def training_state() -> dict:
    """A training checkpoint of a small MLP: tensors of several sizes and dtypes, an optimizer, values."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 32)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
            "ids": torch.arange(7, dtype=torch.int64), "half": torch.randn(5, 3).half()}


def flat(obj, prefix=""):
    """name -> tensor, as the checkpoint's contract names them."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flat(v, f"{prefix}{k}."))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flat(v, f"{prefix}{i}."))
    elif isinstance(obj, torch.Tensor):
        out[prefix[:-1]] = obj
    return out


def records(path) -> dict[str, tuple[int, int]]:
    """record name (below the archive's root) -> (where its data starts, its size), from the whole file."""
    with zipfile.ZipFile(path) as zf:
        out = {}
        for info in zf.infolist():
            with open(path, "rb") as fh:
                fh.seek(info.header_offset + 26)
                name_len, extra_len = int.from_bytes(fh.read(2), "little"), int.from_bytes(fh.read(2), "little")
            out[info.filename.partition("/")[2]] = (info.header_offset + 30 + name_len + extra_len, info.file_size)
        return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("whole") / "train.pt"
    state = training_state()
    torch.save(state, path)
    return str(path), flat(torch.load(path, weights_only=True))


def cut(path: str, at: int, folder) -> str:
    out = os.path.join(folder, f"cut_{at}.pt")
    with open(path, "rb") as src, open(out, "wb") as dst:
        dst.write(src.read(at))
    return out


def cut_points(path: str) -> dict[str, int]:
    recs = records(path)
    size = os.path.getsize(path)
    storages = sorted((start, n) for name, (start, n) in recs.items() if name.startswith("data/"))
    data_pkl = recs["data.pkl"]
    return {"after data.pkl": data_pkl[0] + data_pkl[1] + 16,
            "inside the first storage": storages[0][0] + storages[0][1] // 2,
            "inside a middle storage": storages[len(storages) // 2][0] + 3,
            "before the directory": storages[-1][0] + storages[-1][1] + 16,
            "one byte short": size - 1}


@pytest.mark.parametrize("where", ["after data.pkl", "inside the first storage", "inside a middle storage",
                                   "before the directory", "one byte short"])
def test_a_cut_torch_save_lists_what_it_holds_and_reads_what_is_there(saved, tmp_path, where):
    path, truth = saved
    at = cut_points(path)[where]
    short = cut(path, at, tmp_path)
    ckpt = open_checkpoint(short)
    try:
        assert "incomplete download" in ckpt.warnings[0] and "salvaged" in ckpt.warnings[0], ckpt.warnings
        assert f"{os.path.getsize(short):,}" in ckpt.warnings[0] or "bytes" in ckpt.warnings[0]
        entries = {e.name: e.info for e in ckpt.tensors()}
        assert set(entries) == set(truth)  # names, from data.pkl, whole
        readable = 0
        for name, tensor in truth.items():
            info = entries[name]
            assert list(info.shape) == list(tensor.shape) and info.dtype == str(tensor.dtype).removeprefix("torch.")
            if info.broken or (info.storage is not None and info.storage.broken):
                reason = info.broken or info.storage.broken
                assert "cut off" in reason, reason
            else:
                assert same_values(read_values(info), tensor), name
                readable += 1
        if where in ("before the directory", "one byte short"):
            assert readable == len(truth)
        if where == "after data.pkl":
            assert readable == 0
    finally:
        ckpt.close()


def test_the_warning_says_what_size_the_records_need(saved, tmp_path):
    path, _truth = saved
    short = cut(path, cut_points(path)["inside the first storage"], tmp_path)
    ckpt = open_checkpoint(short)
    try:
        said = ckpt.warnings[0]
        assert f"{os.path.getsize(short):,} bytes" in said and "at least" in said, said
    finally:
        ckpt.close()


def test_a_cut_inside_data_pkl_says_it_looks_like_an_incomplete_download(saved, tmp_path):
    path, _truth = saved
    short = cut(path, records(path)["data.pkl"][0] + 10, tmp_path)
    with pytest.raises(CheckpointFormatError, match="incomplete download"):
        open_checkpoint(short)


def test_the_command_line_lists_the_salvaged_file(saved, tmp_path, capsys):
    path, truth = saved
    short = cut(path, cut_points(path)["inside a middle storage"], tmp_path)
    assert main(["info", short, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "salvaged" in data["warnings"][0]
    assert {t["name"] for t in data["tensors"]} == set(truth)
    assert any("cut off" in t.get("broken", "") for t in data["tensors"])
    assert main(["info", short]) == 0
    assert "incomplete download" in capsys.readouterr().out


def test_a_cut_pytorch_model_bin_of_a_hub_folder(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)
    model = transformers.LlamaForCausalLM(config)
    folder = tmp_path / "hub"
    model.save_pretrained(folder)
    (folder / "model.safetensors").unlink()  # the layout transformers wrote before safetensors
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    whole = flat(torch.load(folder / "pytorch_model.bin", weights_only=True))
    at = cut_points(str(folder / "pytorch_model.bin"))["inside a middle storage"]
    data = (folder / "pytorch_model.bin").read_bytes()[:at]
    (folder / "pytorch_model.bin").write_bytes(data)
    ckpt = open_checkpoint(str(folder))
    try:
        assert ckpt.format == "hf-bin"
        assert any("salvaged" in w and "pytorch_model.bin" in w for w in ckpt.warnings), ckpt.warnings
        for entry in ckpt.tensors():
            if not (entry.info.broken or entry.info.storage.broken):
                assert same_values(read_values(entry.info), whole[entry.name]), entry.name
    finally:
        ckpt.close()


@pytest.mark.parametrize("fraction", [0.2, 0.5, 0.99])
def test_a_cut_safetensors_file_says_so_and_lists_its_complete_tensors(tmp_path, fraction):
    torch.manual_seed(0)
    tensors = {f"layers.{i}.weight": torch.randn(32, 32) for i in range(6)}
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    whole = load_file(str(path))
    data = path.read_bytes()
    short = tmp_path / "short.safetensors"
    short.write_bytes(data[:int(len(data) * fraction)])
    ckpt = open_checkpoint(str(short))
    try:
        assert "incomplete download" in ckpt.warnings[0], ckpt.warnings
        assert f"{len(data):,}" in ckpt.warnings[0]  # the size its header describes
        complete = 0
        for entry in ckpt.tensors():
            if entry.info.broken:
                assert "cut off" in entry.info.broken
            else:
                assert same_values(read_values(entry.info), whole[entry.name])
                complete += 1
        assert f"{complete} of 6" in ckpt.warnings[0]
    finally:
        ckpt.close()

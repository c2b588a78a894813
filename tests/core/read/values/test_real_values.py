"""Values as real checkpoints hold them: sparse tensors as one row, tuple keys and torch.Size as Python prints
them, an archive of an unknown format version opened with a warning."""

from __future__ import annotations

import json
import warnings
import zipfile

import pytest
import torch

from ckptview.cli import main
from ckptview.commands.info import info_dict
from ckptview.core import open_checkpoint
from ckptview.core.errors import TensorDataError
from ckptview.core.read.values.reading import read_values
from tests.support.torch_compare import same_values


def sparse_tensors() -> dict[str, torch.Tensor]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        dense = torch.tensor([[0.0, 2.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [3.0, 0.0, 4.0, 0.0]])
        return {"coo": dense.to_sparse(), "csr": dense.to_sparse_csr(), "csc": dense.to_sparse_csc(),
                "bsr": dense.to_sparse_bsr((1, 2)), "half_coo": dense.half().to_sparse().coalesce()}


def test_sparse_tensors_are_one_row(tmp_path) -> None:
    sparse = sparse_tensors()
    torch.save({**sparse, "dense": torch.ones(2)}, tmp_path / "s.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = torch.load(tmp_path / "s.pt", weights_only=True)
    ckpt = open_checkpoint(tmp_path / "s.pt")
    entries = {e.name: e.info for e in ckpt.tensors()}
    assert set(entries) == set(loaded)  # no component rows ("coo.indices", ...)
    for name, t in loaded.items():
        info = entries[name]
        assert info.shape == tuple(t.shape) and info.dtype == str(t.dtype).removeprefix("torch.")
        assert info.layout == str(t.layout).removeprefix("torch.")
        if t.layout != torch.strided:
            assert info.extra["nnz"] == t._nnz()
            with pytest.raises(TensorDataError, match=info.layout):
                read_values(info)
    assert same_values(read_values(entries["dense"]), loaded["dense"])
    rows = {t["name"]: t for t in json.loads(json.dumps(info_dict(ckpt)))["tensors"]}
    for name, t in loaded.items():  # info --json says what the row is: layout and stored values
        if t.layout != torch.strided:
            assert rows[name]["layout"] == str(t.layout).removeprefix("torch.") and rows[name]["nnz"] == t._nnz()
        else:
            assert "layout" not in rows[name]
    ckpt.close()


def test_tuple_keys_and_sizes_print_as_python_does(tmp_path, capsys) -> None:
    obj = {("a", 1): torch.ones(2), "shape": torch.Size([2, 3]), "nested": {(1, (2, "x")): 5}}
    torch.save(obj, tmp_path / "k.pt")
    ckpt = open_checkpoint(tmp_path / "k.pt")
    data = json.loads(json.dumps(info_dict(ckpt)))
    assert data["tensors"][0]["path"] == [repr(("a", 1))]
    values = {v["name"]: v for v in data["values"]}
    assert values["shape"]["repr"] == repr(torch.Size([2, 3]))
    assert values["nested." + repr((1, (2, "x")))]["repr"] == "5"
    ckpt.close()
    assert main(["info", str(tmp_path / "k.pt")]) == 0
    out = capsys.readouterr().out
    assert "('a', 1)" in out and "torch.Size([2, 3])" in out
    assert "<tuple of" not in out and "SizeValue" not in out


def test_unknown_archive_version_opens_with_a_warning(tmp_path) -> None:
    torch.save({"w": torch.arange(6.0)}, tmp_path / "v3.pt")
    with zipfile.ZipFile(tmp_path / "v3.pt") as src, zipfile.ZipFile(tmp_path / "v999.pt", "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("/version"):
                assert data.strip() == b"3"
                data = b"999\n"
            dst.writestr(item, data)
    ckpt = open_checkpoint(tmp_path / "v999.pt")
    assert any("version 999" in w for w in ckpt.warnings), ckpt.warnings
    assert same_values(read_values(ckpt.tensor("w")), torch.arange(6.0))
    ckpt.close()
    plain = open_checkpoint(tmp_path / "v3.pt")
    assert not plain.warnings
    plain.close()

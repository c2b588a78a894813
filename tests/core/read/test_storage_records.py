"""Storage records named as the archive names them, relative to its root (DESIGN's `storage 'data/7' missing`)."""

from __future__ import annotations

import zipfile

import torch

from ckptview.core.read.open import open_checkpoint


def test_a_missing_storage_record_is_named_as_the_archive_names_it(tmp_path) -> None:
    src, dst = tmp_path / "m.pt", tmp_path / "cut.pt"
    torch.save({"a": torch.ones(2), "b": torch.zeros(3)}, src)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if not info.filename.endswith("/data/1"):
                zout.writestr(info, zin.read(info))
    ckpt = open_checkpoint(str(dst))
    try:
        assert ckpt.tensor("b").broken == "storage 'data/1' missing"
        assert ckpt.tensor("a").broken is None
        assert any("storage 'data/1' missing" in w for w in ckpt.warnings)
    finally:
        ckpt.close()

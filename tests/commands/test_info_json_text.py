"""The `info --json` rows formatted directly are the very text the JSON encoder writes for them."""

from __future__ import annotations

import contextlib
import io
import json
import zipfile

import pytest
import torch
from safetensors.torch import save_file

from ckptview.commands.info import _dumps, info_dict, info_items, write_json_stream
from ckptview.core import open_checkpoint
from tests.core.read.test_reader_torch import training_checkpoint


def streamed(ckpt, **kwargs) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        write_json_stream(info_items(ckpt, encoded=True, **kwargs))
    return out.getvalue()


def odd_names() -> dict:
    w = torch.randn(6, 4)
    return {
        "plain.weight": w,
        "view": w[1:3],  # shares a storage, with an offset
        "t": w.t(),  # strided
        "caf\u00e9.\u65e5\u672c": torch.zeros(2, dtype=torch.float16),  # non-ASCII names are escaped
        "ctl\x1b[31m\n\t\"q\"\\": torch.ones(1, dtype=torch.int64),  # control characters, quotes
        "\ud800lone": torch.ones(1),  # a lone surrogate
        "scalar": torch.tensor(3.0),
        "empty": torch.zeros(0, 5, dtype=torch.bfloat16),
        "flags": torch.zeros(3, dtype=torch.bool),
        "layers": [torch.ones(2), {"inner": torch.ones(1, 1, 1), 7: torch.ones(2, dtype=torch.uint8)}],
        5: torch.ones(1),  # an int key
        True: torch.ones(2),  # a bool key: not an int for JSON
        (1, "a"): torch.ones(3),  # a tuple key
        2.5: torch.ones(1),  # a float key
        "sparse": torch.eye(3).to_sparse(),
        "meta_free": torch.nn.Parameter(torch.ones(2)),
    }


@pytest.mark.parametrize("make", [odd_names, training_checkpoint], ids=["odd-names", "training"])
def test_streamed_rows_are_the_encoders_text(tmp_path, make) -> None:
    path = tmp_path / "c.pt"
    torch.save(make(), path)
    ckpt = open_checkpoint(str(path))
    try:
        text = streamed(ckpt)
        assert text == _dumps(info_dict(ckpt)) + "\n"
        rows = json.loads(text)["tensors"]
        assert len(rows) == len(ckpt.tensors()) and rows
    finally:
        ckpt.close()


def test_broken_rows_and_statistics_take_the_encoder(tmp_path) -> None:
    path = tmp_path / "c.pt"
    torch.save({"a": torch.arange(6.0), "b": torch.ones(2, 2)}, path)
    broken = tmp_path / "broken.pt"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(broken, "w") as zout:
        names = zin.namelist()
        storages = sorted(n for n in names if "/data/" in n and not n.endswith(".pkl"))
        for name in names:
            if name != storages[0]:  # one storage record missing: its tensor is broken
                zout.writestr(zin.getinfo(name), zin.read(name))
    for target, stats in ((broken, False), (path, True)):
        ckpt = open_checkpoint(str(target))
        try:
            text = streamed(ckpt, stats=stats)
            assert text == _dumps(info_dict(ckpt, stats=stats)) + "\n"
            rows = json.loads(text)["tensors"]
            assert any("broken" in r for r in rows) if target == broken else all(r["stats"] for r in rows)
        finally:
            ckpt.close()


def test_safetensors_rows(tmp_path) -> None:
    save_file({"a.weight": torch.ones(2, 3), "b": torch.zeros(4, dtype=torch.float16)}, str(tmp_path / "m.safetensors"))
    ckpt = open_checkpoint(str(tmp_path / "m.safetensors"))
    try:
        assert streamed(ckpt) == _dumps(info_dict(ckpt)) + "\n"
    finally:
        ckpt.close()


def test_the_console_listing_ends_at_once_with_every_byte_written(tmp_path) -> None:
    """`python -m ckptview info` ends the process right after the listing (nothing freed one by one):
    a listing far larger than a pipe's buffer still arrives whole, and errors keep their status."""
    import subprocess
    import sys

    path = tmp_path / "many.pt"
    torch.save({f"blocks.{i}.weight": torch.zeros(2, 2) for i in range(5000)}, path)
    for args in (["--json"], []):
        proc = subprocess.run([sys.executable, "-m", "ckptview", "info", str(path), *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        if args:
            data = json.loads(proc.stdout)
            assert len(data["tensors"]) == 5000 and data["tensors"][-1]["name"] == "blocks.4999.weight"
        else:
            assert proc.stdout.rstrip().endswith("cpu") and "blocks.4999.weight" in proc.stdout
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"PK\x03\x04 truncated")
    proc = subprocess.run([sys.executable, "-m", "ckptview", "info", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("ckptview: ") and proc.stderr.count("\n") == 1

"""Whole-checkpoint work on workers against hostile files and hostile neighbours: a header that declares
far more than it stores is cut and read as the local run reads it (never a task per declared byte), and an
export's temporary file swapped for a link to another file in a shared folder is never written through.
(A neighbour who replaces it with a file of their own gets our bytes in their file, as they could anyway.)"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct

import pytest
import torch

from ckptview.cli import main
from ckptview.core.errors import CheckpointError
from ckptview.core.export.plan import plan_export, select_tensors
from ckptview.core.jobs import drain
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.open import open_checkpoint
from ckptview.core.sweep import plan as sweep_plan
from ckptview.core.sweep import writing
from ckptview.core.sweep.runner import Placement, Sweep
from ckptview.core.sweep.writing import export_placed


def _safetensors(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + data)


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("shape", [[1 << 40], [1 << 20, 1 << 20], [0, 1 << 62]])
def test_a_header_declaring_more_than_it_stores_gets_the_local_answer_on_workers(tmp_path, shape, monkeypatch):
    monkeypatch.setattr(sweep_plan, "MIN_TASK_BYTES", 16)  # cut as finely as a large file would be
    path = tmp_path / "liar.safetensors"
    honest = torch.arange(64, dtype=torch.float32).numpy().tobytes()
    _safetensors(path, {"liar": {"dtype": "F32", "shape": shape, "data_offsets": [0, 16]},
                        "ok": {"dtype": "F32", "shape": [60], "data_offsets": [16, 256]}}, honest)
    here = _run(["info", str(path), "--json", "--stats", "--workers", "1"])
    spread = _run(["info", str(path), "--json", "--stats", "--workers", "2"])
    assert spread == here
    assert here[0] in (0, 2) and here[2].count("\n") <= 1


@pytest.fixture()
def plan_and_ckpt(tmp_path, monkeypatch):
    monkeypatch.setattr(Sweep, "fans_out", property(lambda self: True))  # tasks, run here one after another
    src = tmp_path / "m.pt"
    torch.save({"a": torch.randn(100), "b": torch.randn(50)}, src)
    ckpt = open_checkpoint(str(src))
    yield ckpt, str(src)
    ckpt.close()


@pytest.mark.parametrize("swap", ["symbolic link", "hard link"])
def test_an_export_never_writes_through_a_file_swapped_into_its_place(tmp_path, plan_and_ckpt, monkeypatch, swap):
    ckpt, src = plan_and_ckpt
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"precious" * 100)
    out = tmp_path / "out"
    out.mkdir()
    plan = plan_export(select_tensors(ckpt), str(out / "x.safetensors"))
    real_tasks = writing._tasks

    def swapped(ckpt_, path, remote, plan_, places, slots, chunk):
        temp = places[0].path
        os.unlink(temp)  # a neighbour sharing the folder puts something else where the temporary file was
        if swap == "symbolic link":
            os.symlink(victim, temp)
        else:
            os.link(victim, temp)
        return real_tasks(ckpt_, path, remote, plan_, places, slots, chunk)

    monkeypatch.setattr(writing, "_tasks", swapped)
    with pytest.raises(CheckpointError, match="not the temporary file the export made"):
        drain(export_placed(ckpt, src, RemoteOptions(), plan, Placement(workers=2)))
    assert victim.read_bytes() == b"precious" * 100
    assert os.listdir(out) == []  # no final file, no temporary file left

"""A checkpoint that changes on disk after it was opened: no read may fault, every read says so.

Training loops `torch.save` over the path they saved last time (the same inode, truncated and
rewritten) or save elsewhere and rename over it. With a memory-mapped file, a page past the new end
killed the process with SIGBUS, so every case runs in a subprocess: a fault is a dead child (exit -7),
never a dead pytest. The child opens the checkpoint, reads values once (so any map or descriptor
exists), changes the file, then reads again through the core and through the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch

from ckptview.core.errors import FileChangedError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.cli_failure import failure_stdout

MUTATIONS = ("truncate", "rewrite", "rename", "grow", "delete")

# Runs in the child: argv = format, mutation, original path, replacement bytes path, work folder.
CHILD = r"""
import contextlib, io, json, os, shutil, sys
from ckptview import cli
from ckptview.core.errors import FileChangedError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.figures.stats import tensor_stats
from ckptview.core.read.values.reading import iter_chunks, read_values

fmt, mutation, original, replacement, work = sys.argv[1:6]
is_dir = os.path.isdir(original)
report = {}

def fresh(tag):
    dst = os.path.join(work, tag + ("" if is_dir else os.path.splitext(original)[1]))
    if is_dir:
        shutil.copytree(original, dst)
    else:
        shutil.copyfile(original, dst)
    return dst

def victim(path):
    # The file to change: the checkpoint itself, or the largest data file of a folder.
    if not is_dir:
        return path
    files = [os.path.join(path, n) for n in os.listdir(path) if not n.startswith(".")]
    return max(files, key=os.path.getsize)

def mutate(path):
    target = victim(path)
    new = open(replacement, "rb").read()
    if mutation == "truncate":
        os.truncate(target, os.path.getsize(target) // 3)
    elif mutation == "rewrite":  # what torch.save does to an existing path: same inode, O_TRUNC, write
        with open(target, "r+b") as fh:
            fh.truncate(0)
            fh.write(new[: max(1, len(new) // 2)])
    elif mutation == "rename":
        tmp = target + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(new)
        os.replace(tmp, target)
    elif mutation == "grow":
        with open(target, "ab") as fh:
            fh.write(b"\0" * 4096)
    elif mutation == "delete":
        os.unlink(target)

def biggest(ckpt):
    return max(ckpt.tensors(), key=lambda e: e.info.nbytes).info

def core(op):
    path = fresh("core_" + op)
    ckpt = open_checkpoint(path)
    info = biggest(ckpt)
    read_values(info)  # maps/opens the file before it changes
    mutate(path)
    changed = getattr(ckpt, "changed_on_disk", lambda: None)()  # (absent before this fix)
    try:
        if op == "read_values":
            read_values(info)
        elif op == "iter_chunks":
            for _ in iter_chunks(info, 1 << 10):
                pass
        elif op == "stats":
            tensor_stats(info, chunk_elems=1 << 10)
        outcome = "no error"
    except FileChangedError as exc:
        outcome = "FileChangedError: " + str(exc)
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    return {"outcome": outcome, "changed_on_disk": changed}

def command(argv, module, path, other=None):
    # The command opens the file itself (every command through commands/opening.py): change it right after
    # that open (and one read).
    import importlib
    mod = importlib.import_module("ckptview.commands.opening")
    real = mod.open_checkpoint
    def opened_then_changed(p, ctx=None):
        ckpt = real(p, ctx)
        if os.path.abspath(p) == os.path.abspath(path):
            read_values(biggest(ckpt))
            mutate(path)
        return ckpt
    mod.open_checkpoint = opened_then_changed
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    mod.open_checkpoint = real
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}

for op in ("read_values", "iter_chunks", "stats"):
    report[op] = core(op)
path = fresh("info")
report["info"] = command(["info", path, "--json", "--stats"], "info", path)
path = fresh("export")
out = os.path.join(work, "export_out")
report["export"] = command(["export", path, "--out", out + "/"], "export", path)
report["export"]["left"] = sorted(os.listdir(out)) if os.path.isdir(out) else []
report["export"]["left_in_work"] = sorted(n for n in os.listdir(work) if n.endswith(".part"))
path, other = fresh("diff_a"), fresh("diff_b")
report["diff"] = command(["diff", path, other, "--json"], "diff", path)
print(json.dumps(report))
"""


def _state(seed: int, n: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"big.weight": torch.randn(n, 64, generator=gen), "small.bias": torch.randn(8, generator=gen)}


def _make(fmt: str, folder, seed: int, n: int) -> str:
    state = _state(seed, n)
    if fmt == "torch-zip":
        path = folder / "model.pt"
        torch.save(state, path)
    elif fmt == "torch-legacy":
        path = folder / "legacy.pt"
        torch.save(state, path, _use_new_zipfile_serialization=False)
    elif fmt == "safetensors":
        from safetensors.torch import save_file

        path = folder / "model.safetensors"
        save_file(state, str(path))
    else:
        import torch.distributed.checkpoint as dcp

        path = folder / "dcp"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(state, checkpoint_id=str(path))
    return str(path)


@pytest.fixture(scope="module", params=["torch-zip", "torch-legacy", "safetensors", "dcp"])
def files(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    original = _make(request.param, folder, seed=1, n=4096)  # 1 MiB of float32
    (folder / "again").mkdir()
    again = _make(request.param, folder / "again", seed=2, n=2048)
    replacement = again if not os.path.isdir(again) else max(
        (os.path.join(again, n) for n in os.listdir(again)), key=os.path.getsize)
    return request.param, original, replacement


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_changed_file_is_one_clear_error_never_a_fault(files, mutation, tmp_path):
    fmt, original, replacement = files
    proc = subprocess.run([sys.executable, "-c", CHILD, fmt, mutation, original, replacement, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"child died ({proc.returncode}): {proc.stderr[-3000:]}"
    report = json.loads(proc.stdout)
    for op in ("read_values", "iter_chunks", "stats"):
        got = report[op]
        assert got["outcome"].startswith("FileChangedError: the file changed on disk"), (op, got)
        assert got["changed_on_disk"], (op, got)
    for op in ("info", "export", "diff"):
        got = report[op]
        assert got["rc"] == 2, (op, got)
        lines = got["stderr"].strip().splitlines()
        assert len(lines) == 1 and "changed on disk" in lines[0], (op, got["stderr"])
        assert "Traceback" not in got["stderr"]
    assert failure_stdout(report["info"]["stdout"])  # --json: whole or absent, the failure's object alone
    assert failure_stdout(report["diff"]["stdout"])
    assert json.loads(report["info"]["stdout"])["error"]["kind"] == "changed"
    assert report["export"]["left"] == [] and report["export"]["left_in_work"] == []


def test_unchanged_file_reads_and_reports_nothing(tmp_path):
    path = _make("torch-zip", tmp_path, seed=3, n=64)
    ckpt = open_checkpoint(path)
    assert ckpt.changed_on_disk() is None
    loaded = torch.load(path, weights_only=True)
    for entry in ckpt.tensors():
        assert (read_values(entry.info) == loaded[entry.name].numpy()).all()
    os.utime(path, ns=(1, 1))  # only the modification time: still a change (a rewrite of equal size)
    assert "modification time" in ckpt.changed_on_disk()
    with pytest.raises(FileChangedError, match="changed on disk"):
        read_values(ckpt.tensors()[0].info)


def test_folder_checkpoint_reports_which_file_changed(tmp_path):
    folder = _make("dcp", tmp_path, seed=4, n=64)
    ckpt = open_checkpoint(folder)
    assert ckpt.changed_on_disk() is None
    data = max((os.path.join(folder, n) for n in os.listdir(folder)), key=os.path.getsize)
    shutil.copyfile(data, data + ".new")
    os.replace(data + ".new", data)
    assert os.path.basename(data) in ckpt.changed_on_disk()


def test_dcp_file_replaced_before_its_first_read_is_refused(tmp_path):
    """A .distcp file is opened on first read: it must still be the file the checkpoint was opened with."""
    folder = _make("dcp", tmp_path, seed=5, n=64)
    ckpt = open_checkpoint(folder)  # nothing read yet: no .distcp file is open
    data = max((os.path.join(folder, n) for n in os.listdir(folder)), key=os.path.getsize)
    shutil.copyfile(data, data + ".new")
    os.replace(data + ".new", data)
    with pytest.raises(FileChangedError, match="replaced by another file"):
        read_values(ckpt.tensor("big.weight"))


def test_unrelated_files_in_a_folder_are_not_a_change(tmp_path):
    folder = _make("dcp", tmp_path, seed=6, n=64)
    ckpt = open_checkpoint(folder)
    with open(os.path.join(folder, "README.md"), "w") as fh:
        fh.write("notes")
    assert ckpt.changed_on_disk() is None
    np_values = read_values(ckpt.tensor("small.bias"))
    assert np_values.shape == (8,)

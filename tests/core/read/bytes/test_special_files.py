"""Only regular files and folders are opened: FIFOs, sockets, devices and /proc files get one line at once.

Anything that could block (a FIFO opened without O_NONBLOCK blocks until a writer appears) runs in a
subprocess with a timeout far above normal, so a regression is a failed test, not a hung suite.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import tempfile

import pytest
import torch

from ckptview import cli
from ckptview.core.errors import CheckpointError, NotACheckpointError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.cli_failure import failure_stdout

needs_posix = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX special files")


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckptview", *argv], capture_output=True, text=True, timeout=120)


def _one_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "internal error" not in lines[0] and "Traceback" not in proc.stderr
    return lines[0]


@needs_posix
def test_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "model.pt"
    os.mkfifo(fifo)
    with pytest.raises(NotACheckpointError, match="FIFO"):
        open_checkpoint(fifo)
    proc = _cli("info", str(fifo), "--json")
    _one_line(proc, "FIFO", str(fifo))
    assert failure_stdout(proc.stdout)


@needs_posix
def test_fifo_inside_a_folder_never_blocks(tmp_path):
    """An HF index that is a FIFO: the folder reader must not block on it either."""
    from safetensors.torch import save_file

    save_file({"w": torch.ones(3)}, str(tmp_path / "model-00001-of-00001.safetensors"))
    os.mkfifo(tmp_path / "model.safetensors.index.json")
    proc = _cli("info", str(tmp_path), "--json")
    assert proc.returncode == 2, proc.stderr
    _one_line(proc, "FIFO")
    assert failure_stdout(proc.stdout)


@needs_posix
def test_socket_is_refused(tmp_path):
    folder = tempfile.mkdtemp(prefix="ckv")  # a socket path must be short (108 bytes)
    path = os.path.join(folder, "s.pt")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        with pytest.raises(NotACheckpointError, match="a socket"):
            open_checkpoint(path)
    finally:
        sock.close()
        os.unlink(path)
        os.rmdir(folder)


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_character_device_is_refused():
    with pytest.raises(NotACheckpointError, match="character device"):
        open_checkpoint("/dev/null")
    _one_line(_cli("info", "/dev/zero"), "character device")


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux /proc")
@pytest.mark.parametrize("name", ["maps", "mem", "status"])
def test_proc_pseudo_files_are_named(name):
    path = f"/proc/self/{name}"
    with pytest.raises(NotACheckpointError, match="pseudo-file"):
        open_checkpoint(path)
    proc = _cli("info", path, "--json")
    _one_line(proc, "pseudo-file", path)
    assert failure_stdout(proc.stdout)


def test_io_error_is_one_line_naming_file_and_error(tmp_path, monkeypatch, capsys):
    path = tmp_path / "model.pt"
    torch.save({"w": torch.arange(1000.0)}, path)
    ckpt = open_checkpoint(path)

    def eio(*_args, **_kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "preadv", eio, raising=False)
    monkeypatch.setattr(os, "pread", eio)
    with pytest.raises(CheckpointError, match=r"cannot read .*model\.pt: Input/output error \(EIO\)"):
        read_values(ckpt.tensor("w"))
    rc = cli.main(["info", str(path), "--json", "--stats"])
    out, err = capsys.readouterr()
    assert rc == 2 and failure_stdout(out)  # JSON whole or absent: the failure's object alone
    assert err.count("\n") == 1 and "EIO" in err and "model.pt" in err and "internal error" not in err


def test_info_json_is_whole_or_absent(tmp_path, monkeypatch, capsys):
    """A failure after some tensors were listed leaves stdout empty, not half a JSON document."""
    path = tmp_path / "model.pt"
    torch.save({f"t{i}": torch.full((10,), float(i)) for i in range(50)}, path)
    from ckptview.commands import info

    calls = {"n": 0}
    real = info.tensor_stats  # the statistics `info --stats` computes, as the command looks them up

    def fail_late(tensor, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 40:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(info, "tensor_stats", fail_late)
    rc = cli.main(["info", str(path), "--json", "--stats"])
    out, err = capsys.readouterr()
    assert rc == 2 and failure_stdout(out) and "Input/output error" in err
    monkeypatch.setattr(info, "tensor_stats", real)
    assert cli.main(["info", str(path), "--json", "--stats"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["tensors"]) == 50 and doc["tensors"][7]["stats"]["mean"] == 7.0

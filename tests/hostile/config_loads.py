"""Helpers of the config-load tests (not a test module): folders whose config.json names files, and a trace of
what a command opens (strace when the machine has it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


class Exec:
    """Pickles as ``exec(code)``: a weights file that runs code when torch.load(weights_only=False) reads it."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self) -> tuple:
        return exec, (self.code,)


def outside_files(folder: Path) -> tuple[Path, Path, Path]:
    """(a folder outside the checkpoint's, a pickle in it that creates `marker` if it ever runs, marker)."""
    import torch

    outside = folder / "outside"
    outside.mkdir(exist_ok=True)
    marker = outside / "RAN"
    payload = outside / "weights.pth"
    torch.save({"w": torch.zeros(2), "hook": Exec(f"open({str(marker)!r}, 'w').close()")}, payload)
    (outside / "config.json").write_text(json.dumps({"architecture": "resnet10t", "num_classes": 3}))
    return outside, payload, marker


def edit_config(source: str | Path, target: Path, change) -> Path:
    """A copy of the model folder `source` at `target`, its config.json changed by `change(config)`."""
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    change(config)
    (target / "config.json").write_text(json.dumps(config))
    return target


def traced(argv: list[str], watch: Path, timeout: float = 600, with_stdout: bool = False) -> tuple:
    """Run `python -m ckptview ARGV` (this worktree's ckptview) and return (status, stderr, the paths under
    `watch` that it or any child opened[, stdout]); the paths are None where strace is missing or not allowed."""
    env = {**os.environ, "PYTHONPATH": SRC, "QT_QPA_PLATFORM": "offscreen"}
    log = watch.parent / f"strace-{os.getpid()}-{len(os.listdir(watch.parent))}.log"
    strace = shutil.which("strace")
    command = [sys.executable, "-m", "ckptview", *argv]
    if strace:
        probe = subprocess.run([strace, "-f", "-qq", "-o", os.devnull, "true"], capture_output=True)
        if probe.returncode != 0:
            strace = None
    if strace:
        command = [strace, "-f", "-qq", "-s", "4096", "-e", "trace=open,openat,openat2,execve,stat,newfstatat,statx",
                   "-o", str(log), *command]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)
    opened: list[str] | None = None
    if strace:
        text = log.read_text(errors="replace")
        log.unlink()
        needle = str(watch)
        opened = sorted({line for line in text.splitlines() if needle in line
                         and ("open" in line.split("(")[0] or "execve" in line.split("(")[0])})
    if with_stdout:
        return proc.returncode, proc.stderr, opened, proc.stdout
    return proc.returncode, proc.stderr, opened

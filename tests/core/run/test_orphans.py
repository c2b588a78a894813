"""Children die with their parent, and their scratch folders go with them (issue 43, finding 11).

Before: after the parent was killed (a crash, the OOM killer, a closed terminal), the worker kept running (1.4 GB
and growing in one case) and its `ckptview-run-*` folder stayed behind. Here a parent process starts each kind of
child (a forward pass's worker, the Hub parameter-order child, the device probe) through ckptview's own code, is
killed with SIGKILL, and the child must end by itself, its folder removed. Each child is held in its work by a
helper process that keeps its stdin open (so no end-of-file on stdin can be what ends it): only its lifeline
(the pipe, the parent-death signal) can. Waiting polls for the process; no sleep is an assertion.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ckptview.core.run.child import scratch_folder, sweep_stale

SRC = str(Path(__file__).resolve().parents[3] / "src")
WAIT_S = 300.0  # the bound on waiting for a child to end: far above the seconds it takes, never asserted on

PARENT = textwrap.dedent('''
    import os, subprocess, sys
    kind, arg = sys.argv[1], sys.argv[2]
    real = subprocess.Popen

    class Held(real):
        """Every ckptview child, with a helper holding its stdin open: it blocks reading its request."""

        def __init__(self, args, *rest, **kwargs):
            super().__init__(args, *rest, **kwargs)
            if self.stdin is not None and any("ckptview.core.worker" in str(a) for a in args):
                holder = real(["sleep", "3600"], pass_fds=[self.stdin.fileno()], start_new_session=True)
                print(json.dumps({"child": self.pid, "holder": holder.pid}), flush=True)

    import json
    subprocess.Popen = Held
    if kind == "run":
        from ckptview.core.run.request import RunRequest, run
        run(RunRequest(path=arg, runs=1, warmup=0))
    elif kind == "probe":
        from ckptview.core.run.request import probe_devices
        probe_devices(timeout=3600)
    else:
        from ckptview.core.inspect.hf_order import parameter_order
        parameter_order(arg)
    print("the child ended while its parent lived", flush=True)
''')


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, ended but not reaped by whoever adopted it, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


def _scratch(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(("ckptview-run-", "ckptview-hf-")))


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + WAIT_S
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory) -> str:
    transformers = pytest.importorskip("transformers")
    import warnings

    config = transformers.BertConfig(vocab_size=60, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, max_position_embeddings=16)
    folder = tmp_path_factory.mktemp("bert") / "bert"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.BertForMaskedLM(config).save_pretrained(folder)
    return str(folder)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the helper holds a descriptor by pass_fds")
@pytest.mark.parametrize("kind", ["run", "order", "probe"])
def test_a_child_dies_with_its_killed_parent_and_takes_its_folder(tmp_path, kind, request):
    from ckptview.core.run.example import example_path

    arg = {"run": example_path(), "probe": "", "order": ""}[kind]
    if kind == "order":
        arg = request.getfixturevalue("bert_folder")
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {**os.environ, "PYTHONPATH": SRC, "TMPDIR": str(temp)}
    parent = subprocess.Popen([sys.executable, str(script), kind, arg], stdout=subprocess.PIPE, text=True, env=env)
    holder = child = 0
    try:
        line = parent.stdout.readline()  # the child has started (and blocks reading its request)
        assert line, f"the parent ended with status {parent.wait()} before starting a child"
        started = json.loads(line)
        child, holder = started["child"], started["holder"]
        assert _alive(child) and _scratch(temp), _scratch(temp)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _wait_gone(child), f"the {kind} child outlived its killed parent"
        assert _scratch(temp) == []
    finally:
        for pid in (holder, child):
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
        parent.stdout.close()
        parent.wait()


def test_a_folder_left_by_a_dead_process_is_swept_and_a_live_one_kept(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid names a process that no longer exists
    stale = tmp_path / f"ckptview-run-{gone.pid}-abc"
    stale_hf = tmp_path / f"ckptview-hf-{gone.pid}-def"
    live = tmp_path / f"ckptview-run-{os.getppid()}-ghi"  # this test's parent (pytest's runner, or a shell)
    mine = tmp_path / f"ckptview-run-{os.getpid()}-jkl"
    other = tmp_path / f"ckptview-export-{gone.pid}-mno"  # not a child's scratch folder: never touched
    for folder in (stale, stale_hf, live, mine, other):
        folder.mkdir()
        (folder / "copy.bin").write_bytes(b"x")
    removed = sweep_stale(str(tmp_path), force=True)
    assert sorted(removed) == sorted([str(stale), str(stale_hf)])
    assert live.exists() and mine.exists() and other.exists() and not stale.exists()


def test_a_scratch_folder_is_named_for_its_process(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = scratch_folder("run")
    assert os.path.basename(folder).startswith(f"ckptview-run-{os.getpid()}-")
    assert os.stat(folder).st_mode & 0o777 == 0o700
    os.rmdir(folder)

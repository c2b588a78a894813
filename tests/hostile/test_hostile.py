"""Hostile files: no payload runs, every dangerous global is reported, the honest parts still open."""

from __future__ import annotations

import builtins
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ckptview import cli
from ckptview.commands.info import info_dict
from ckptview.core.errors import CheckpointError, TensorDataError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_values
from tests.support import corpus
from tests.support.cli_failure import failure_stdout


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> list[corpus.Case]:
    return corpus.shared("hostile", tmp_path_factory)


def _by_name(cases: list[corpus.Case], name: str) -> corpus.Case:
    return next(c for c in cases if c.name == name)


def _read_all(ckpt) -> dict[str, np.ndarray]:
    out = {}
    for entry in ckpt.tensors():
        if entry.info.broken:
            with pytest.raises(TensorDataError):
                read_values(entry.info)
            continue
        values = read_values(entry.info)
        streamed = np.concatenate([c for c in iter_chunks(entry.info, 5)] or [np.empty(0, values.dtype)])
        np.testing.assert_array_equal(streamed, values.reshape(-1))
        out[entry.name] = values
    return out


def test_corpus_covers_the_issue(hostile):
    names = {c.name for c in hostile}
    expected = {"os_system", "posix_system", "subprocess_Popen", "subprocess_run", "subprocess_check_output",
                "builtins_exec", "builtins_eval", "builtins_getattr", "builtins_import", "builtins_compile",
                "builtins_open", "importlib", "runpy", "pickle_loads", "_pickle_loads", "deep_state_dict",
                "inst_p0", "obj_p1", "memo_get", "memo_overwrite", "torchscript", "legacy", "two_data_pkl",
                "dotdot_names", "polyglot", "numpy_object_array"}
    assert expected <= names


def test_no_payload_runs_and_every_global_is_reported(hostile):
    failures = []
    for case in hostile:
        try:
            ckpt = open_checkpoint(case.path)
        except CheckpointError as exc:
            if case.error is None:
                failures.append(f"{case.name}: unexpected error {exc}")
            elif not any(s.lower() in str(exc).lower() for s in case.error):
                failures.append(f"{case.name}: error {exc!r} does not mention {case.error}")
        else:
            try:
                if case.error is not None:
                    failures.append(f"{case.name}: opened, expected an error about {case.error}")
                missing = [g for g in case.unsafe if g not in ckpt.unsafe_globals]
                if missing:
                    failures.append(f"{case.name}: {missing} not in unsafe_globals {ckpt.unsafe_globals}")
                if case.unsafe and not any("nothing was run" in w for w in ckpt.warnings):
                    failures.append(f"{case.name}: no warning says the globals were not run")
                if case.fmt and ckpt.format != case.fmt:
                    failures.append(f"{case.name}: opened as {ckpt.format}, expected {case.fmt}")
                if case.warning and not any(case.warning in w for w in ckpt.warnings):
                    failures.append(f"{case.name}: no warning mentions {case.warning!r}: {ckpt.warnings}")
                broken = sorted(e.name for e in ckpt.tensors() if e.info.broken)
                if broken != sorted(case.broken):
                    failures.append(f"{case.name}: broken {broken}, expected {sorted(case.broken)}")
                values = _read_all(ckpt)
                for name, expected in case.good.items():
                    if name not in values or not np.array_equal(values[name], expected):
                        failures.append(f"{case.name}: tensor {name} does not read its saved values")
            finally:
                ckpt.close()
        if case.marker is not None and case.marker.exists():
            failures.append(f"{case.name}: THE PAYLOAD RAN")
    assert not failures, "\n".join(failures)


def test_nothing_outside_the_corpus_is_read_or_written(hostile):
    case = _by_name(hostile, "dotdot_names")
    ckpt = open_checkpoint(case.path)
    outside = ckpt.tensor("outside")
    # The storage key names a real file next to the corpus: it is only ever looked up inside the zip.
    assert "missing" in outside.broken
    assert not (case.path.parent.parent / "dotdot_written.txt").exists()
    assert not Path("/tmp/ckptview_abs_written.txt").exists()
    ckpt.close()


def test_torch_refuses_them_too(hostile):
    """The corpus is really hostile: torch's own weights-only loader rejects the torch-format files."""
    torch = pytest.importorskip("torch")
    for name in ("deep_state_dict", "zip_spliced", "legacy", "numpy_object_array"):
        case = _by_name(hostile, name)
        with pytest.raises(Exception, match="(?i)weights.only|unsupported global|not allowed"):
            torch.load(case.path, weights_only=True)
        assert not case.marker.exists()


CONTROL = """
import pickle, sys
for arg in sys.argv[1:]:
    kind, path = arg.split("=", 1)
    try:
        if kind == "pickle":
            pickle.loads(open(path, "rb").read())
        else:
            import torch
            torch.load(path, weights_only=False)
    except Exception:
        pass  # the payload has run by then; what it returned does not unpickle into anything useful
"""


@pytest.mark.slow
def test_control_the_payloads_are_live(tmp_path):
    """Without ckptview the same files DO run their payload: a fresh corpus, loaded the unsafe way."""
    cases = corpus.make_hostile(tmp_path / "live")
    script = tmp_path / "control.py"
    script.write_text(CONTROL)
    live = {"os_system": "pickle", "subprocess_Popen": "pickle", "builtins_exec": "pickle",
            "builtins_getattr": "pickle", "builtins_open": "pickle", "runpy": "pickle", "pickle_loads": "pickle",
            "inst_p0": "pickle", "obj_p1": "pickle", "memo_get": "pickle", "memo_overwrite": "pickle",
            "memo_stack_global": "pickle", "importlib": "pickle", "builtins_compile": "pickle",
            "deep_state_dict": "torch", "legacy": "torch"}
    args = [f"{kind}={_by_name(cases, name).path}" for name, kind in live.items()]
    subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, timeout=120, capture_output=True,
                   check=False)
    deadline = time.monotonic() + 120  # Popen does not wait for its child (a busy machine starts it late)
    missing = list(live)
    while missing and time.monotonic() < deadline:
        missing = [n for n in missing if not _by_name(cases, n).marker.exists()]
        time.sleep(0.05)
    assert not missing, f"control: {missing} did not run under pickle/torch.load"


def test_cli_reports_unsafe_globals_in_process(hostile, capsys):
    for case in hostile:
        status = cli.main(["info", "--json", str(case.path)])
        out, err = capsys.readouterr()
        if case.error is not None:
            assert status != 0 and failure_stdout(out)
            assert err.count("\n") == 1 and err.startswith("ckptview: ") and "Traceback" not in err, err
            continue
        assert status == 0, (case.name, err)
        data = json.loads(out)
        assert set(case.unsafe) <= set(data["unsafe_globals"]), case.name
        assert set(data["unsafe_globals"]) <= set(data["globals"])
        assert not (case.marker and case.marker.exists())


@pytest.mark.parametrize("name", ["os_system", "builtins_getattr", "deep_state_dict", "torchscript", "legacy",
                                  "numpy_object_array", "polyglot"])
def test_cli_subprocess(hostile, name):
    case = _by_name(hostile, name)
    proc = subprocess.run([sys.executable, "-m", "ckptview", "info", "--json", str(case.path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(case.unsafe) <= set(data["unsafe_globals"])
    assert not case.marker.exists()
    human = subprocess.run([sys.executable, "-m", "ckptview", "info", str(case.path)],
                           capture_output=True, text=True, timeout=120)
    assert "UNSAFE GLOBALS (referenced, not run)" in human.stdout
    assert not case.marker.exists()


def test_cli_subprocess_refuses_ambiguous_zip(hostile):
    case = _by_name(hostile, "two_data_pkl")
    proc = subprocess.run([sys.executable, "-m", "ckptview", "info", "--json", str(case.path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and failure_stdout(proc.stdout)
    assert proc.stderr.count("\n") == 1 and "ambiguous" in proc.stderr
    assert not case.marker.exists()


# -- read-only ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def references(tmp_path_factory) -> dict[str, Path]:
    return corpus.shared("reference", tmp_path_factory)


def test_files_are_opened_read_only_and_never_changed(references, tmp_path, monkeypatch):
    copies = {}
    for fmt, path in references.items():
        copy = tmp_path / path.name
        shutil.copy(path, copy)
        os.chmod(copy, 0o444)
        copies[fmt] = copy
    before = {p: (os.stat(p).st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) for p in copies.values()}
    modes: list[tuple[str, str]] = []
    flags: list[tuple[str, int]] = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, mode="r", *args, **kwargs):
        modes.append((os.fspath(file) if isinstance(file, (str, os.PathLike)) else repr(file), mode))
        return real_open(file, mode, *args, **kwargs)

    def spy_os_open(path, flag, *args, **kwargs):
        flags.append((os.fspath(path), flag))
        return real_os_open(path, flag, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    for fmt, path in copies.items():
        ckpt = open_checkpoint(path)
        assert ckpt.format == fmt
        json.dumps(info_dict(ckpt), default=str)
        for entry in ckpt.tensors():
            read_values(entry.info)
            list(iter_chunks(entry.info, 3))
        ckpt.close()
    monkeypatch.undo()
    ours = {str(p) for p in copies.values()}
    used = [(p, m) for p, m in modes if p in ours]
    assert used or any(p in ours for p, _f in flags), "the spy saw no opens"  # files are read via os.open
    assert all(set(m) <= {"r", "b"} for _p, m in used), used
    assert all(f & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC | os.O_CREAT) == 0
               for p, f in flags if p in ours), flags
    after = {p: (os.stat(p).st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) for p in copies.values()}
    assert after == before

"""Malformed files: a one-line error naming the problem, fast and in bounded memory, or the file opens
with its broken parts marked and the fine parts readable."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from ckptview import cli
from ckptview.core.errors import CheckpointError, TensorDataError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_values
from tests.support import corpus
from tests.support.cli_failure import failure_stdout

# Work bound per file, in CPU seconds of this process (not wall time: a busy CI machine does not move it).
# Every file opens in well under half a second; a file that made the reader loop or re-expand data would
# take minutes. Timings live in benchmarks/fuzz.py.
CPU_SECONDS = 30.0


@pytest.fixture(scope="module")
def malformed(tmp_path_factory) -> list[corpus.Case]:
    return corpus.shared("malformed", tmp_path_factory)


def _by_name(cases: list[corpus.Case], name: str) -> corpus.Case:
    return next(c for c in cases if c.name == name)


def _check_opened(case: corpus.Case, ckpt) -> list[str]:
    problems = []
    broken = sorted(e.name for e in ckpt.tensors() if e.info.broken)
    if case.error_or_broken:
        if not broken:
            problems.append("a truncated file opened without any broken tensor")
    elif case.salvaged:
        if any("cut off" not in (e.info.broken or "") for e in ckpt.tensors() if e.info.broken):
            problems.append("a salvaged file has tensors broken by something else than the cut")
    elif broken != sorted(case.broken):
        problems.append(f"broken {broken}, expected {sorted(case.broken)}")
    for entry in ckpt.tensors():
        if entry.info.broken:
            if not any(entry.name in w and entry.info.broken in w for w in ckpt.warnings):
                problems.append(f"no warning names broken tensor {entry.name}")
            try:
                read_values(entry.info)
                problems.append(f"broken tensor {entry.name} read values")
            except TensorDataError as exc:
                if "\n" in str(exc):
                    problems.append(f"multi-line error {exc!r}")
            continue
        if entry.info.nbytes > 64 << 20:
            continue  # the 1 GiB compressed tensor: streamed in the memory test
        values = read_values(entry.info)
        chunks = list(iter_chunks(entry.info, 3))
        if chunks and not np.array_equal(np.concatenate(chunks), values.reshape(-1)):
            problems.append(f"iter_chunks and read_values differ for {entry.name}")
        if entry.name in case.good and not np.array_equal(values, case.good[entry.name]):
            problems.append(f"tensor {entry.name} reads {values}, expected {case.good[entry.name]}")
    missing = set(case.good) - {e.name for e in ckpt.tensors()}
    if missing:
        problems.append(f"fine tensors {sorted(missing)} are absent")
    if case.warning and not any(case.warning in w for w in ckpt.warnings):
        problems.append(f"no warning mentions {case.warning!r}: {ckpt.warnings}")
    if case.value and not any(case.value in repr(n.value) for n in ckpt.values()):
        problems.append(f"no value mentions {case.value!r}")
    return problems


def test_corpus_covers_the_issue(malformed):
    names = {c.name for c in malformed}
    for expected in ("empty.pth", "random.pth", "text.pth", "page.pth", "image.pth", "lfs_pointer.pth",
                     "zip_cut_50.pth", "crc_data_pkl.pth", "no_data_pkl.pth", "view_missing_storage.pth",
                     "invalid_pickle.pkl", "truncated_pickle.pkl", "underflow_pickle.pkl",
                     "view_negative_shape.pth", "view_overflow_shape.pth", "view_negative_stride.pth",
                     "view_offset_beyond.pth", "view_elements_1e15.pth", "deep_100k.pkl", "zip_bomb_storage.pth",
                     "st_huge_header.safetensors", "st_invalid_json.safetensors", "st_overlap.safetensors",
                     "st_out_of_range.safetensors", "gguf_tensor_count_4e18.gguf", "gguf_array_1e9.gguf",
                     "gguf_nested_arrays_100k.gguf", "gguf_huge_dims.gguf", "gguf_offset_past_end.gguf",
                     "gguf_overlap.gguf", "gguf_unknown_type.gguf", "gguf_key_length_1e18.gguf"):
        assert expected in names


def test_each_file_errors_clearly_or_opens_with_its_broken_parts(malformed):
    failures = []
    for case in malformed:
        start = time.process_time()
        try:
            ckpt = open_checkpoint(case.path)
        except CheckpointError as exc:
            message = str(exc)
            if case.error is None:
                failures.append(f"{case.name}: should open, got {message}")
            elif not any(s.lower() in message.lower() for s in case.error):
                failures.append(f"{case.name}: {message!r} does not mention any of {case.error}")
            if "\n" in message or not message:
                failures.append(f"{case.name}: not a one-line message: {message!r}")
        else:
            try:
                if case.error is not None and not case.error_or_broken and not case.salvaged:
                    failures.append(f"{case.name}: opened, expected an error about {case.error}")
                failures += [f"{case.name}: {p}" for p in _check_opened(case, ckpt)]
            finally:
                ckpt.close()
        spent = time.process_time() - start
        if spent > CPU_SECONDS:
            failures.append(f"{case.name}: took {spent:.1f} CPU seconds")
    assert not failures, "\n".join(failures)


def test_cli_prints_one_line_and_fails(malformed, capsys):
    for case in malformed:
        status = cli.main(["info", "--json", str(case.path)])
        out, err = capsys.readouterr()
        if status == 0:
            assert case.error is None or case.error_or_broken or case.salvaged, case.name
            json.loads(out)
            continue
        assert case.error is not None, (case.name, err)
        assert failure_stdout(out) and err.count("\n") == 1 and err.startswith("ckptview: "), (case.name, err)
        assert "Traceback" not in err


@pytest.mark.parametrize("name", ["empty.pth", "random.pth", "zip_cut_05.pth", "underflow_pickle.pkl",
                                  "st_huge_header.safetensors", "zip_bomb_data_pkl.pth"])
def test_cli_subprocess_one_line(malformed, name):
    case = _by_name(malformed, name)
    proc = subprocess.run([sys.executable, "-m", "ckptview", "info", str(case.path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("ckptview: "), proc.stderr
    assert any(s.lower() in proc.stderr.lower() for s in case.error)


def test_cli_subprocess_deep_nesting_serialises(malformed):
    for name in ("deep_100k.pkl", "deep_wide_100k.pkl"):
        case = _by_name(malformed, name)
        proc = subprocess.run([sys.executable, "-m", "ckptview", "info", "--json", str(case.path)],
                              capture_output=True, text=True, timeout=120)  # a hang, not a timing
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        assert any("deeper than" in v["repr"] for v in data["values"])


def test_deep_nesting_cut_keeps_shallow_content(tmp_path):
    # 1,500 nested dicts with a tensor-free leaf at every level: the first 1000 levels stay browsable.
    n = 1500
    level = b"}" + b"X\x01\x00\x00\x00v" + b"K\x07" + b"s" + b"X\x01\x00\x00\x00d"  # {'v': 7}, then key 'd'
    data = b"\x80\x02" + level * n + b"N" + b"s" * n + b"."
    path = tmp_path / "nested.pkl"
    path.write_bytes(data)
    ckpt = open_checkpoint(path)
    leaves = [node for node in ckpt.values() if node.key == "v"]
    assert len(leaves) == 1000 and all(node.value == 7 for node in leaves)


MEMORY_SCRIPT = """
import json, resource, sys, time
from ckptview.core.errors import CheckpointError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_values

def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

base = rss_mb()
report = {}
for path in sys.argv[1:]:
    start = time.process_time()
    try:
        ckpt = open_checkpoint(path)
    except CheckpointError:
        report[path] = [time.process_time() - start, rss_mb() - base]
        continue
    for entry in ckpt.tensors():
        try:
            for _chunk in iter_chunks(entry.info, 1 << 20):
                pass
            if entry.info.nbytes < 64 << 20:
                read_values(entry.info)
        except CheckpointError:
            pass
    ckpt.close()
    report[path] = [time.process_time() - start, rss_mb() - base]
print(json.dumps(report))
"""


@pytest.mark.slow
def test_time_and_memory_stay_bounded(malformed, tmp_path_factory):
    """Peak RSS over every file (including 1 GiB zip bombs) stays far below what the bombs inflate to;
    CPU work per file stays far from what looping or re-expanding would cost."""
    hostile = corpus.shared("hostile", tmp_path_factory)
    paths = [str(c.path) for c in malformed + hostile]
    proc = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, *paths], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    slow = {p: t for p, (t, _m) in report.items() if t > CPU_SECONDS}
    assert not slow, slow
    peak = max(m for _t, m in report.values())
    assert peak < 300, f"peak RSS grew by {peak:.0f} MB: {sorted(report.items(), key=lambda kv: kv[1][1])[-3:]}"

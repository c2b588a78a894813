"""Hostile log files beside a run (issue 45): event files, trainer_state.json and hparams.yaml are data from
someone else. Each is read within the budget of its bytes, nothing in it runs, a bad one is one line in the
run's `log_files`, and the run (its checkpoints, the other logs) still reads."""

from __future__ import annotations

import os
import struct
import tracemalloc

import pytest

from ckptview.core.budget import Budget, BudgetExceeded
from ckptview.core.read.bytes.fs import LOCAL
from ckptview.core.series.hparams import HparamsError, flatten, read_hparams
from ckptview.core.series.live import run_live
from ckptview.core.series.tfevents import masked_crc32c, read_event_file
from tests.support.logged_runs import plain_run

pytest.importorskip("google.protobuf")
pytest.importorskip("google_crc32c")


def record(data: bytes, length: int | None = None) -> bytes:
    head = struct.pack("<Q", len(data) if length is None else length)
    return head + struct.pack("<I", masked_crc32c(head)) + data + struct.pack("<I", masked_crc32c(data))


def scalar_event(step: int, value: float, tag: bytes = b"loss") -> bytes:
    """A serialized Event: step (field 2), summary (5) { value (1) { tag (1), simple_value (2) } }."""
    inner = b"\x0a" + bytes([len(tag)]) + tag + b"\x15" + struct.pack("<f", value)
    summary = b"\x0a" + bytes([len(inner)]) + inner
    return b"\x10" + bytes([step]) + b"\x2a" + bytes([len(summary)]) + summary


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return plain_run(str(tmp_path_factory.mktemp("hostile") / "run"), epochs=3)


def events_file(folder, *records: bytes) -> str:
    path = os.path.join(folder, "events.out.tfevents.1.host.1.0")
    with open(path, "wb") as fh:
        fh.write(b"".join(records))
    return path


def test_a_record_failing_its_crc_ends_the_file_keeping_what_came_before(tmp_path) -> None:
    bad = bytearray(record(scalar_event(3, 0.5)))
    bad[-6] ^= 0xFF  # one byte of the data
    path = events_file(tmp_path, record(scalar_event(1, 2.0)), record(scalar_event(2, 1.0)), bytes(bad),
                       record(scalar_event(4, 0.1)))
    read = read_event_file(path, LOCAL)
    assert read.error == "record 3: its data fails the CRC check"
    assert read.tags["loss"].steps == [1, 2] and read.tags["loss"].values == [2.0, 1.0]


def test_a_huge_claimed_length_allocates_nothing(tmp_path) -> None:
    path = events_file(tmp_path, record(scalar_event(1, 2.0)), record(b"x" * 16, length=1 << 62))
    tracemalloc.start()
    try:
        read = read_event_file(path, LOCAL)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert read.partial and read.tags["loss"].steps == [1] and peak < 8 << 20


def test_a_header_failing_its_crc_and_garbage_records_are_one_line(tmp_path) -> None:
    broken_header = bytearray(record(scalar_event(1, 2.0)))
    broken_header[9] ^= 0x01
    assert read_event_file(events_file(tmp_path, bytes(broken_header)), LOCAL).error == \
        "record 1: its length fails the CRC check"
    garbage = read_event_file(events_file(tmp_path, record(scalar_event(1, 2.0)), record(b"\xff" * 40)), LOCAL)
    assert garbage.error.startswith("record 2: not an event") and garbage.tags["loss"].steps == [1]
    # Groups nested 100,000 deep in an unknown field: the parser's own limit, not a crash or a stack overflow.
    deep = b"\xbb\x06" * 100_000 + b"\xbc\x06" * 100_000
    nested = read_event_file(events_file(tmp_path, record(deep)), LOCAL)
    assert nested.error is not None and nested.error.startswith("record 1: not an event")


def test_a_fifo_named_like_an_event_file_never_blocks(tmp_path, run) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for path in run.checkpoints:
        os.link(path, folder / os.path.basename(path))
    os.mkfifo(folder / "events.out.tfevents.0.fifo")  # nothing ever writes it
    data = run_live([str(folder)]).to_json()
    (entry,) = data["log_files"]
    assert entry["kind"] == "tfevents" and "FIFO" in entry["error"]
    assert [c["name"] for c in data["scalars"] if c["source"] == "checkpoint"][:3] == ["epoch", "loss", "lr"]


def test_bad_trainer_states_are_lines_and_the_run_still_reads(tmp_path, run) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for path in run.checkpoints:
        os.link(path, folder / os.path.basename(path))
    (folder / "trainer_state.json").write_text("[" * 200_000 + "]" * 200_000)
    data = run_live([str(folder)]).to_json()
    (entry,) = data["log_files"]
    assert entry["error"] == "not a JSON object" or entry["error"].startswith("not JSON")
    (folder / "trainer_state.json").write_text(
        '{"global_step": 3, "log_history": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": NaN},'
        ' {"step": "x", "loss": 1}, 7, {"step": 3, "loss": 1e999, "learning_rate": true}]}')
    data = run_live([str(folder)]).to_json()
    loss = next(c for c in data["scalars"] if c["source"] == "trainer_state.json" and c["name"] == "loss")
    assert loss["steps"] == [1, 2, 3] and loss["values"] == [2.0, None, None]  # JSON holds no NaN or infinity
    assert not [c for c in data["scalars"] if c["name"] == "learning_rate"]  # a bool is no number


def test_unsafe_yaml_builds_nothing(tmp_path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "hparams.yaml"
    path.write_text(f'lr: 0.1\nx: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(HparamsError, match="not safe YAML"):
        read_hparams(str(path), LOCAL)
    assert not marker.exists()


def test_an_alias_bomb_is_refused_by_the_budget(tmp_path) -> None:
    lines = ["a0: &a0 {x: 1, y: 1}"] + [f"a{i}: &a{i} {{p: *a{i - 1}, q: *a{i - 1}}}" for i in range(1, 40)]
    lines += [f"b{i}: *a39" for i in range(200)]
    path = tmp_path / "hparams.yaml"
    path.write_text("\n".join(lines) + "\n")  # 200 x 2^40 leaves in a few kilobytes
    with pytest.raises(BudgetExceeded, match="hyper-parameters"):
        read_hparams(str(path), LOCAL)
    # The same in a run: one line, the rest of the run reads.
    assert flatten({"lr": 0.1, "layers": [1, 2]}, Budget.for_stored(10, "test")) == [("lr", "0.1"), ("layers", "[1, 2]")]

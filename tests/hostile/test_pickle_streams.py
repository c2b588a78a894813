"""Every pickle of a stream is read: torch.load runs all of a legacy file's pickles, not just the first."""

from __future__ import annotations

import io
import json
import pickle
import pickletools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ckptview import cli
from ckptview.core.budget import FLOOR
from ckptview.core.errors import CheckpointError
from ckptview.core.read.formats.torch_legacy import MAGIC_NUMBER
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.pickle.vm import PICKLE_COST
from ckptview.core.read.values.reading import read_values
from tests.support.corpus import Call, G, emit, py_touch, shell_touch

torch = pytest.importorskip("torch")

SYSTEM = "os.system"


def _legacy_bytes(tmp_path: Path) -> tuple[bytes, np.ndarray]:
    weight = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    path = tmp_path / "_honest_legacy.pth"
    torch.save({"weight": weight, "step": 7}, path, _use_new_zipfile_serialization=False)
    data = path.read_bytes()
    path.unlink()
    return data, weight.numpy()


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    """The five pickles of a legacy file and the raw storage bytes after them."""
    f = io.BytesIO(data)
    parts = []
    for _ in range(5):
        start = f.tell()
        for _op in pickletools.genops(f):  # stops after STOP
            pass
        parts.append(data[start:f.tell()])
    return parts, data[f.tell():]


def _payload(marker: Path) -> bytes:
    """Opcodes that run `os.system(touch marker)` and drop its result: put before any pickle's body."""
    return emit(Call(G(SYSTEM), shell_touch(marker))) + b"0"


def _assert_safe_and_complete(path: Path, markers: list[Path], unsafe: list[str], fmt: str | None = None,
                              weight: np.ndarray | None = None, pickles: int | None = None) -> None:
    ckpt = open_checkpoint(path)
    try:
        for name in unsafe:
            assert name in ckpt.unsafe_globals, (name, ckpt.unsafe_globals)
        assert any("nothing was run" in w for w in ckpt.warnings)
        if fmt is not None:
            assert ckpt.format == fmt
        if weight is not None:
            np.testing.assert_array_equal(read_values(ckpt.tensor("weight")), weight)
        if pickles is not None:
            assert ckpt.metadata["pickles"] == pickles
    finally:
        ckpt.close()
    assert not any(m.exists() for m in markers), "THE PAYLOAD RAN"


@pytest.mark.parametrize("position", range(5), ids=["magic", "version", "sys_info", "object", "keys"])
def test_payload_in_any_pickle_of_a_legacy_file_is_reported(tmp_path, position):
    data, weight = _legacy_bytes(tmp_path)
    parts, raw = _split(data)
    marker = tmp_path / f"ran_{position}"
    parts[position] = _payload(marker) + parts[position]  # torch still loads the file, and runs it
    path = tmp_path / "evil.pth"
    path.write_bytes(b"".join(parts) + raw)
    _assert_safe_and_complete(path, [marker], [SYSTEM], fmt="torch-legacy", weight=weight, pickles=5)


@pytest.mark.parametrize("position", range(5), ids=["magic", "version", "sys_info", "object", "keys"])
def test_a_pickle_replaced_by_a_payload_is_reported(tmp_path, position):
    """torch.load runs the pickles before the one it chokes on: each is read, the file still opens."""
    data, _ = _legacy_bytes(tmp_path)
    parts, raw = _split(data)
    marker = tmp_path / f"ran_{position}"
    parts[position] = emit(Call(G(SYSTEM), shell_touch(marker))) + b"."
    path = tmp_path / "replaced.pth"
    path.write_bytes(b"".join(parts) + raw)
    _assert_safe_and_complete(path, [marker], [SYSTEM])


MAGIC_ENCODINGS = {
    "hex_int": b"I0x1950A86A20F9469CFC6C\n.",
    "hex_long": b"L0x1950a86a20f9469cfc6cL\n.",
    "decimal_long": b"L%dL\n." % MAGIC_NUMBER,
    "decimal_int": b"I%d\n." % MAGIC_NUMBER,
    "octal_int": b"I0o%o\n." % MAGIC_NUMBER,
    "underscores": b"L0x1950_A86A_20F9_469C_FC6C\n.",
    "long4": b"\x80\x02\x8b\x0c\x00\x00\x00" + MAGIC_NUMBER.to_bytes(12, "little") + b".",
    "long1_zero_padded": b"\x80\x02\x8a\x10" + MAGIC_NUMBER.to_bytes(16, "little") + b".",
    "padded_past_32": b"\x80\x02" + b"N0" * 40 + b"\x8a\x0a" + MAGIC_NUMBER.to_bytes(10, "little") + b".",
    "padded_past_head": b"\x80\x02" + b"N0" * 4000 + b"\x8a\x0a" + MAGIC_NUMBER.to_bytes(10, "little") + b".",
    "padded_protocol0": b"N0" * 20 + b"I0x1950A86A20F9469CFC6C\n.",
    "padded_protocol0_past_head": b"N0" * 3000 + b"I0x1950A86A20F9469CFC6C\n.",
    "framed": b"\x80\x04\x95\x0e\x00\x00\x00\x00\x00\x00\x00\x8a\x0a" + MAGIC_NUMBER.to_bytes(10, "little")
              + b"\x94.",
}


@pytest.mark.parametrize("encoding", list(MAGIC_ENCODINGS))
def test_magic_number_in_any_encoding_reads_every_pickle(tmp_path, encoding):
    magic = MAGIC_ENCODINGS[encoding]
    assert pickle.loads(magic) == MAGIC_NUMBER
    data, weight = _legacy_bytes(tmp_path)
    parts, raw = _split(data)
    marker = tmp_path / "ran"
    parts[0] = magic
    parts[3] = _payload(marker) + parts[3]
    path = tmp_path / f"{encoding}.pth"
    path.write_bytes(b"".join(parts) + raw)
    _assert_safe_and_complete(path, [marker], [SYSTEM], fmt="torch-legacy", weight=weight, pickles=5)


def test_eval_returning_the_magic_then_os_system(tmp_path):
    first, second = tmp_path / "ran_eval", tmp_path / "ran_system"
    evil_magic = emit(Call(G("builtins.eval"), f"{py_touch(first)} or {MAGIC_NUMBER}")) + b"."
    version = emit(Call(G(SYSTEM), shell_touch(second))) + b"."
    path = tmp_path / "eval_magic.pth"
    path.write_bytes(evil_magic + version)
    _assert_safe_and_complete(path, [first, second], ["builtins.eval", SYSTEM], pickles=2)


def test_eval_magic_before_a_whole_legacy_file(tmp_path):
    data, _ = _legacy_bytes(tmp_path)
    parts, raw = _split(data)
    first, second = tmp_path / "ran_eval", tmp_path / "ran_system"
    parts[0] = emit(Call(G("builtins.eval"), f"{py_touch(first)} or {MAGIC_NUMBER}")) + b"."
    parts[3] = _payload(second) + parts[3]
    path = tmp_path / "eval_magic_legacy.pth"
    path.write_bytes(b"".join(parts) + raw)
    _assert_safe_and_complete(path, [first, second], ["builtins.eval", SYSTEM])


def test_no_magic_at_all_still_reads_every_pickle(tmp_path):
    first, second = tmp_path / "ran_1", tmp_path / "ran_2"
    path = tmp_path / "no_magic.pth"
    path.write_bytes(emit(Call(G(SYSTEM), shell_touch(first))) + b"."
                     + emit(Call(G("subprocess.Popen"), ["touch", str(second)])) + b".")
    _assert_safe_and_complete(path, [first, second], [SYSTEM, "subprocess.Popen"], fmt="pickle", pickles=2)


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_plain_pickle_followed_by_more_pickles(tmp_path, protocol):
    marker = tmp_path / "ran"
    path = tmp_path / "stream.pkl"
    path.write_bytes(pickle.dumps({"lr": 0.1}, protocol=protocol) + pickle.dumps([1, 2], protocol=protocol)
                     + emit(Call(G(SYSTEM), shell_touch(marker))) + b".")
    _assert_safe_and_complete(path, [marker], [SYSTEM], fmt="pickle", pickles=3)
    ckpt = open_checkpoint(path)
    assert any("stream of 3 pickles" in w for w in ckpt.warnings)
    assert [v[0] for v in ckpt.value_entries()] == ["lr"]  # the tree is what pickle.load returns
    ckpt.close()


def test_a_trailing_pickle_that_fails_halfway_still_reports_what_it_named(tmp_path):
    """pickle.load runs each opcode as it reads it: a payload before a broken tail has run."""
    marker = tmp_path / "ran"
    path = tmp_path / "broken_tail.pkl"
    path.write_bytes(pickle.dumps({"a": 1}) + emit(Call(G(SYSTEM), shell_touch(marker))) + b"\xff")
    _assert_safe_and_complete(path, [marker], [SYSTEM], fmt="pickle", pickles=1)
    ckpt = open_checkpoint(path)
    assert any("file continues after the pickle ends" in w for w in ckpt.warnings)
    ckpt.close()


def test_a_failing_first_pickle_names_its_unsafe_globals(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "no_stop.pkl"
    path.write_bytes(b"(" + emit(Call(G(SYSTEM), shell_touch(marker))) + b"\xff")
    with pytest.raises(CheckpointError, match=r"os\.system"):
        open_checkpoint(path)
    assert not marker.exists()


def test_wrong_protocol_version_names_the_globals_of_every_pickle(tmp_path):
    data, _ = _legacy_bytes(tmp_path)
    parts, raw = _split(data)
    marker = tmp_path / "ran"
    parts[1] = pickle.dumps(999, protocol=2)
    parts[3] = _payload(marker) + parts[3]
    path = tmp_path / "version.pth"
    path.write_bytes(b"".join(parts) + raw)
    with pytest.raises(CheckpointError, match=r"protocol version 999.*os\.system"):
        open_checkpoint(path)
    assert not marker.exists()


def test_pickles_after_the_storages_are_read_too(tmp_path):
    data, weight = _legacy_bytes(tmp_path)
    marker = tmp_path / "ran"
    path = tmp_path / "after.pth"
    path.write_bytes(data + emit(Call(G(SYSTEM), shell_touch(marker))) + b".")
    _assert_safe_and_complete(path, [marker], [SYSTEM], fmt="torch-legacy", weight=weight, pickles=6)


def test_a_stream_of_countless_tiny_pickles_is_refused(tmp_path):
    path = tmp_path / "many.pkl"
    path.write_bytes(b"N." * (FLOOR // PICKLE_COST + 5))  # each pickle begun is charged
    with pytest.raises(CheckpointError, match="more than .* units of work \\(pickles begun\\)"):
        open_checkpoint(path)


def test_info_counts_the_pickles(tmp_path, capsys):
    data, _ = _legacy_bytes(tmp_path)
    legacy, plain = tmp_path / "honest.pth", tmp_path / "honest.pkl"
    legacy.write_bytes(data)
    plain.write_bytes(pickle.dumps({"a": 1}))
    for path, count in ((legacy, 5), (plain, 1)):
        assert cli.main(["info", "--json", str(path)]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["pickles"] == count
        assert out["unsafe_globals"] == [] and out["warnings"] == []
        assert cli.main(["info", str(path)]) == 0
        text = capsys.readouterr().out
        assert f"{count} pickle{'s' if count > 1 else ''} in the stream, all read" in text


def test_info_of_a_stream_attack_lists_both_globals(tmp_path, capsys):
    first, second = tmp_path / "ran_eval", tmp_path / "ran_system"
    path = tmp_path / "eval_magic.pth"
    path.write_bytes(emit(Call(G("builtins.eval"), f"{py_touch(first)} or {MAGIC_NUMBER}")) + b"."
                     + emit(Call(G(SYSTEM), shell_touch(second))) + b".")
    assert cli.main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "UNSAFE GLOBALS (referenced, not run): builtins.eval, os.system" in out
    assert "2 pickles in the stream, all read" in out
    assert not first.exists() and not second.exists()


CONTROL = """
import sys, torch
for path in sys.argv[1:]:
    try:
        torch.load(path, weights_only=False)
    except Exception:
        pass
"""


@pytest.mark.slow
def test_control_torch_runs_these_payloads(tmp_path):
    """Without ckptview the same files DO run their payloads under torch.load."""
    data, _ = _legacy_bytes(tmp_path)
    parts, raw = _split(data)
    files, markers = [], []
    for position in range(5):
        marker = tmp_path / f"ran_pos{position}"
        changed = list(parts)
        changed[position] = _payload(marker) + changed[position]
        files.append(tmp_path / f"pos{position}.pth")
        files[-1].write_bytes(b"".join(changed) + raw)
        markers.append(marker)
    for position in range(5):
        marker = tmp_path / f"ran_replaced{position}"
        changed = list(parts)
        changed[position] = emit(Call(G(SYSTEM), shell_touch(marker))) + b"."
        files.append(tmp_path / f"replaced{position}.pth")
        files[-1].write_bytes(b"".join(changed) + raw)
        markers.append(marker)
    for encoding, magic in MAGIC_ENCODINGS.items():
        marker = tmp_path / f"ran_{encoding}"
        changed = [magic, parts[1], parts[2], _payload(marker) + parts[3], parts[4]]
        files.append(tmp_path / f"{encoding}.pth")
        files[-1].write_bytes(b"".join(changed) + raw)
        markers.append(marker)
    first, second = tmp_path / "ran_eval", tmp_path / "ran_system"
    files.append(tmp_path / "eval_magic.pth")
    files[-1].write_bytes(emit(Call(G("builtins.eval"), f"{py_touch(first)} or {MAGIC_NUMBER}")) + b"."
                          + emit(Call(G(SYSTEM), shell_touch(second))) + b".")
    markers += [first, second]
    script = tmp_path / "control.py"
    script.write_text(CONTROL)
    subprocess.run([sys.executable, str(script), *map(str, files)], cwd=tmp_path, timeout=300,
                   capture_output=True, check=False)
    assert [m.name for m in markers if not m.exists()] == []

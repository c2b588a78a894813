"""Text from a file never reaches a terminal raw: every human-readable output escapes control characters."""

from __future__ import annotations

import json
import pickle
import struct

import pytest
import torch

from ckptview import cli
from ckptview.commands.run import format_result
from ckptview.core.text import printable

OSC_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J\x1b[H"
FORGED_ROW = "x\nfake.weight  float32  1x1  4 B  cpu"
HOSTILE = {
    "osc": f"w{OSC_TITLE}",
    "clear": f"layer{CLEAR}.weight",
    "cr": "hidden\rshown",
    "newline": FORGED_ROW,
    "bidi": "abc\u202edcba\u2066",
    "c1": "csi\x9b2J",
    "tab": "a\tb",
}


def raw_controls(text: str) -> list[str]:
    """Every character a terminal would act on, other than the newlines that end lines."""
    return sorted({c for c in text if c != "\n" and not c.isprintable()})


def hostile_checkpoint(tmp_path, *, legacy: bool = False):
    state = {name: torch.ones(1) for name in HOSTILE.values()}
    state["meta"] = {f"key{CLEAR}": f"value{OSC_TITLE}\nwarning: forged", "note\u202e": 3}
    path = tmp_path / ("hostile_legacy.pth" if legacy else "hostile.pth")
    torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    return path, state


@pytest.mark.parametrize("text", [*HOSTILE.values(), "\x00", "\x7f", "\u2028", "\u200f", "\U000e0041"])
def test_printable_escapes_every_control_character(text):
    shown = printable(text)
    assert raw_controls(shown) == [] and "\n" not in shown
    assert printable("plain name.weight 日本 é") == "plain name.weight 日本 é"


def test_info_table_escapes_names_keys_and_values(tmp_path, capsys):
    path, state = hostile_checkpoint(tmp_path)
    assert cli.main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == []
    assert "w\\x1b]0;pwned\\x07" in out and "layer\\x1b[2J\\x1b[H.weight" in out
    assert "hidden\\x0dshown" in out and "abc\\u202edcba\\u2066" in out
    # the newline in a name does not forge a row: the fake row is part of the escaped name
    assert not any(line.startswith("fake.weight") for line in out.splitlines())
    assert "x\\x0afake.weight" in out
    assert not any(line.startswith("warning: forged") for line in out.splitlines())
    assert "meta.key\\x1b[2J\\x1b[H = 'value\\x1b]0;pwned\\x07\\nwarning: forged'" in out


def test_info_json_keeps_the_real_names(tmp_path, capsys):
    path, state = hostile_checkpoint(tmp_path)
    assert cli.main(["info", "--json", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {t["name"] for t in data["tensors"]} == set(HOSTILE.values())
    assert {v["name"] for v in data["values"]} == {f"meta.key{CLEAR}", "meta.note\u202e"}


def hostile_globals_pickle(tmp_path):
    """A pickle naming a global whose module holds terminal escapes, next to an honest os.system."""
    def stack_global(module: str, name: str) -> bytes:
        enc = [s.encode() for s in (module, name)]
        return b"".join(b"X" + struct.pack("<I", len(e)) + e for e in enc) + b"\x93"
    body = (b"\x80\x04}(" + b"X\x01\x00\x00\x00a" + stack_global(f"evil{CLEAR}{OSC_TITLE}\r", "run")
            + b")R" + b"X\x01\x00\x00\x00b" + stack_global("os", "system") + b"X\x04\x00\x00\x00true\x85R" + b"u.")
    path = tmp_path / "globals.pkl"
    path.write_bytes(body)
    return path


def test_unsafe_globals_line_stays_visible(tmp_path, capsys):
    path = hostile_globals_pickle(tmp_path)
    assert cli.main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == []
    unsafe = [line for line in out.splitlines() if "UNSAFE GLOBALS" in line]
    assert unsafe == ["  UNSAFE GLOBALS (referenced, not run): evil\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07\\x0d.run, "
                      "os.system"]
    assert all(raw_controls(line) == [] for line in out.splitlines() if line.startswith("warning:"))


def test_warnings_about_broken_tensors_are_escaped(tmp_path, capsys):
    path, _ = hostile_checkpoint(tmp_path, legacy=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 2])  # the last storage is cut: its tensor is broken, and named
    assert cli.main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == []
    assert any(line.startswith("warning: tensor '") and "is broken" in line for line in out.splitlines())


def test_error_lines_on_stderr_are_escaped(tmp_path, capsys):
    missing = tmp_path / f"nothing{CLEAR}here.pth"
    assert cli.main(["info", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and raw_controls(err) == [] and "\\x1b[2J" in err
    # an error whose message quotes the file: a persistent id of a legacy-looking file
    bad = tmp_path / "bad.pth"
    bad.write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2)
                    + pickle.dumps({}, protocol=2) + b"\x80\x02X\x0b\x00\x00\x00\x1b]0;pwned\x07Q.")
    assert cli.main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and raw_controls(err) == [], err


def test_diff_table_escapes_names(tmp_path, capsys):
    a, _ = hostile_checkpoint(tmp_path)
    b = tmp_path / "b.pth"
    torch.save({HOSTILE["osc"]: torch.zeros(1), f"only_b{CLEAR}": torch.ones(2)}, b)
    assert cli.main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert raw_controls(out) == [] and "only_b\\x1b[2J" in out
    assert not any(line.startswith("fake.weight") for line in out.splitlines())


def test_export_lines_escape_names(tmp_path, capsys):
    path, _ = hostile_checkpoint(tmp_path)
    assert cli.main(["export", str(path), "--out", str(tmp_path / "out.npz")]) == 0
    captured = capsys.readouterr()
    assert raw_controls(captured.out) == [] and raw_controls(captured.err) == []
    assert "w\\x1b]0;pwned\\x07 -> " in captured.out


def test_run_summary_escapes_names():
    result = {"device": "cpu", "source": "state_dict", "load_seconds": 0.1,
              "load": {"tensors": 1, "bytes_moved": 4, "missing": [HOSTILE["osc"]], "unexpected": [FORGED_ROW],
                       "unplaced": [{"name": HOSTILE["clear"], "reason": "bad\rreason"}]},
              "inputs": [], "outputs": [{"name": HOSTILE["bidi"], "shape": [1], "dtype": "float32",
                                         "device": "cpu", "stats": None}],
              "latency_ms": {"median": 1.0, "min": 1.0, "max": 1.0, "runs": 1}}
    text = format_result(result)
    assert raw_controls(text) == []
    assert not any(line.startswith("fake.weight") for line in text.splitlines())


def test_devices_table_escapes_driver_text(monkeypatch, capsys):
    from ckptview.commands import devices
    from ckptview.core.run.devices import DeviceInfo

    fake = [DeviceInfo("cpu", "cpu", True, description=f"cpu{OSC_TITLE}"),
            DeviceInfo("cuda", "cuda", False, reason=f"driver said\n{CLEAR}no")]
    monkeypatch.setattr(devices, "probe_devices", lambda: fake)
    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == [] and len(out.splitlines()) == 2

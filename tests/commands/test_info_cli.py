"""`ckptview info`: the JSON contract, the table, and one-line errors with a non-zero status."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from tests.core.read.test_reader_torch import training_checkpoint
from tests.support.paths import SRC


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckptview", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_info_json_contract(tmp_path):
    path = tmp_path / "train.pth"
    ckpt = training_checkpoint()
    torch.save(ckpt, path)
    proc = run_cli("info", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"path", "format", "file_size", "tensors", "values", "globals", "unsafe_globals", "warnings"} <= set(data)
    assert data["path"] == str(path) and data["format"] == "torch-zip"
    assert data["file_size"] == path.stat().st_size
    by_name = {t["name"]: t for t in data["tensors"]}
    w = by_name["model_state_dict.hidden.weight"]
    assert w["path"] == ["model_state_dict", "hidden.weight"]
    assert w["shape"] == [256, 20] and w["dtype"] == "float32" and w["nbytes"] == 256 * 20 * 4
    assert w["device"] == "cpu" and w["shares_storage_with"] == []
    assert by_name["optimizer_state_dict.state.0.exp_avg"]["path"] == ["optimizer_state_dict", "state", 0, "exp_avg"]
    shared = by_name["nested.a.2.1"]
    assert sorted(shared["shares_storage_with"]) == ["nested.a.2.0", "nested.a.2.2", "nested.b.deep.deeper"]
    assert by_name["nested.a.2.2"]["nbytes"] == 3 * 3 * 4  # the view's own bytes, not its storage's
    values = {v["name"]: v for v in data["values"]}
    assert values["epoch"] == {"name": "epoch", "path": ["epoch"], "type": "int", "repr": "7"}
    assert values["loss"]["type"] == "float" and values["loss"]["repr"] == "0.125"
    assert values["nothing"]["type"] == "None" and values["nothing"]["repr"] == "None"
    assert values["flag"]["repr"] == "True" and values["name"]["repr"] == "'mlp'"
    assert values["nested.a.1"]["repr"] == "2.5"
    assert "torch._utils._rebuild_tensor_v2" in data["globals"]
    assert "collections.OrderedDict" in data["globals"]
    assert data["unsafe_globals"] == [] and data["warnings"] == []


def test_info_table_is_readable(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"encoder.weight": torch.zeros(768, 3072), "step": 10}, path)
    proc = run_cli("info", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "encoder.weight" in proc.stdout and "768x3072" in proc.stdout and "9.0 MiB" in proc.stdout
    assert "step = 10" in proc.stdout


def test_info_does_not_import_torch_or_qt(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(2)}, path)
    code = ("import sys, io, contextlib; from ckptview.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()): rc = main(['info', {str(path)!r}, '--json'])\n"
            "print(rc, 'torch' in sys.modules, 'PySide6' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["0", "False", "False"], proc.stderr


def test_errors_are_one_line_and_non_zero(tmp_path):
    cases = {
        "empty.pth": b"",
        "text.pth": b"hello, I am not a checkpoint\n",
        "page.pth": b"<!DOCTYPE html><html><body>404</body></html>",
        "lfs.pth": b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n",
        "trunc.pth": b"PK\x03\x04" + b"\x00" * 40,
        "pickle.pth": b"\x80\x02}q\x00(X\x01\x00\x00\x00a",
    }
    expected = {"empty.pth": "empty", "text.pth": "text", "page.pth": "HTML", "lfs.pth": "Git LFS",
                "trunc.pth": "zip", "pickle.pth": "truncated"}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        proc = run_cli("info", str(path), "--json")
        assert proc.returncode != 0, name
        assert set(json.loads(proc.stdout)) == {"error"}, name  # the failure's object, nothing else
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, (name, proc.stderr)
        assert expected[name] in lines[0], (name, lines[0])
        assert "Traceback" not in proc.stderr
    proc = run_cli("info", str(tmp_path / "missing.pt"))
    assert proc.returncode != 0 and "no such file" in proc.stderr


def test_top_level_tensor_and_value_files(tmp_path):
    torch.save(torch.arange(3), tmp_path / "t.pt")
    torch.save(5, tmp_path / "v.pt")
    data = json.loads(run_cli("info", str(tmp_path / "t.pt"), "--json").stdout)
    assert [(t["name"], t["path"], t["shape"]) for t in data["tensors"]] == [("", [], [3])]
    data = json.loads(run_cli("info", str(tmp_path / "v.pt"), "--json").stdout)
    assert data["tensors"] == [] and data["values"] == [{"name": "", "path": [], "type": "int", "repr": "5"}]


def test_meta_tensors_list_with_shape_and_no_values(tmp_path):
    path = tmp_path / "meta.pt"
    torch.save({"m": torch.empty(3, 4, device="meta"), "w": torch.ones(2)}, path)
    proc = run_cli("info", str(path), "--json", "--stats")
    assert proc.returncode == 0, proc.stderr
    by_name = {t["name"]: t for t in json.loads(proc.stdout)["tensors"]}
    assert by_name["m"]["device"] == "meta" and by_name["m"]["shape"] == [3, 4] and "broken" not in by_name["m"]
    assert by_name["m"]["stats"] is None and by_name["w"]["stats"]["mean"] == 1.0
    diff = run_cli("diff", str(path), str(path), "--json")
    assert diff.returncode == 0, diff.stdout + diff.stderr


def test_pre_0_1_10_tar_checkpoint_is_named(tmp_path):
    import io
    import tarfile

    path = tmp_path / "ancient.pth"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("pickle")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"\x80\x02N."))
    proc = run_cli("info", str(path))
    assert proc.returncode == 2 and "tar archive" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_one_byte_format_for_the_cli_and_the_window() -> None:

    from ckptview.core.units import human_bytes

    for n, text in ((17_090_379, "16.3 MiB"), (812, "812 B"), (1536, "1.5 KiB"), (3 << 30, "3.0 GiB")):
        assert human_bytes(n) == text
    # One formatting module: the window and the commands import it from the core, and no module of the
    # window defines a byte, count or shape format of its own.
    gui = SRC / "gui"
    for module in gui.rglob("*.py"):
        source = module.read_text()
        assert not any(f"def {name}(" in source for name in ("human_bytes", "human_count", "count_text",
                                                             "shape_text")), module.name

"""Issue 24, A and B: a program in a file is code, and the load gate reads a file as torch reads it.

Every attack here is checked twice: ckptview runs nothing from it (no marker file; `run` without --trust exits 2
with one line naming what would run; `info` lists it or refuses the file), and torch itself, given the same
file in a separate process, does run it (the marker appears): the file really is what the test says it is.
"""

from __future__ import annotations

import io
import json
import pathlib
import pickle
import shutil
import subprocess
import sys
import tarfile
import textwrap
import warnings
import zipfile
from typing import Any

import pytest
import torch
from torch import nn

from ckptview import cli
from ckptview.core.read.pickle.census import census
from ckptview.core.run import request as runner
from tests.support.crafted import payload_pickle, rewrite_zip
from tests.support.paths import SRC
from tests.support.remote_server import RangeServer

GCC = shutil.which("gcc")


def torch_runs(code: str, marker: pathlib.Path) -> bool:
    """Run `code` (torch given the hostile file) in a fresh process; True when the marker appeared."""
    subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300, check=False)
    return marker.exists()


def _one_line_refusal(capsys: pytest.CaptureFixture, args: list[str]) -> str:
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ckptview: ")
    return err


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("base")
    torch.manual_seed(0)
    model = nn.Linear(4, 3).eval()
    torch.export.save(torch.export.export(model, (torch.randn(2, 4),)), folder / "base.pt2")
    return {"pt2": str(folder / "base.pt2")}


# ------------------------------------------------------------------------------------- A: programs are code


def _aoti_pt2(folder: pathlib.Path, base: str, marker: pathlib.Path) -> str:
    """A real .pt2 plus an AOTInductor library whose constructor writes `marker` (and the metadata it needs)."""
    source = folder / "evil.c"
    source.write_text(textwrap.dedent(f'''
        #include <stdio.h>
        __attribute__((constructor)) static void ran(void) {{
            FILE *f = fopen({json.dumps(str(marker))}, "w");
            if (f) {{ fputs("ran", f); fclose(f); }}
        }}
    '''))
    library = folder / "evil.so"
    subprocess.run([GCC, "-shared", "-fPIC", "-o", str(library), str(source)], check=True, capture_output=True)
    metadata = json.dumps({"AOTI_DEVICE_KEY": "cpu"}).encode()
    return rewrite_zip(base, str(folder / "aoti.pt2"), {}, add={
        "data/aotinductor/model/evil.so": library.read_bytes(),
        "data/aotinductor/model/evil_metadata.json": metadata,
        "data/aotinductor/model/wrapper_metadata.json": metadata})


@pytest.mark.slow
@pytest.mark.skipif(GCC is None, reason="needs gcc to build the fake AOTInductor library")
def test_a_pt2_with_a_compiled_library_is_listed_and_never_loaded_without_consent(
        tmp_path: pathlib.Path, base: dict, capsys: pytest.CaptureFixture) -> None:
    """Finding 1: `run` without --trust dlopen'ed data/aotinductor/**.so; `info` showed a clean .pt2."""
    marker = tmp_path / "so.marker"
    path = _aoti_pt2(tmp_path, base["pt2"], marker)
    assert cli.main(["info", path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["native_code"] == ["data/aotinductor/model/evil.so"]
    assert any(w.startswith("native code: data/aotinductor/model/evil.so") for w in data["warnings"])
    assert cli.main(["info", path]) == 0
    assert "NATIVE CODE (compiled libraries, run if torch loads the file): data/aotinductor/model/evil.so" in (
        capsys.readouterr().out)
    err = _one_line_refusal(capsys, ["run", path, "--input-shape", "2,4"])
    assert err.startswith("ckptview: refusing to load this .pt2 program nobody trusted: loading it runs code from "
                          "the file: exported program models/model.json, native library data/aotinductor/model/evil.so")
    assert runner.inspect_inputs(path)[0].shape == (2, 4)  # the run panel's signature: the JSON, nothing loaded
    assert not marker.exists()
    assert torch_runs(f"import torch\ntry:\n    torch.export.load({path!r})\nexcept Exception:\n    pass", marker)


class FromFile(nn.Module):
    """Its __setstate__ (TorchScript code, run by torch.jit.load) creates and fills any file the user can write."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3, 4))
        self.target = target
        self.written = torch.zeros(8, dtype=torch.uint8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t()

    @torch.jit.export
    def __getstate__(self) -> tuple[torch.Tensor, str, bool]:
        return (self.weight, self.target, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, str, bool]) -> None:
        self.weight = state[0]
        self.target = state[1]
        self.training = state[2]
        self.written = torch.from_file(self.target, True, 8, dtype=torch.uint8)  # kept: an attribute
        self.written.fill_(65)


def from_file_archive(folder: pathlib.Path, marker: pathlib.Path) -> str:
    path = folder / "writes.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(FromFile(str(marker))), str(path))
    marker.unlink(missing_ok=True)  # scripting does not run __setstate__, but be sure
    return str(path)


@pytest.mark.slow
def test_torchscript_code_with_clean_pickles_still_needs_consent(tmp_path: pathlib.Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    """Finding 3: every pickle is clean, the code writes a file: `run` without --trust loaded it."""
    marker = tmp_path / "written.marker"
    path = from_file_archive(tmp_path, marker)
    found = census(path)
    assert found.unsafe == [] and found.unreadable == [] and found.programs[0].startswith("TorchScript code (")
    err = _one_line_refusal(capsys, ["run", path, "--input-shape", "2,4"])
    assert err.startswith("ckptview: refusing to load this TorchScript archive nobody trusted: loading it runs code "
                          "from the file: TorchScript code (")
    assert runner.inspect_inputs(path) is None  # no shapes in TorchScript code: left empty, nothing loaded
    assert not marker.exists()
    assert torch_runs(f"import torch\ntorch.jit.load({path!r})", marker)
    assert marker.read_bytes() == b"A" * 8


# ------------------------------------------------------------------------------ B: the gate reads as torch


def _rename(src: str, dst: str, renames: dict[str, str], replace: dict[str, bytes] | None = None) -> str:
    """Copy a zip, renaming records (by their name below the root folder) and replacing their bytes."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            root, tail = info.filename.split("/", 1)
            data = (replace or {}).get(tail, zin.read(info))
            zout.writestr(f"{root}/{renames.get(tail, tail)}", data)
    return dst


@pytest.mark.slow
def test_record_names_are_found_in_any_case_as_torch_finds_them(tmp_path: pathlib.Path, base: dict,
                                                                capsys: pytest.CaptureFixture) -> None:
    """Finding 4: sample inputs stored as MODEL.PT, a config naming WEIGHT_0 for weight_0: torch reads both."""
    marker = tmp_path / "case.marker"
    payload = payload_pickle(str(marker))
    sample = _rename(base["pt2"], str(tmp_path / "sample.pt2"),
                     {"data/sample_inputs/model.pt": "data/sample_inputs/MODEL.PT"}, {"data/sample_inputs/model.pt": payload})
    with zipfile.ZipFile(base["pt2"]) as zin:
        config = json.loads(zin.read(next(n for n in zin.namelist() if n.endswith("model_weights_config.json"))))
    entry = next(e for e in config["config"].values() if e["path_name"] == "weight_0")
    entry["path_name"], entry["use_pickle"] = "WEIGHT_0", True
    weight = _rename(base["pt2"], str(tmp_path / "weight.pt2"), {},
                     {"data/weights/model_weights_config.json": json.dumps(config).encode(),
                      "data/weights/weight_0": payload})
    for path in (sample, weight):
        assert "posix.system" in census(path).unsafe
        assert cli.main(["info", path, "--json"]) == 0
        assert "posix.system" in json.loads(capsys.readouterr().out)["unsafe_globals"]
        err = _one_line_refusal(capsys, ["run", path, "--input-shape", "2,4"])
        assert "posix.system" in err
        assert not marker.exists()
        assert torch_runs(f"import torch\ntry:\n    torch.export.load({path!r})\nexcept Exception:\n    pass", marker)
        marker.unlink()


def _pickled_weight(base: str, dst: str, path_name: str, record: str, data: bytes) -> str:
    """A .pt2 whose first weight is `use_pickle` under `path_name`, with `record` (below the root) holding `data`."""
    with zipfile.ZipFile(base) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            root, tail = info.filename.split("/", 1)
            raw = zin.read(info)
            if tail == "data/weights/model_weights_config.json":
                config = json.loads(raw)
                entry = next(iter(config["config"].values()))
                entry["path_name"], entry["use_pickle"] = path_name, True
                raw = json.dumps(config).encode()
            zout.writestr(info.filename, raw)
        zout.writestr(f"{root}/{record}", data)
    return dst


@pytest.mark.slow
def test_payload_config_names_and_nested_programs_are_read_as_torch_reads_them(tmp_path: pathlib.Path,
                                                                               base: dict) -> None:
    """Variations: an absolute `path_name` (os.path.join drops the folder: torch reads 'ROOT//evil'), and a
    pickled weight that is itself a TorchScript archive (torch.load hands it to torch.jit.load: code runs)."""
    marker = tmp_path / "var.marker"
    absolute = _pickled_weight(base["pt2"], str(tmp_path / "abs.pt2"), "/evil", "/evil", payload_pickle(str(marker)))
    assert "posix.system" in census(absolute).unsafe
    assert torch_runs(f"import torch\ntry:\n    torch.export.load({absolute!r})\nexcept Exception:\n    pass", marker)
    marker.unlink()
    script = pathlib.Path(from_file_archive(tmp_path, marker)).read_bytes()
    nested = _pickled_weight(base["pt2"], str(tmp_path / "nested.pt2"), "weight_9", "data/weights/weight_9", script)
    found = census(nested)
    assert found.unsafe == [] and any(p.startswith("TorchScript code (") and "weight_9:code/" in p
                                      for p in found.programs)
    assert not marker.exists()
    assert torch_runs(f"import torch\ntry:\n    torch.export.load({nested!r})\nexcept Exception:\n    pass", marker)


def test_compiled_code_anywhere_in_an_archive_is_a_program() -> None:
    """An AOTInductor folder with sources only (torch compiles and loads them), a library outside it."""
    from ckptview.core.read.pickle.census import census_bytes

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("m/archive_format", "pt2")
        z.writestr("m/data/aotinductor/other/model.cpp", "int x;")
        z.writestr("m/extra/helper.SO", b"\x7fELF")
    found = census_bytes(buffer.getvalue())
    assert found.programs == ["native library extra/helper.SO",
                              "AOTInductor package data/aotinductor/other/ (compiled code)"]


def test_records_torch_exports_fallback_reader_unpickles_are_checked(tmp_path: pathlib.Path) -> None:
    """torch.export.load falls back to Python's zipfile for older archives: serialized_state_dict.json and
    serialized_constants.json go to torch.load (then with weights_only=False): they are pickles to the census."""
    from ckptview.core.read.pickle.census import census_bytes

    for record in ("serialized_state_dict.json", "serialized_constants.json", "m/serialized_example_inputs.pt"):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as z:
            z.writestr("version", "8.1")
            z.writestr(record, payload_pickle(str(tmp_path / "m")))
        assert census_bytes(buffer.getvalue()).unsafe == ["posix.system"], record


def test_two_records_with_one_name_to_torch_are_refused(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    """data.pkl and DATA.PKL: which one torch's lookup returns is not ckptview's to guess."""
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buffer)
    clean = tmp_path / "clean.pt"
    clean.write_bytes(buffer.getvalue())
    path = rewrite_zip(str(clean), str(tmp_path / "twice.pt"), {},
                       add={"DATA.PKL": payload_pickle(str(tmp_path / "m"))})
    assert any("have one name to torch's reader" in f for f in census(path).findings())
    err = _one_line_refusal(capsys, ["info", path])
    assert "ambiguous zip: records" in err and "differ only in case" in err


def _written_twice(tmp_path: pathlib.Path, name: str, clean_zip: bytes, record: str, evil: bytes) -> str:
    """`clean_zip` rewritten with `record`'s bytes replaced by `evil` (padded to the same length), then the clean
    rewrite appended: zipfile (offsets shifted by what precedes) reads the clean copy, torch the evil one."""
    src = tmp_path / f"{name}.src"
    src.write_bytes(clean_zip)
    same = rewrite_zip(str(src), str(tmp_path / f"{name}.a"), {})
    with zipfile.ZipFile(same) as z:
        length = len(z.read(next(n for n in z.namelist() if n.split("/", 1)[1] == record)))
    assert len(evil) <= length
    bad = rewrite_zip(str(src), str(tmp_path / f"{name}.b"), {record: lambda _: evil + b"\0" * (length - len(evil))})
    path = tmp_path / name
    path.write_bytes(pathlib.Path(bad).read_bytes() + pathlib.Path(same).read_bytes())
    return str(path)


@pytest.mark.slow
def test_a_zip_written_twice_is_refused(tmp_path: pathlib.Path, base: dict, capsys: pytest.CaptureFixture) -> None:
    """Finding 5: ckptview listed the clean copy's data.pkl; torch.load(weights_only=False) ran the other one."""
    marker = tmp_path / "twice.marker"
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2), "pad": "x" * 400}, buffer)
    path = _written_twice(tmp_path, "twice.pt", buffer.getvalue(), "data.pkl", payload_pickle(str(marker)))
    assert any("ambiguous zip" in f for f in census(path).findings())
    err = _one_line_refusal(capsys, ["info", path])
    assert "ambiguous zip: its directory is" in err and "torch and zipfile would read different records" in err
    assert not marker.exists()
    assert torch_runs(f"import torch\ntry:\n    torch.load({path!r}, weights_only=False)\nexcept Exception:\n    pass",
                      marker)
    # The same on a .pt2: the sample inputs torch reads are the other copy's.
    marker.unlink()
    with zipfile.ZipFile(base["pt2"]) as z:
        assert len(z.read(next(n for n in z.namelist() if n.endswith("sample_inputs/model.pt")))) > 100
    pt2 = _written_twice(tmp_path, "twice.pt2", pathlib.Path(base["pt2"]).read_bytes(), "data/sample_inputs/model.pt",
                         payload_pickle(str(marker)))
    assert any("ambiguous zip" in f for f in census(pt2).findings())
    assert "ambiguous zip" in _one_line_refusal(capsys, ["info", pt2])
    assert "ambiguous zip" in _one_line_refusal(capsys, ["run", pt2, "--trust", "--input-shape", "2,4"])
    assert not marker.exists()


def _legacy_tar(path: pathlib.Path, marker: pathlib.Path) -> None:
    """A tar whose first member is named by the five legacy header pickles, its `storages` member a payload."""
    header = (pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2)
              + b"}." + b"}." + b"].")
    assert b"\0" not in header and len(header) < 100
    members: dict[str, bytes] = {
        header.decode("utf-8", "surrogateescape"): b"",
        "storages": payload_pickle(str(marker)) + pickle.dumps([], protocol=2),
        "tensors": pickle.dumps(0, protocol=2),
        "pickle": pickle.dumps({}, protocol=2),
    }
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert path.read_bytes().startswith(header)


@pytest.mark.slow
def test_a_tar_torch_would_read_is_refused(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    """Finding 6: to ckptview an empty legacy checkpoint; torch.load tries tar first and unpickles `storages`."""
    marker = tmp_path / "tar.marker"
    path = tmp_path / "legacy.pt"
    _legacy_tar(path, marker)
    assert any("reads it as a tar archive" in f for f in census(str(path)).findings())
    err = _one_line_refusal(capsys, ["info", str(path)])
    assert "ambiguous file: torch.load reads it as a tar archive" in err
    assert not marker.exists()
    assert torch_runs(f"import torch\ntry:\n    torch.load({str(path)!r}, weights_only=False)\nexcept Exception:\n"
                      "    pass", marker)


def test_the_worker_checks_the_census_against_torchs_own_archive_reader(tmp_path: pathlib.Path) -> None:
    """In the worker, torch's reader (bytes only) must list the records the census saw and return the bytes it
    checked: a census of one archive does not pass for another."""
    from ckptview.core.worker.load_gate import LoadRefused, same_records_as_torch

    paths = {}
    for name, obj in (("a", {"w": torch.ones(2), "v": 1}), ("b", {"w": torch.ones(2), "v": 2}),
                      ("c", {"w": torch.ones(2), "v": 1, "x": torch.zeros(2)})):
        paths[name] = str(tmp_path / f"{name}.pt")
        torch.save(obj, paths[name])
    found = census(paths["a"])
    assert found.records >= {"data.pkl", "data/0"} and "data.pkl" in found.checked
    same_records_as_torch(paths["a"], found, paths["a"])
    with pytest.raises(LoadRefused, match=r"returns other bytes for record 'data\.pkl' than ckptview checked"):
        same_records_as_torch(paths["b"], found, paths["b"])
    with pytest.raises(LoadRefused, match=r"lists records ckptview's check did not see \(data/1"):
        same_records_as_torch(paths["c"], found, paths["c"])


# ------------------------------------------------------------------------------- 13: remote graphs


@pytest.fixture
def served_graphs(tmp_path: pathlib.Path, base: dict) -> Any:
    pytest.importorskip("fsspec")
    pytest.importorskip("requests")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(nn.Linear(4, 3).eval(), torch.randn(2, 4)), tmp_path / "traced.pt")
    shutil.copy(base["pt2"], tmp_path / "m.pt2")
    server = RangeServer(str(tmp_path))
    yield tmp_path, server
    server.stop()


def _info(capsys: pytest.CaptureFixture, path: str) -> dict:
    assert cli.main(["info", path, "--json"]) == 0, capsys.readouterr().err
    data = json.loads(capsys.readouterr().out)
    data.pop("path")
    data.pop("transfer", None)
    return data


def test_remote_torchscript_and_pt2_open_like_the_local_files(served_graphs: Any,
                                                             capsys: pytest.CaptureFixture) -> None:
    """Finding 13: the census opened and memory-mapped the path as a local file: a URL failed."""
    folder, server = served_graphs
    for name in ("traced.pt", "m.pt2"):
        assert _info(capsys, f"{server.url}/{name}") == _info(capsys, str(folder / name))
    found = census(f"{server.url}/traced.pt")
    assert found.programs and found.findings() == census(str(folder / "traced.pt")).findings()


def test_nothing_in_src_memory_maps() -> None:
    src = SRC.parent
    hits = [str(p) for p in src.rglob("*.py") if "mmap" in p.read_text()]
    assert hits == []


def test_readers_do_not_reach_into_the_run_layer() -> None:
    """Issue 26, point 1: the census is part of the reading layer; nothing under core/read imports core/run."""
    read = SRC / "core" / "read"
    hits = [str(p) for p in read.rglob("*.py") if "ckptview.core.run" in p.read_text()]
    assert hits == []

"""No code from a file runs without consent on the run path: the load gate, .pt2/TorchScript records, the
second checkpoint's own consent, the isolated worker, and bounded worker output.

Every attack is a real torch archive with one record replaced by a pickle whose payload would create a marker
file; each test shows the marker is never created, the globals are listed, and the run is refused.
"""

from __future__ import annotations

import ast
import io
import json
import os
import pathlib
import sys
import textwrap
import warnings
import zipfile

import pytest
import torch
from torch import nn

from ckptview import cli
from ckptview.core import open_checkpoint
from ckptview.core.errors import FileChangedError
from ckptview.core.jobs import drain
from ckptview.core.read.pickle.census import census, census_bytes
from ckptview.core.run import request as runner
from ckptview.core.run.input_specs import InputSpec, make_array, parse_input_specs
from ckptview.core.run.process import RunError, WorkerJob, execute
from ckptview.core.run.protocol import MAX_STDERR_LINE, Job, WorkerError, bounded_lines
from ckptview.core.run.request import RunRequest, inspect_inputs, run
from ckptview.core.worker import load_gate
from ckptview.core.worker.forward import _concrete_size, to_torch
from ckptview.core.worker.loading import load_graph
from ckptview.core.worker.model_code import allow_caller_imports, build_user_model
from tests.support.crafted import (
    Payload,
    crafted_pt2,
    crafted_torchscript,
    first_entry_pickled,
    payload_pickle,
    rewrite_zip,
)

PT2_RECORDS = ("weight", "constant", "sample", "opaque")
TS_RECORDS = ("data.pkl", "constants.pkl", "traced_inputs.pkl", "*.debug_pkl")


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A clean TorchScript archive and .pt2 of one linear layer."""
    folder = tmp_path_factory.mktemp("clean")
    torch.manual_seed(0)
    model = nn.Linear(4, 3).eval()
    example = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(model, example), folder / "ts.pt")
    torch.export.save(torch.export.export(model, (example,)), folder / "m.pt2")
    return {"folder": folder, "model": model, "ts": str(folder / "ts.pt"), "pt2": str(folder / "m.pt2")}


def _request(path: str, source: str, **extra: object) -> dict:
    """A worker request as the runner builds it, for tests that bypass the parent's checks."""
    data = RunRequest(path, runs=1, warmup=0).to_json()
    data.update({"op": "run", "source": source, "consent": {"main": None, "compare": None}, **extra})
    return data


# ------------------------------------------------------------------------------------------ .pt2 records


@pytest.mark.parametrize("record", PT2_RECORDS)
def test_pt2_pickled_record_is_listed_and_refused(record: str, tmp_path: pathlib.Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    """A .pt2 whose weight / constant / sample input / opaque object is a payload: info lists it, run refuses."""
    marker = tmp_path / "ran.marker"
    path = crafted_pt2(tmp_path, record, str(marker))
    assert cli.main(["info", path, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "posix.system" in info["globals"] and "posix.system" in info["unsafe_globals"]
    assert cli.main(["info", path]) == 0
    assert "UNSAFE GLOBALS (referenced, not run): posix.system" in capsys.readouterr().out
    assert cli.main(["run", path]) == 2
    err = capsys.readouterr().err
    assert err == ("ckptview: refusing to load this .pt2 program nobody trusted: loading it runs code from the "
                   "file: exported program models/model.json; torch would unpickle records that import and run "
                   "posix.system; pass --trust to allow\n")
    inspect_inputs(path)  # the run panel's input signature: read from the JSON, nothing loaded
    assert not marker.exists()


def test_pt2_payload_inside_a_nested_torch_save_or_a_deflated_archive_is_listed(tmp_path: pathlib.Path) -> None:
    """Variations: the pickled weight is itself a torch.save zip; the whole archive is deflate-compressed."""
    marker = tmp_path / "ran.marker"
    evil = crafted_pt2(tmp_path, "sample", str(marker))  # also writes base.pt2
    nested = io.BytesIO()
    torch.save({"w": Payload(str(marker))}, nested)
    path = rewrite_zip(str(tmp_path / "base.pt2"), str(tmp_path / "nested.pt2"),
                       {"data/weights/model_weights_config.json": first_entry_pickled,
                        "data/weights/weight_0": lambda _: nested.getvalue()})
    deflated = str(tmp_path / "deflated.pt2")
    with zipfile.ZipFile(evil) as zin, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
    for candidate in (path, deflated):
        assert census(candidate).unsafe == ["posix.system"]
        assert runner.classify_source(candidate).findings == ["exported program models/model.json", "posix.system"]
    assert "posix.system" in open_checkpoint(path).unsafe_globals
    assert not marker.exists()


def test_worker_gate_refuses_a_pt2_even_when_the_parent_is_bypassed(tmp_path: pathlib.Path) -> None:
    """The worker checks its own private copy: a request that skipped the parent's check still runs nothing."""
    marker = tmp_path / "ran.marker"
    path = crafted_pt2(tmp_path, "weight", str(marker))
    with pytest.raises(RunError, match=r"refusing to load evil_weight\.pt2 with torch without trust: it would "
                                       r"import and run exported program models/model\.json, posix\.system") as err:
        drain(execute(_request(path, "export", inputs=[{"shape": [2, 4]}]), timeout=120))
    assert err.value.kind == "refused"
    job = Job({"source": "export", "consent": {"main": None}}, emit=lambda event: None)
    for record in ("constant", "sample"):  # the same gate in-process, for the input probe's op too
        with pytest.raises(WorkerError, match="without trust"):
            load_graph(job, "export", crafted_pt2(tmp_path, record, str(marker)), "cpu", "main")
    assert not marker.exists()


def test_trust_covers_exactly_the_findings_that_were_shown(tmp_path: pathlib.Path) -> None:
    """Consent given for other findings (the file changed since the dialog) is refused as a changed file."""
    marker = tmp_path / "ran.marker"
    path = crafted_pt2(tmp_path, "sample", str(marker))
    with pytest.raises(RunError, match=r"changed on disk .*posix\.system, which was not trusted") as err:
        run(RunRequest(path, trust=True, trusted_findings=[], runs=1))
    assert err.value.kind == "changed"
    assert not marker.exists()
    found = census(path)
    with pytest.raises(FileChangedError):
        load_gate.check(found, path, consent=["builtins.eval"])
    load_gate.check(found, path, consent=["exported program models/model.json", "posix.system"])  # as shown


def test_a_file_swapped_after_the_parents_check_is_refused_by_the_worker(tmp_path: pathlib.Path, clean: dict,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent found a clean archive; it is replaced before the worker starts: the worker's own check refuses."""
    marker = tmp_path / "ran.marker"
    target = tmp_path / "model.pt"
    target.write_bytes(pathlib.Path(clean["ts"]).read_bytes())
    evil = crafted_torchscript(tmp_path, "constants.pkl", str(marker))
    real_execute = execute

    def swap_then_execute(*args: object, **kwargs: object):
        os.replace(evil, target)  # after classify_source / check_trust, before the worker reads the file
        return real_execute(*args, **kwargs)

    monkeypatch.setattr(runner, "execute", swap_then_execute)
    ts_code = runner.classify_source(str(target)).findings  # the user consented to the clean program only
    with pytest.raises(RunError, match=r"changed on disk .*posix\.system, which was not trusted") as err:
        run(RunRequest(str(target), inputs=parse_input_specs("2,4"), runs=1, trust=True, trusted_findings=ts_code))
    assert err.value.kind == "changed"
    assert not marker.exists()


@pytest.mark.slow
def test_a_trusted_file_is_what_torch_loads(tmp_path: pathlib.Path) -> None:
    """With --trust, the gate hands the file to torch (which then runs its payload): consent is the only way."""
    marker = tmp_path / "ran.marker"
    path = crafted_pt2(tmp_path, "sample", str(marker))
    with pytest.raises(RunError):  # torch runs the payload, then fails on the bad record
        run(RunRequest(path, trust=True, runs=1))
    assert marker.exists()


# ------------------------------------------------------------------------------------------ TorchScript


@pytest.mark.parametrize("record", TS_RECORDS)
def test_torchscript_pickled_record_is_refused(record: str, tmp_path: pathlib.Path, clean: dict,
                                               capsys: pytest.CaptureFixture) -> None:
    marker = tmp_path / "ran.marker"
    path = crafted_torchscript(tmp_path, record, str(marker))
    assert census(path).unsafe == ["posix.system"]
    assert cli.main(["info", path, "--json"]) == 0  # info and the banner list it too, whichever record
    assert "posix.system" in json.loads(capsys.readouterr().out)["unsafe_globals"]
    assert cli.main(["run", path, "--input-shape", "2,4"]) == 2
    assert "refusing to load this TorchScript archive nobody trusted" in capsys.readouterr().err
    assert not marker.exists()


def test_clean_archives_need_no_consent(clean: dict) -> None:
    """TorchScript's own helpers (torch.jit._pickle.*) and a plain .pt2 pass the census: no false alarm about
    pickles; only the program itself, which running always needs consent for."""
    ts = census(clean["ts"])
    assert ts.unsafe == ts.unreadable == ts.ambiguous == [] and ts.pickles >= 4
    assert "torch.jit._pickle.build_intlist" in ts.globals
    assert ts.findings() == ts.programs and ts.programs[0].startswith("TorchScript code (")
    assert census(clean["pt2"]).findings() == ["exported program models/model.json"]
    assert runner.classify_source(clean["ts"]).findings == ts.programs


def test_legacy_stream_payload_in_any_header_pickle_is_found(tmp_path: pathlib.Path) -> None:
    """torch.load runs the five header pickles of a legacy stream: a payload in any of them is a finding."""
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buffer, _use_new_zipfile_serialization=False)
    legit = buffer.getvalue()
    assert census_bytes(legit).findings() == []
    payload = payload_pickle(str(tmp_path / "x"))
    assert census_bytes(payload + legit).unsafe == ["posix.system"]  # before the magic number
    import pickle

    magic, protocol = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2), pickle.dumps(1001, protocol=2)
    assert census_bytes(magic + protocol + payload).unsafe == ["posix.system"]  # as sys_info
    broken = census_bytes(magic + b"\x80\x02garbage")
    assert broken.unreadable and broken.findings()[0].startswith("unreadable pickle")


# ------------------------------------------------------------------------------------------ --compare


def test_compare_needs_its_own_consent(tmp_path: pathlib.Path, clean: dict, capsys: pytest.CaptureFixture) -> None:
    """`run mine --trust --compare stranger` does not load the stranger under the first file's trust."""
    marker = tmp_path / "ran.marker"
    stranger = tmp_path / "stranger.pth"
    torch.save(Payload(str(marker)), stranger)
    mine = tmp_path / "mine.pt"
    torch.save(Payload(str(tmp_path / "mine.marker")), mine)
    assert cli.main(["run", str(mine), "--trust", "--compare", str(stranger), "--input-shape", "2,4"]) == 2
    assert capsys.readouterr().err == ("ckptview: refusing to load the second checkpoint nobody trusted: loading it "
                                       "imports and runs posix.system; pass --trust-compare to allow\n")
    evil_ts = crafted_torchscript(tmp_path, "constants.pkl", str(marker))
    assert cli.main(["run", clean["ts"], "--trust", "--compare", evil_ts]) == 2
    assert "--trust-compare" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "mine.marker").exists()


@pytest.mark.slow
def test_worker_refuses_an_untrusted_second_checkpoint(tmp_path: pathlib.Path, clean: dict) -> None:
    marker = tmp_path / "ran.marker"
    evil_ts = crafted_torchscript(tmp_path, "data.pkl", str(marker))
    main = runner.classify_source(clean["ts"]).findings
    request = _request(clean["ts"], "torchscript", compare_path=evil_ts, consent={"main": main, "compare": None})
    with pytest.raises(RunError, match=r"without trust: it would import and run TorchScript code .*posix.system") as err:
        drain(execute(request, timeout=120))
    assert err.value.kind == "refused"
    assert not marker.exists()


# ------------------------------------------------------------------------------------------ isolation

SPY = textwrap.dedent('''
    import json, os, sys
    from torch import nn
    import helper  # a sibling module of this file: found beside it

    class Spy(nn.Module):
        def __init__(self, report):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            with open(report, "w") as fh:
                json.dump({"cwd": os.getcwd(), "path": sys.path, "isolated": sys.flags.isolated,
                           "helper": helper.VALUE}, fh)

        def forward(self, x):
            return self.fc(x)
''')


def _plant_shadows(folder: pathlib.Path, marker: pathlib.Path) -> None:
    for name in ("json", "numpy", "torch", "ckptview", "ml_dtypes", "helper_missing"):
        (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r} + ' ')\n")


@pytest.mark.slow
def test_worker_imports_nothing_from_the_callers_folder(tmp_path: pathlib.Path, clean: dict,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """json.py / numpy.py / torch.py in the working directory (and on PYTHONPATH) are never imported."""
    caller, code = tmp_path / "caller", tmp_path / "code"
    caller.mkdir()
    code.mkdir()
    marker = tmp_path / "imported.marker"
    _plant_shadows(caller, marker)
    _plant_shadows(code, marker)  # beside the model file too: its folder only answers what is not installed
    (code / "model.py").write_text(SPY)
    (code / "helper.py").write_text("VALUE = 42\n")
    torch.save({f"fc.{k}": v for k, v in nn.Linear(4, 3).state_dict().items()}, caller / "sd.pt")
    monkeypatch.chdir(caller)
    monkeypatch.setenv("PYTHONPATH", str(caller))
    report = tmp_path / "report.json"
    result = run(RunRequest("sd.pt", model=f"{code / 'model.py'}:Spy", model_kwargs={"report": str(report)},
                            inputs=parse_input_specs("2,4"), runs=1))
    assert result.load.tensors == 2
    seen = json.loads(report.read_text())
    assert seen["isolated"] == 1 and seen["helper"] == 42
    assert seen["cwd"] != str(caller) and not os.path.exists(seen["cwd"])  # a private folder, removed after
    assert not {"", ".", str(caller), str(code)} & set(seen["path"])
    devices = runner.probe_devices(timeout=120)
    assert devices[0].name == "cpu"
    (spec,) = inspect_inputs(clean["pt2"]) or []  # read from the program's JSON: no worker, no torch load
    assert spec.shape == (2, 4) and spec.dtype == "float32"
    assert inspect_inputs(clean["ts"]) is None  # TorchScript code declares no shapes: left for the run
    assert not marker.exists(), marker.read_text()


def test_module_spec_and_trusted_classes_come_from_the_callers_folder_by_name_only(tmp_path: pathlib.Path) -> None:
    """`pkg:factory` is looked up in the caller's folder after the installed packages, and nothing else is."""
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "mymodels.py").write_text("from torch import nn\ndef make():\n    return nn.Linear(4, 3)\n")
    finder_count = len(sys.meta_path)
    try:
        allow_caller_imports({"cwd": str(caller), "model": "mymodels:make",
                                         "consent": {"main": ["json.x", "posix.system"], "compare": None}})
        added = sys.meta_path[finder_count:]
        assert len(added) == 1 and added[0].names == {"mymodels"}  # stdlib names never come from the folder
        assert added[0].find_spec("json") is None and added[0].find_spec("mymodels") is not None
    finally:
        del sys.meta_path[finder_count:]


def test_module_spec_from_the_callers_folder_imports_its_siblings_only_while_it_loads(
        tmp_path: pathlib.Path) -> None:
    """`--model pkgmodel:make` with `import siblinghelper` inside works; json.py beside it is never used."""
    caller = tmp_path / "caller"
    caller.mkdir()
    marker = tmp_path / "imported.marker"
    _plant_shadows(caller, marker)
    (caller / "pkgmodel.py").write_text("import json\nimport siblinghelper\nfrom torch import nn\n"
                                       "def make():\n    return nn.Linear(siblinghelper.WIDTH, 3)\n")
    (caller / "siblinghelper.py").write_text("WIDTH = 5\n")
    count = len(sys.meta_path)
    try:
        allow_caller_imports({"cwd": str(caller), "model": "pkgmodel:make"})
        model = build_user_model("pkgmodel:make", {}, str(caller))
        assert model.in_features == 5
        assert len(sys.meta_path) == count + 1  # the open fallback is gone once the module is imported
    finally:
        del sys.meta_path[count:]
        for name in ("pkgmodel", "siblinghelper"):
            sys.modules.pop(name, None)
    assert not marker.exists()


# ------------------------------------------------------------------------------------------ bounded output


class _HugeLine(io.RawIOBase):
    """A stream of one `size`-byte line and a short one, produced on the fly (nothing held)."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.tail = b"\nshort line\n"

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.left > 0:
            n = min(len(buffer), self.left)
            buffer[:n] = b"x" * n
            self.left -= n
            return n
        n = min(len(buffer), len(self.tail))
        buffer[:n] = self.tail[:n]
        self.tail = self.tail[n:]
        return n


def test_bounded_lines_keep_a_bounded_head_of_a_1_gib_line() -> None:
    lines = list(bounded_lines(io.BufferedReader(_HugeLine(1 << 30)), 100))
    assert lines == [(b"x" * 100, True), (b"short line", False)]


@pytest.mark.slow
def test_a_model_printing_a_huge_line_does_not_grow_the_parent(tmp_path: pathlib.Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A TorchScript forward prints a 32 MiB line: the run works, the parent keeps a short tail of it."""

    class Loud(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            line = "x"
            for _ in range(25):
                line = line + line
            print(line)
            return self.fc(x)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(Loud()), tmp_path / "loud.pt")
    jobs: list[WorkerJob] = []
    original = WorkerJob.__init__

    def keep(self: WorkerJob, request: dict) -> None:
        original(self, request)
        jobs.append(self)

    monkeypatch.setattr(WorkerJob, "__init__", keep)
    result = run(RunRequest(str(tmp_path / "loud.pt"), inputs=parse_input_specs("2,4"), runs=1, warmup=0, trust=True))
    assert result.outputs[0].shape == [2, 2]
    (job,) = jobs
    assert job.stderr_tail and max(len(line) for line in job.stderr_tail) <= MAX_STDERR_LINE + 10
    assert any(line.startswith("xxxx") and line.endswith("[...]") for line in job.stderr_tail)


# ------------------------------------------------------------------------------------------ what runs


QUANT = textwrap.dedent('''
    import warnings
    import torch
    from torch import nn

    def qmlp():
        model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
''')


@pytest.mark.slow
def test_dynamic_quantized_state_dict_runs_as_load_state_dict_would(tmp_path: pathlib.Path) -> None:
    """Module versions (`_metadata`) reach load_state_dict: a quantize_dynamic MLP's state dict runs."""
    (tmp_path / "quant.py").write_text(QUANT)
    sys.path.insert(0, str(tmp_path))
    try:
        import quant

        torch.manual_seed(3)
        saved = quant.qmlp()
        torch.save(saved.state_dict(), tmp_path / "q.pt")
        reference = quant.qmlp()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's own TypedStorage deprecation
            reference.load_state_dict(torch.load(tmp_path / "q.pt", weights_only=True))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("quant", None)
    result = run(RunRequest(str(tmp_path / "q.pt"), model=f"{tmp_path / 'quant.py'}:qmlp",
                            inputs=parse_input_specs("3,20"), runs=1))
    assert result.load.missing == result.load.unexpected == [] and result.warnings == []
    with torch.no_grad():
        expected = reference(to_torch(make_array(InputSpec(shape=(3, 20)), 0, 0), "float32", "cpu"))
    assert result.outputs[0].first == pytest.approx(expected.reshape(-1)[:8].tolist(), abs=1e-6)


@pytest.mark.slow
def test_pt2_with_a_dynamic_batch_runs_with_inputs_in_its_range(tmp_path: pathlib.Path) -> None:
    """Batch constrained to [2, 64], exported with batch 4: the run uses the sample inputs' batch."""
    model = nn.Linear(6, 2).eval()
    batch = torch.export.Dim("batch", min=2, max=64)
    program = torch.export.export(model, (torch.randn(4, 6),), dynamic_shapes=({0: batch},))
    torch.export.save(program, tmp_path / "dyn.pt2")
    result = run(RunRequest(str(tmp_path / "dyn.pt2"), runs=1, trust=True))
    assert result.inputs[0].shape == [4, 6] and result.outputs[0].shape == [4, 2]


def test_dynamic_sizes_are_clamped_into_their_range() -> None:
    class Bounds:
        def __init__(self, lower: object, upper: object) -> None:
            self.lower, self.upper = lower, upper

    class Sym:
        def __init__(self, name: str) -> None:
            self.node = type("Node", (), {"expr": name})()

        def __int__(self) -> int:
            raise TypeError("symbolic")

    ranges = {"s0": Bounds(2, 64), "s1": Bounds(8, 16), "s2": Bounds(0, 1), "s3": Bounds(3, float("inf"))}
    assert [_concrete_size(Sym(n), ranges) for n in ("s0", "s1", "s2", "s3", "s9")] == [2, 8, 1, 3, 2]
    assert _concrete_size(7, ranges) == 7


# ------------------------------------------------------------------------------------------ one door


LOADERS = {("torch", "load"), ("jit", "load"), ("export", "load"), ("pickle", "load"), ("pickle", "loads"),
           ("torch", "_load_obj"), ("_C", "_pickle_load_obj")}


def test_torch_loads_happen_in_the_load_gate_only() -> None:
    """No module but core/worker/load_gate.py calls torch.load, jit.load, export.load or pickle.load(s)."""
    root = pathlib.Path(load_gate.__file__).parents[2]
    callers = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if (owner_name, node.func.attr) in LOADERS:
                    callers.append(f"{path.relative_to(root)}:{node.lineno}")
    assert callers and all(c.startswith("core/worker/load_gate.py:") for c in callers), callers


def test_private_copy_is_owner_only(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "f.bin"
    source.write_bytes(b"abc")
    copy = load_gate.private_copy(str(source), str(tmp_path / "gate"))
    assert pathlib.Path(copy).read_bytes() == b"abc"
    assert os.stat(tmp_path / "gate").st_mode & 0o777 == 0o700 and os.stat(copy).st_mode & 0o777 == 0o600

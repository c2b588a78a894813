"""Drawing a graph never reaches a torch loader: no torch.load, jit.load, export.load, pickle.loads on file bytes,
no library loaded, in this process or in the worker; hostile files leave no marker.

Each source is drawn with every loader replaced by one that fails the test: a .pt2 with a compiled library
beside its program (torch.export.load, in a separate process, does run it: the file is what the test says),
a TorchScript archive whose code writes a file when loaded, records of both replaced by payload pickles, a
full-model pickle, and a hostile state dict beside a config.json that an installed library names (traced by
the worker's graph op, run here in-process under the same guard).
"""

from __future__ import annotations

import ctypes
import json
import pathlib
import pickle
import shutil
import subprocess
import sys
import textwrap
import warnings
import zipfile

import pytest
import torch
from torch import nn

from ckptview.core.graph import ModelGraph, read_graph
from ckptview.core.graph import library as graph_library
from ckptview.core.graph.cache import GraphCache
from ckptview.core.read.open import open_checkpoint
from ckptview.core.run.protocol import Job
from ckptview.core.worker import graph as worker_graph
from ckptview.core.worker import load_gate
from tests.support.crafted import Payload, crafted_pt2, crafted_torchscript, rewrite_zip

GCC = shutil.which("gcc")


@pytest.fixture
def no_loaders(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every way torch or Python would load a file's code or pickles fails the test when reached; a shared
    library is refused when it lies among the test's files (torch itself opens libc for its own imports)."""

    def refuse(*args, **kwargs):
        raise AssertionError("a loader was reached while drawing a graph")

    for owner, name in ((torch, "load"), (torch.jit, "load"), (torch.export, "load"), (pickle, "loads"),
                        (pickle, "load"), (load_gate, "load_with_torch"), (torch.ops, "load_library")):
        monkeypatch.setattr(owner, name, refuse)
    files = str(tmp_path_factory.getbasetemp().resolve())
    real = ctypes.CDLL

    def library(name, *args, **kwargs):
        if name is not None and str(pathlib.Path(str(name)).resolve()).startswith(files):
            raise AssertionError(f"a library of the file was loaded: {name}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(ctypes, "CDLL", library)


def _draw(path: str, cache: GraphCache | None = None) -> ModelGraph:
    checkpoint = open_checkpoint(path)
    try:
        return read_graph(checkpoint, cache=cache)
    finally:
        checkpoint.close()


class Writes(nn.Module):
    """Its TorchScript __setstate__ (run by torch.jit.load) writes a file; its forward is a linear layer."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.target = target
        self.written = torch.zeros(8, dtype=torch.uint8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))

    @torch.jit.export
    def __getstate__(self) -> tuple[str, bool]:
        return (self.target, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[str, bool]) -> None:
        self.target = state[0]
        self.training = state[1]
        self.written = torch.from_file(self.target, True, 8, dtype=torch.uint8)
        self.written.fill_(65)


def _torch_runs(code: str, marker: pathlib.Path) -> bool:
    subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300, check=False)
    return marker.exists()


@pytest.fixture(scope="module")
def base_pt2(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("base") / "base.pt2")
    torch.export.save(torch.export.export(nn.Linear(4, 3).eval(), (torch.randn(2, 4),)), path)
    return path


def _evil_library(tmp_path: pathlib.Path, marker: pathlib.Path) -> pathlib.Path:
    """A shared library whose constructor writes `marker` the moment anything loads it."""
    source = tmp_path / "evil.c"
    source.write_text(textwrap.dedent(f'''
        #include <stdio.h>
        __attribute__((constructor)) static void ran(void) {{
            FILE *f = fopen({json.dumps(str(marker))}, "w");
            if (f) {{ fputs("ran", f); fclose(f); }}
        }}
    '''))
    library = tmp_path / "evil.so"
    subprocess.run([GCC, "-shared", "-fPIC", "-o", str(library), str(source)], check=True, capture_output=True)
    return library


@pytest.mark.slow
@pytest.mark.skipif(GCC is None, reason="needs gcc to build the compiled library")
def test_a_pt2_with_a_compiled_library_draws_with_nothing_loaded(tmp_path, base_pt2, no_loaders) -> None:
    marker = tmp_path / "so.marker"
    library = _evil_library(tmp_path, marker)
    metadata = json.dumps({"AOTI_DEVICE_KEY": "cpu"}).encode()
    path = rewrite_zip(base_pt2, str(tmp_path / "aoti.pt2"), {}, add={
        "data/aotinductor/model/evil.so": library.read_bytes(),
        "data/aotinductor/model/evil_metadata.json": metadata,
        "data/aotinductor/model/wrapper_metadata.json": metadata})
    graph = _draw(path)
    assert [n.op for n in graph.nodes] == ["input", "aten.linear.default", "output"]
    assert graph.notes == ["native code present: data/aotinductor/model/evil.so (a compiled library of the "
                           "program; never loaded, the graph is the program's JSON)"]
    assert not marker.exists()
    assert _torch_runs(f"import torch\ntry:\n    torch.export.load({path!r})\nexcept Exception:\n    pass", marker)


@pytest.mark.skipif(GCC is None, reason="needs gcc to build the compiled library")
def test_a_package_of_only_a_compiled_library_is_one_line_naming_it(tmp_path, no_loaders, capsys) -> None:
    """The layout `aoti_compile_and_package` writes (its generated sources first, no models/*.json): crafted
    here, as compiling one takes a minute. No program to draw: one line naming the library, nothing loaded."""
    from ckptview import cli

    marker = tmp_path / "only.marker"
    library = _evil_library(tmp_path, marker)
    path = tmp_path / "aoti_only.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/data/aotinductor/model/wrapper.cpp", "// generated\n" * 400)
        z.writestr("pkg/data/aotinductor/model/evil.so", library.read_bytes())
        z.writestr("pkg/archive_format", "pt2")
        z.writestr("pkg/archive_version", "1")
        z.writestr("pkg/byteorder", "little")
    assert cli.main(["graph", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no models/*.json program" in err
    assert "its native code: data/aotinductor/model/evil.so" in err
    assert not marker.exists()


@pytest.mark.slow
def test_torchscript_code_that_writes_a_file_when_loaded_draws_with_nothing_run(tmp_path, no_loaders) -> None:
    marker = tmp_path / "written.marker"
    path = str(tmp_path / "writes.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(Writes(str(marker))), path)
    marker.unlink(missing_ok=True)
    graph = _draw(path)
    # Its __getstate__ keeps no weights: the submodule is known from the class's annotation alone.
    assert [(n.op, n.module, n.params) for n in graph.nodes[1:-1]] == [("aten.linear", "fc", ()),
                                                                       ("aten.relu", "", ())]
    assert not marker.exists()
    assert _torch_runs(f"import torch\ntorch.jit.load({path!r})", marker)


@pytest.mark.parametrize("record", ["weight", "constant", "sample", "opaque"])
def test_pt2_records_that_are_payload_pickles_run_nothing(tmp_path, record, no_loaders) -> None:
    marker = tmp_path / f"{record}.marker"
    graph = _draw(crafted_pt2(tmp_path, record, str(marker)))
    assert "aten.linear.default" in [n.op for n in graph.nodes]
    assert not marker.exists()


@pytest.mark.parametrize("record", ["constants.pkl", "*.debug_pkl"])
def test_torchscript_records_that_are_payload_pickles_run_nothing(tmp_path, record, no_loaders) -> None:
    marker = tmp_path / "ts.marker"
    graph = _draw(crafted_torchscript(tmp_path, record, str(marker)))
    assert [n.op for n in graph.nodes] == ["input", "aten.linear", "output"]
    assert not marker.exists()


def test_a_full_model_pickle_is_drawn_from_its_names_and_runs_nothing(tmp_path, no_loaders) -> None:
    marker = tmp_path / "pickle.marker"
    path = tmp_path / "full.pth"
    torch.save({"fc.weight": torch.zeros(2, 2), "hook": Payload(str(marker))}, path)
    graph = _draw(str(path))
    assert graph.source == "inferred" and [n.params for n in graph.nodes if n.params] == [("fc.weight",)]
    assert "a state dict holds no graph" in graph.notes[0]  # a dict of tensors (and a payload): no module
    assert not marker.exists()


def test_the_workers_graph_op_reads_no_file_and_loads_nothing(tmp_path, monkeypatch, no_loaders) -> None:
    """The worker's half, in this process under the same guard: a hostile state dict beside the config of a
    library's architecture is drawn from the config and the key names; the weights' pickle runs nowhere."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    folder = tmp_path / "hostile_llama"
    folder.mkdir()
    config.architectures = ["LlamaForCausalLM"]
    config.to_json_file(str(folder / "config.json"))
    marker = tmp_path / "weights.marker"
    with torch.device("meta"):
        keys = list(transformers.LlamaForCausalLM(config).state_dict())
    state = {k: torch.zeros(1) for k in keys}
    state["_evil"] = Payload(str(marker))  # a pickle torch.load(weights_only=False) would run
    torch.save(state, folder / "pytorch_model.bin")
    answers = []

    def in_process(request, timeout, token=None):
        assert "path" not in request and str(folder) not in json.dumps(request)
        answers.append(worker_graph.graph_job(Job(request, lambda message: None)))
        return answers[-1]
        yield

    monkeypatch.setattr(graph_library, "execute", in_process)
    cache = GraphCache(str(tmp_path / "c.sqlite3"))
    graph = _draw(str(folder / "pytorch_model.bin"), cache)
    cache.close()
    assert answers and answers[0]["tracer"] == "torch.export"
    assert graph.source == "transformers:LlamaForCausalLM"
    assert set(graph.placed()) == set(keys) and graph.unread == []
    assert not marker.exists()


def test_the_worker_falls_back_to_fx_where_export_cannot_trace(monkeypatch) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    monkeypatch.setattr(worker_graph, "build", lambda arch, device, dtype, expect=None: model)

    def no_export(*args, **kwargs):
        raise RuntimeError("data-dependent control flow")

    monkeypatch.setattr(torch.export, "export", no_export)
    request = {"architecture": {"library": "torchvision", "class": "tiny", "config": {}},
               "inputs": [{"shape": [2, 4], "dtype": "float32", "name": "x"}]}
    answer = worker_graph.graph_job(Job(request, lambda message: None))
    assert answer["tracer"] == "torch.fx"
    assert [(n["op"], n["params"]) for n in answer["graph"]["nodes"]] == [
        ("input", []), ("torch.nn.modules.linear.Linear", ["0.weight", "0.bias"]),
        ("torch.nn.modules.activation.ReLU", []), ("output", [])]
    assert answer["model_keys"] == ["0.weight", "0.bias"] and answer["aliases"] == []

"""Typed run results: `ckptview run --json` prints what it printed before they were typed, and the parent
checks what the worker sends."""

from __future__ import annotations

import json
import pathlib

import pytest

from ckptview.core.run.json_checks import ProtocolError
from ckptview.core.run.protocol import PhaseEvent, ResultMessage, parse_message
from ckptview.core.run.result import (
    InputReport,
    LoadReport,
    OutputDiff,
    RunResult,
    ShapeMismatch,
    result_json_text,
)
from tests.support.paths import DATA
from tests.support.run_json_cases import cases, make_files, outcome, run_cli

RECORDED = DATA / "run_json_mlp.json"


@pytest.fixture(scope="module")
def mlp_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("runjson")
    return folder, make_files(folder)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["state_dict_compare", "meta_compare", "partial_load", "no_weights",
                                  "nested_outputs", "torchscript_graph"])
def test_cli_json_is_unchanged(case: str, mlp_files: tuple[pathlib.Path, dict[str, str]]) -> None:
    """Every key in its order, every string and integer, the stderr lines and exit status, as recorded."""
    folder, files = mlp_files
    expected = json.loads(RECORDED.read_text())[case]
    assert outcome(cases(files)[case], folder) == expected


def test_json_round_trips_byte_for_byte(mlp_files: tuple[pathlib.Path, dict[str, str]]) -> None:
    """Parsing the printed JSON into a RunResult and printing it again gives the same text, and attributes
    read the same values as the keys."""
    _, files = mlp_files
    status, text, _ = run_cli(cases(files)["state_dict_compare"])
    assert status == 0
    result = RunResult.from_json(json.loads(text))
    assert result_json_text(result) == text.rstrip("\n")
    data = json.loads(text)
    assert result.load.tensors == data["load"]["tensors"] == 4
    assert result.outputs[0].stats is not None and result.outputs[0].stats.mean == data["outputs"][0]["stats"]["mean"]
    assert result.latency_ms.runs == 2 and result.compare is not None
    assert result.compare.load.stripped_prefixes == ["module."] and result.compare.diff[0].equal is False
    assert result["load"]["tensors"] == 4 and set(result.outputs[0]) == set(data["outputs"][0])  # dict-style reads


def test_optional_keys_are_left_out_when_they_do_not_apply() -> None:
    load = LoadReport(tensors=2, bytes_moved=8, mismatched=["w"], mismatched_shapes={"w": ShapeMismatch([2], [3])})
    assert list(load.to_json()) == ["missing", "unexpected", "mismatched", "mismatched_shapes", "stripped_prefixes",
                                    "state_dict_key", "tensors", "bytes_moved", "unplaced"]
    assert load.to_json()["mismatched_shapes"] == {"w": {"checkpoint": [2], "model": [3]}}
    assert "loader" not in load and load.get("loader") is None
    assert LoadReport.from_json(load.to_json()) == load
    meta = OutputDiff("out", [2], None, note="meta: no values")
    assert meta.to_json() == {"name": "out", "shape": [2], "equal": None, "note": "meta: no values"}
    from_file = InputReport(shape=[2, 3], dtype="float32", name="x", origin="file")
    assert from_file.to_json() == {"name": "x", "shape": [2, 3], "dtype": "float32", "origin": "file"}
    assert InputReport.from_json(from_file.to_json()) == from_file


@pytest.mark.parametrize("bad", [
    {"device": 3},
    {"device": "cpu", "load_seconds": "fast"},
    {"device": "cpu", "load_seconds": 0.1, "load": [], "latency_ms": {}},
    {"device": "cpu", "load_seconds": 0.1, "load": {"missing": "x"}},
    {"device": "cpu", "load_seconds": 0.1, "load": {"tensors": True}},
    {"device": "cpu", "load_seconds": 0.1, "load": {}, "outputs": [{"name": "o", "shape": ["2"]}]},
    {"device": "cpu", "load_seconds": 0.1, "load": {}, "outputs": [], "latency_ms": {"median": None}},
    {"device": "cpu", "outputs": [{"name": "o", "shape": [2], "stats": {"mean": "1"}}]},
])
def test_malformed_results_are_refused_with_where(bad: dict) -> None:
    with pytest.raises(ProtocolError, match=r"^result|^load|^outputs|^latency_ms"):
        RunResult.from_json(bad)


def test_worker_messages_parse_and_bound() -> None:
    assert parse_message(b'{"event": "phase", "phase": "loading"}') == PhaseEvent("loading")
    assert parse_message(json.dumps({"event": "phase", "phase": "x" * 10_000})) == PhaseEvent("x" * 100)
    for noise in (b"user print", b"[1, 2]", b'{"event": "phase"}', b"{" * 100_000):
        assert parse_message(noise) is None
    ok = parse_message(b'{"event": "result", "ok": true, "devices": []}')
    assert ok == ResultMessage(True, {"devices": []})
    failed = parse_message(json.dumps({"event": "result", "ok": False, "error": "boom", "kind": "oom",
                                       "traceback": "Traceback ...", "load": {"tensors": 4}}))
    assert isinstance(failed, ResultMessage) and not failed.ok and failed.kind == "oom"
    partial = failed.partial()
    assert partial.load is not None and partial.load.tensors == 4 and partial.traceback == "Traceback ..."
    garbled = parse_message(b'{"event": "result", "ok": false, "error": 7, "load": {"missing": 1}}')
    assert isinstance(garbled, ResultMessage) and garbled.error == "the worker failed"
    assert garbled.partial().load is None


def test_records_read_like_the_dicts_they_replace() -> None:
    """Scripts written against the dict form keep working: keys, get, `in`, equality with the JSON dict."""
    data = {"device": "cpu", "source": "state_dict", "load_seconds": 0.5,
            "load": {"missing": ["a"], "tensors": 3, "unplaced": [{"name": "x", "reason": "dtype"}]},
            "outputs": [{"name": "out", "shape": [2], "dtype": "float32", "device": "cpu",
                         "stats": {"mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0, "nan": 0, "inf": 0, "numel": 2},
                         "first": [1.0, 1.0]}],
            "latency_ms": {"median": 1.5, "min": 1.0, "max": 2.0, "runs": 3, "warmup": 1}}
    result = RunResult.from_json(data)
    assert result.load.unplaced[0].reason == "dtype" and result.load["unplaced"][0] == {"name": "x", "reason": "dtype"}
    assert result["outputs"][0]["stats"]["numel"] == 2 and "compare" not in result and result.get("compare") is None
    assert result.latency_ms == {"median": 1.5, "min": 1.0, "max": 2.0, "runs": 3, "warmup": 1}
    assert result.latency_ms != {"median": 1.5} and result.load != result.latency_ms
    assert RunResult.from_json(result.to_json()) == result
